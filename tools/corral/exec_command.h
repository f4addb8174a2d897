// `corral exec` and `corral shell`: one command in a running sandbox over the WebSocket, with the
// local terminal, stdin and signals wired to it (docs/PROTOCOL.md, "WebSocket").
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "tools/corral/remote_options.h"

namespace corral::cli {

struct TerminalSize {
  int rows = 24;
  int cols = 80;
};

// The exec op for `options` (without "id"): sandbox, argv, env, cwd, user, stdin, and with a
// tty, pty {rows, cols}. `term` (the local $TERM) is passed as TERM to a PTY command unless
// --env sets it.
nlohmann::json BuildExecRequest(const ExecOptions& options, const TerminalSize& size,
                                const std::optional<std::string>& term);

// The exit code for an outcome object from corrald: ExitCodeFor (supervisor/commands/outcome.h), as for
// `corral run`: the command's exit code; 128+N for signal N (a number or a name such as "KILL");
// 137 (SIGKILL) for a limit or a kill without a signal given; 125 for setup_failed and lost
// (the daemon does not know how it ended), and for what it cannot read.
int ExitCodeForRemoteOutcome(const nlohmann::json& outcome);

// Runs the command and returns the CLI's exit code: the command's (above), or 125 when it could
// not be run (corrald refused or could not be reached) or corrald dropped some of its stdin.
int RunExecCommand(const ExecOptions& options);

}  // namespace corral::cli
