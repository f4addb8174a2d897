#include "api/issuer_sync.h"

#include <set>
#include <string>

#include "common/log.h"

namespace corral::api {

void IssuerSync::Arm() {
  if (stopped_) return;
  timer_.expires_after(every_);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || stopped_) return;
    SyncOnce();
    Arm();
  });
}

void IssuerSync::SyncOnce() {
  StatusOr<supervisor::Issuers::Changes> changes = issuers_.Refresh();
  if (!changes.ok()) {
    if (!failing_) LogWarn("fleet", "cannot read the issuers again", {{"error", changes.status().ToString()}});
    failing_ = true;
    return;
  }
  failing_ = false;
  if (changes->empty()) return;
  LogInfo("fleet", "issuers changed on another node",
          {{"issuers_ended", std::to_string(changes->issuers.size())},
           {"issuers_added", std::to_string(changes->added)},
           {"revocations", std::to_string(changes->revocations.size())}});
  if (changes->issuers.empty() && changes->revocations.empty()) return;
  server_.Reauthenticate([issuers = std::move(changes->issuers),
                          revocations = std::move(changes->revocations)](const AuthContext& auth) {
    if (issuers.count(auth.iss) != 0) return true;
    for (const supervisor::RevocationRow& r : revocations) {
      if (auth.claims.jti == r.jti && (r.iss.empty() || r.iss == auth.iss)) return true;
    }
    return false;
  });
}

}  // namespace corral::api
