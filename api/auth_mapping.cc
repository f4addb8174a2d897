#include "api/auth_mapping.h"

namespace corral::api {

supervisor::Caller CallerOfToken(const AuthContext& auth) {
  supervisor::Caller caller;
  caller.admin = auth.admin;
  caller.iss = auth.admin ? kAdminCallerIssuer : auth.iss;
  caller.sub = auth.admin ? "admin" : auth.sub;
  if (!auth.admin) caller.budget = auth.claims.budget;
  return caller;
}

supervisor::UserCaps CapsOfToken(const AuthContext& auth) {
  if (auth.admin) return {};
  supervisor::UserCaps caps = auth.claims.limits;
  caps.full_network = auth.claims.HasScope(kScopeUnsafeFullNetwork);
  return caps;
}

bool TokenHasScope(const AuthContext& auth, const char* scope) { return auth.admin || auth.claims.HasScope(scope); }

}  // namespace corral::api
