// The outcome of a sandboxed command, read from the kernel and never guessed from an exit code.
//
// ClassifyOutcome() is pure: it takes the evidence the launcher gathered (the command's wait
// status from corral-init, whether the launcher itself killed the sandbox at a limit, and the
// cgroup's own counters) and names what happened. Precedence, for a command that did not exit
// 0: oom_killed (the memory cgroup's oom_kill counter moved), pids_limit (pids.max refused a
// fork), cpu_time_limit and wall_timeout (the launcher killed it), killed_by_request (the
// daemon killed it because a client asked: stop, destroy, a KILL signal), then signaled or
// exited. `lost` is the daemon's word for a command whose end it could not learn (it was
// gone, with its sandbox, when a restarted daemon looked); it carries the CPU and memory figures
// when its cgroup could still be read.
//
// The same taxonomy is used by `corral run`, the daemon's API and its store.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "cgroups/cgroup_backend.h"

namespace corral::supervisor {

enum class OutcomeKind {
  kExited,
  kSignaled,
  kOomKilled,
  kWallTimeout,
  kCpuTimeLimit,
  kPidsLimit,
  kSetupFailed,
  kKilledByRequest,
  kBudgetExhausted,  // the user's compute budget ran out and the sandbox was stopped
  kLost,
};

const char* OutcomeName(OutcomeKind kind);

struct Outcome {
  OutcomeKind kind = OutcomeKind::kExited;
  std::optional<int> exit_code;  // when the command exited
  std::optional<int> signal;     // when a signal ended it (also oom_killed, limits: SIGKILL)
  double wall_s = 0;
  double cpu_user_s = 0;
  double cpu_sys_s = 0;
  uint64_t peak_memory_bytes = 0;
  bool have_usage = false;       // false when setup failed before the sandbox ran
  std::string setup_step;        // setup_failed only
  int setup_errno = 0;
};

struct OutcomeEvidence {
  bool setup_failed = false;
  std::string setup_step;
  int setup_errno = 0;
  // The command's raw wait status as corral-init reported it, if it did.
  std::optional<int> command_status;
  // The wait status of the sandbox's PID 1 (corral-init) as the launcher reaped it.
  int init_status = 0;
  bool killed_at_wall_limit = false;
  bool killed_at_cpu_limit = false;
  bool killed_by_request = false;
  bool killed_for_budget = false;
  bool lost = false;
  bool lost_with_stats = false;  // lost, but its cgroup could still be read: `stats` are its figures
  cgroups::CgroupStats stats;
  uint64_t wall_us = 0;
};

Outcome ClassifyOutcome(const OutcomeEvidence& evidence);

// The exit code `corral run` exits with: the command's code, 128+N for signal N, 125 for a
// setup failure.
int ExitCodeFor(const Outcome& outcome);

// {"outcome": "...", "exit_code", "signal", "wall_s", "cpu_user_s", "cpu_sys_s",
//  "peak_memory_bytes", "setup_step", "errno"}: each field present when it applies.
nlohmann::json OutcomeToJson(const Outcome& outcome);

}  // namespace corral::supervisor
