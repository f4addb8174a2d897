#include "api/auth_mapping.h"

#include <cmath>

namespace corral::api {

supervisor::Budget BudgetOfToken(const AuthContext& auth) {
  supervisor::Budget budget;
  const TokenBudget& b = auth.claims.budget;
  if (b.ai_usd) budget.ai_micro_usd = static_cast<int64_t>(std::llround(*b.ai_usd * 1e6));
  if (b.compute_s) budget.compute_ms = static_cast<int64_t>(std::llround(*b.compute_s * 1e3));
  if (!b.window.empty()) {
    auto window = supervisor::ParseWindow(b.window);
    if (window.ok()) budget.window = *window;
  }
  budget.window_start = b.window_start;
  return budget;
}

supervisor::Caller CallerOfToken(const AuthContext& auth) {
  supervisor::Caller caller;
  caller.admin = auth.admin;
  caller.iss = auth.admin ? kAdminCallerIssuer : auth.iss;
  caller.sub = auth.admin ? "admin" : auth.sub;
  if (!auth.admin) caller.budget = BudgetOfToken(auth);
  return caller;
}

supervisor::UserCaps CapsOfToken(const AuthContext& auth) {
  supervisor::UserCaps caps;
  if (auth.admin) return caps;
  const TokenLimits& l = auth.claims.limits;
  caps.sandboxes = l.sandboxes;
  caps.memory_bytes = l.memory_bytes;
  caps.cpu_millicores = l.cpu_millicores;
  caps.pids = l.pids;
  caps.disk_bytes = l.disk_bytes;
  caps.idle_timeout_s = l.idle_timeout_s;
  caps.commands = l.commands;
  caps.sessions = l.sessions;
  caps.egress_json = l.egress_json;
  caps.full_network = auth.claims.HasScope(kScopeUnsafeFullNetwork);
  return caps;
}

bool TokenHasScope(const AuthContext& auth, const char* scope) { return auth.admin || auth.claims.HasScope(scope); }

}  // namespace corral::api
