// The issuers of tokens and the revoked token ids: what the daemon consults to verify every
// request, kept in memory (loaded from the store at start, changed only through this class, each
// change committed to the store first), so that verifying a token costs no store query.
//
// Thread-safe (one mutex): the event loop verifies tokens while admin requests change issuers.
//
// A revocation names a token id (`jti`), for one issuer or for all ("" issuer): from then on a
// token with that id is refused, on open connections too (the API rechecks them), and across
// restarts. Revocations are kept (they are few, and a later token could reuse an id).
//
// In a fleet the store is shared and another node may change issuers and revocations: Refresh
// reads them again (api/issuer_sync.h calls it every node.heartbeat) and says what changed.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "supervisor/store/store.h"

namespace corral::supervisor {

class Issuers {
 public:
  static StatusOr<std::unique_ptr<Issuers>> Load(Store& store);

  // The issuer's secret (its text bytes are the HMAC key), or nullopt when there is none.
  std::optional<std::string> Secret(std::string_view issuer) const;
  // Whether a token of `issuer` with id `jti` is revoked ("" is never revoked: no id).
  bool Revoked(std::string_view issuer, std::string_view jti) const;

  // EEXIST when the name is taken.
  Status Add(const IssuerRow& issuer);
  // ENOENT when there is no such issuer.
  Status Remove(const std::string& name);
  // A new secret for an existing issuer (ENOENT otherwise): tokens signed with the old one stop
  // verifying.
  Status ReplaceSecret(const std::string& name, const std::string& secret);
  StatusOr<std::vector<IssuerRow>> List() const;

  // EEXIST when that (issuer, jti) is revoked already.
  Status Revoke(const RevocationRow& revocation);
  std::vector<RevocationRow> Revocations() const;

  // What the store has that memory did not, after a Refresh.
  struct Changes {
    std::set<std::string> issuers;            // removed, or with another secret: their tokens end
    std::vector<RevocationRow> revocations;   // new ones: their tokens end
    size_t added = 0;                         // issuers that are new here
    bool empty() const { return issuers.empty() && revocations.empty() && added == 0; }
  };
  // Reads the issuers and revocations from the store and takes them as they are there.
  StatusOr<Changes> Refresh();

 private:
  explicit Issuers(Store& store) : store_(store) {}

  Store& store_;
  mutable std::mutex mu_;
  std::map<std::string, std::string, std::less<>> secrets_;
  std::set<std::pair<std::string, std::string>, std::less<>> revoked_;  // (issuer or "", jti)
  std::vector<RevocationRow> revocations_;
};

}  // namespace corral::supervisor
