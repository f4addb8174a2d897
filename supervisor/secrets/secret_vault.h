// Secrets as users and operators keep them, and as sandboxes use them (issue 21; docs/PROTOCOL.md
// "Secrets").
//
// A secret belongs to a user (iss, sub) or to an issuer for all its users (iss, sub ""), and has a
// name that is also the environment variable a sandbox sees it in: never the value there, a
// placeholder. The value is sealed in the store (secret_box.h) with (iss, sub, name) as its
// context, opened only here, and only for the egress proxy's injection (egress/secret_inject.h).
//
// A sandbox names the secrets it may use. A name is looked up among its user's secrets first,
// then among its issuer's: a user may shadow an issuer's secret of the same name. The
// placeholder of a (sandbox, name) is derived from the key (SecretBox::Tag): the same for the life
// of the sandbox, across daemon restarts, on every node that shares the key; worthless
// elsewhere, since the proxy replaces it only in that sandbox's requests to bound hosts.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "supervisor/secrets/secret_binding.h"
#include "supervisor/secrets/secret_box.h"
#include "supervisor/store/store.h"

namespace corral::supervisor {

// A secret opened for one sandbox: what the proxy needs to rewrite its requests.
struct SandboxSecret {
  std::string name;
  std::string placeholder;
  std::vector<SecretBinding> bindings;
  std::string value;
};

// A name: an environment variable's ([A-Za-z_][A-Za-z0-9_]*, at most 64), and not one the daemon
// sets itself (PATH, HOME, the proxy's and the trust store's variables, ANTHROPIC_*, CORRAL_*).
// EINVAL naming the rule.
Status ValidateSecretName(std::string_view name);

// At most this many secrets a user (or an issuer) keeps, and a sandbox names.
inline constexpr size_t kMaxSecretsPerOwner = 100;
inline constexpr size_t kMaxSecretsPerSandbox = 16;

class SecretVault {
 public:
  SecretVault(Store& store, SecretBox box) : store_(store), box_(std::move(box)) {}

  // Stores (or replaces: value and bindings) the secret `name` of (iss, sub); sub "" for the
  // issuer's. EINVAL for a bad name, value or binding; EDQUOT past kMaxSecretsPerOwner.
  Status Put(const std::string& iss, const std::string& sub, const std::string& name, std::string_view value,
             const std::vector<SecretBinding>& bindings);
  // Names and bindings, never values (the rows' `sealed` is cleared).
  StatusOr<std::vector<SecretRow>> List(const std::string& iss, const std::string& sub);
  // ENOENT naming it when the store knows no issuer `iss`.
  Status IssuerKnown(const std::string& iss);
  // ENOENT when absent.
  Status Delete(const std::string& iss, const std::string& sub, const std::string& name);

  // `names` as a sandbox of (iss, sub) asks for them: each valid, known (the user's or the
  // issuer's), none twice, at most kMaxSecretsPerSandbox; sorted. ENOENT naming the first unknown.
  StatusOr<std::vector<std::string>> CheckNames(const std::string& iss, const std::string& sub,
                                                std::vector<std::string> names);
  // The named secrets of a sandbox of (iss, sub), opened. A name no longer stored is left out
  // (its placeholder then goes out as it is); one that does not open is an error.
  StatusOr<std::vector<SandboxSecret>> Open(const std::string& iss, const std::string& sub,
                                            const std::string& sandbox_id, const std::vector<std::string>& names);

  // "corral-placeholder-" and 32 hex digits, for the sandbox's secret `name`.
  std::string Placeholder(const std::string& sandbox_id, const std::string& name) const;

 private:
  // The row's context in the sealed value: a value copied into another row does not open.
  static std::string Context(const std::string& iss, const std::string& sub, const std::string& name);
  StatusOr<std::optional<SecretRow>> Find(const std::string& iss, const std::string& sub, const std::string& name);

  Store& store_;
  SecretBox box_;
};

}  // namespace corral::supervisor
