// RunToEnd: one command in a running sandbox, run to its end for the daemon's own use (git for
// the API's git routes and for headless executions), with its output collected.
//
// The command is an ordinary command of the sandbox (started through SandboxManager::Exec, so it
// counts against the caller's command limit and shows in the sandbox's command list). Everything
// happens on the event loop and nothing blocks it: output arrives as the command's stream events,
// and a timer bounds the wait.
//
// Caps: stdout is kept up to `max_stdout_bytes`. Past it, by default, the command is killed and
// the result is an error with EFBIG; with `truncate_stdout` the rest is read and dropped and the
// result says `truncated`. stderr is kept up to kMaxStderrBytes (its tail is dropped: it is for
// messages). Past `timeout` the command is killed and the result is an error with ETIMEDOUT.
// A command that could not be started is the error SandboxManager::Exec gave (EBUSY when the
// sandbox is not running, EDQUOT above the command limit, ...).
//
// `done` is called exactly once, always later from the event loop (never from inside RunToEnd).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "common/status.h"
#include "supervisor/sandboxes/sandbox_manager.h"

namespace corral::supervisor {

inline constexpr size_t kMaxStderrBytes = 64 << 10;

struct RunToEndOptions {
  size_t max_stdout_bytes = 16 << 20;
  bool truncate_stdout = false;
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
};

struct RunToEndResult {
  nlohmann::json outcome;         // the command's outcome (docs/PROTOCOL.md, "Outcome")
  std::optional<int> exit_code;   // when it exited
  std::string out;
  std::string err;
  bool truncated = false;         // stdout was cut at the cap (truncate_stdout)

  bool succeeded() const { return exit_code.has_value() && *exit_code == 0; }
};

void RunToEnd(boost::asio::io_context& io, SandboxManager& manager, const Caller& caller, const UserCaps& caps,
              const ExecSpec& spec, const RunToEndOptions& options,
              std::function<void(StatusOr<RunToEndResult>)> done);

}  // namespace corral::supervisor
