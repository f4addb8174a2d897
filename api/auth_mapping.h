// What a verified token means to the supervisor: the caller, the caps its `limits` set, the budget
// its `budget` sets, and its scopes. Shared by the API's route files.
#pragma once

#include "api/auth_context.h"
#include "supervisor/budget.h"
#include "supervisor/sandbox_manager.h"

namespace corral::api {

// The admin socket's caller: every sandbox, no budget of its own.
inline constexpr char kAdminCallerIssuer[] = "corral-admin";

// The token's budget, as the relay enforces it (no window: a day).
supervisor::Budget BudgetOfToken(const AuthContext& auth);
supervisor::Caller CallerOfToken(const AuthContext& auth);
supervisor::UserCaps CapsOfToken(const AuthContext& auth);
// The admin socket has every scope.
bool TokenHasScope(const AuthContext& auth, const char* scope);

}  // namespace corral::api
