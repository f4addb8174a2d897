// Agent sessions in image sandboxes: Claude Code from the daemon's runtime (claude_runtime.h)
// instead of the image's PATH.
#pragma once

#include "common/status.h"
#include "supervisor/sandboxes/sandbox_manager.h"

namespace corral::supervisor {

// What the daemon staged for agents in image sandboxes (claude_runtime.h).
struct AgentRuntime {
  bool staged = false;  // the runtime: loader and libraries (false: no Claude Code on the host)
  bool bash = false;    // its static bash
  bool exec = false;    // corral-claude in it, as `claude` and `shell/bash`
};

// Whether the root `root` (an O_PATH directory fd: a sandbox's /) has a bash (or, with
// `or_zsh`, a zsh) where Claude Code looks for one (/bin, /usr/bin, /usr/local/bin), resolved
// inside that root.
bool HasAgentShell(int root, bool or_zsh = true);

// For a sandbox of an image (not "host"): `spec.argv`, a host command line ("claude", its
// arguments...), becomes the runtime loader's (ClaudeLoaderArgv() then the arguments), and
// CLAUDE_CODE_SHELL names
//  - corral-claude's shell/bash (kClaudeShellInSandbox) when it is staged and there is a bash
//    for it to run (the image's, else the runtime's): Claude Code's find, grep and rg then work;
//  - else, when the running sandbox has no bash or zsh, the runtime's static bash
//    (kClaudeFallbackShell; without it Claude Code's Bash tool says it found no shell).
// ENOTSUP when the daemon has no runtime (Claude Code is not installed on the host). Host
// sandboxes: nothing changes.
Status UseClaudeRuntime(SandboxManager& manager, const Caller& caller, const SandboxRow& sandbox,
                        const AgentRuntime& runtime, ExecSpec& spec);

}  // namespace corral::supervisor
