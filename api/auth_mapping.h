// What a verified token means to the supervisor: the caller (with the budget its `budget` sets),
// the caps its `limits` and scopes set, and its scopes. The claims are already the supervisor's
// values (api/jwt.h): nothing is converted here. Shared by the API's route files.
#pragma once

#include "api/auth_context.h"
#include "supervisor/relay/budget.h"
#include "supervisor/sandboxes/sandbox_manager.h"

namespace corral::api {

// The admin socket's caller: every sandbox, no budget of its own.
inline constexpr char kAdminCallerIssuer[] = "corral-admin";

supervisor::Caller CallerOfToken(const AuthContext& auth);
supervisor::UserCaps CapsOfToken(const AuthContext& auth);
// The admin socket has every scope.
bool TokenHasScope(const AuthContext& auth, const char* scope);

}  // namespace corral::api
