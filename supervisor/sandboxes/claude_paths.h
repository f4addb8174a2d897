// Where the Claude Code runtime is inside image sandboxes (claude_runtime.h): constants only,
// shared by corrald and by corral-claude, the static program the runtime carries.
#pragma once

namespace corral::supervisor {

inline constexpr char kClaudeRuntimeInSandbox[] = "/run/corral/claude";
inline constexpr char kClaudeBinaryInSandbox[] = "/run/corral/bin/claude";
inline constexpr char kClaudeLoaderInSandbox[] = "/run/corral/claude/ld.so";
inline constexpr char kClaudeLibDirInSandbox[] = "/run/corral/claude/lib";
// corral-claude, staged as the runtime's `claude`: Claude Code as an executable of its own.
inline constexpr char kClaudeExecInSandbox[] = "/run/corral/claude/claude";
// corral-claude again, as the agent's shell (CLAUDE_CODE_SHELL; Claude Code takes a path whose
// name is bash or zsh): it points CLAUDE_CODE_EXECPATH at kClaudeExecInSandbox and runs the
// image's bash, else kClaudeFallbackShell.
inline constexpr char kClaudeShellInSandbox[] = "/run/corral/claude/shell/bash";
// The shell of images without bash or zsh (CLAUDE_CODE_SHELL): the runtime's static bash.
inline constexpr char kClaudeFallbackShell[] = "/run/corral/claude/bash";

}  // namespace corral::supervisor
