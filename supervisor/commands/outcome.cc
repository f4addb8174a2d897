#include "supervisor/commands/outcome.h"

#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace corral::supervisor {

const char* OutcomeName(OutcomeKind kind) {
  switch (kind) {
    case OutcomeKind::kExited: return "exited";
    case OutcomeKind::kSignaled: return "signaled";
    case OutcomeKind::kOomKilled: return "oom_killed";
    case OutcomeKind::kWallTimeout: return "wall_timeout";
    case OutcomeKind::kCpuTimeLimit: return "cpu_time_limit";
    case OutcomeKind::kPidsLimit: return "pids_limit";
    case OutcomeKind::kSetupFailed: return "setup_failed";
    case OutcomeKind::kKilledByRequest: return "killed_by_request";
    case OutcomeKind::kBudgetExhausted: return "budget_exhausted";
    case OutcomeKind::kLost: return "lost";
  }
  return "unknown";
}

Outcome ClassifyOutcome(const OutcomeEvidence& e) {
  Outcome out;
  out.wall_s = static_cast<double>(e.wall_us) / 1e6;
  if (e.setup_failed) {
    out.kind = OutcomeKind::kSetupFailed;
    out.setup_step = e.setup_step;
    out.setup_errno = e.setup_errno;
    return out;
  }
  if (e.lost) out.kind = OutcomeKind::kLost;
  if (e.lost && !e.lost_with_stats) return out;
  out.have_usage = true;
  out.cpu_user_s = static_cast<double>(e.stats.cpu_user_usec) / 1e6;
  out.cpu_sys_s = static_cast<double>(e.stats.cpu_system_usec) / 1e6;
  out.peak_memory_bytes = e.stats.memory_peak_bytes;
  if (e.lost) return out;

  // The command's own status when init reported it; otherwise init's (killed by the launcher,
  // or by the OOM killer, before the command ended).
  const int status = e.command_status.value_or(e.init_status);
  if (WIFEXITED(status)) {
    out.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    out.signal = WTERMSIG(status);
  } else {
    out.signal = SIGKILL;
  }
  const bool succeeded = out.exit_code == 0;
  if (!succeeded && e.stats.oom_kill_count > 0) {
    out.kind = OutcomeKind::kOomKilled;
  } else if (!succeeded && e.stats.pids_max_events > 0) {
    out.kind = OutcomeKind::kPidsLimit;
  } else if (e.killed_at_cpu_limit) {
    out.kind = OutcomeKind::kCpuTimeLimit;
  } else if (e.killed_at_wall_limit) {
    out.kind = OutcomeKind::kWallTimeout;
  } else if (e.killed_for_budget && out.signal) {
    out.kind = OutcomeKind::kBudgetExhausted;
  } else if (e.killed_by_request && out.signal) {
    out.kind = OutcomeKind::kKilledByRequest;
  } else if (out.signal) {
    out.kind = OutcomeKind::kSignaled;
  } else {
    out.kind = OutcomeKind::kExited;
  }
  return out;
}

int ExitCodeFor(const Outcome& outcome) {
  if (outcome.kind == OutcomeKind::kSetupFailed || outcome.kind == OutcomeKind::kLost) return 125;
  if (outcome.exit_code) return *outcome.exit_code;
  return 128 + outcome.signal.value_or(SIGKILL);
}

nlohmann::json OutcomeToJson(const Outcome& outcome) {
  nlohmann::json j;
  j["outcome"] = OutcomeName(outcome.kind);
  if (outcome.exit_code) j["exit_code"] = *outcome.exit_code;
  if (outcome.signal) j["signal"] = *outcome.signal;
  j["wall_s"] = outcome.wall_s;
  if (outcome.have_usage) {
    j["cpu_user_s"] = outcome.cpu_user_s;
    j["cpu_sys_s"] = outcome.cpu_sys_s;
    j["peak_memory_bytes"] = outcome.peak_memory_bytes;
  }
  if (outcome.kind == OutcomeKind::kSetupFailed) {
    j["setup_step"] = outcome.setup_step;
    if (outcome.setup_errno != 0) j["errno"] = ErrnoName(outcome.setup_errno);
  }
  return j;
}

}  // namespace corral::supervisor
