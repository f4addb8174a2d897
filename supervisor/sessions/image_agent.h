// Agent sessions in image sandboxes: Claude Code from the daemon's runtime (claude_runtime.h)
// instead of the image's PATH.
#pragma once

#include "common/status.h"
#include "supervisor/sandboxes/sandbox_manager.h"

namespace corral::supervisor {

// Whether the root `root` (an O_PATH directory fd: a sandbox's /) has a bash or a zsh where
// Claude Code looks for one (/bin, /usr/bin, /usr/local/bin), resolved inside that root.
bool HasAgentShell(int root);

// For a sandbox of an image (not "host"): `spec.argv`, a host command line ("claude", its
// arguments...), becomes the runtime loader's (ClaudeLoaderArgv() then the arguments), and when
// the running sandbox has no bash or zsh, CLAUDE_CODE_SHELL names the runtime's static bash
// (kClaudeFallbackShell; without it Claude Code's Bash tool says it found no shell). ENOTSUP when the daemon has no runtime (`runtime` false: Claude Code is
// not installed on the host). Host sandboxes: nothing changes.
Status UseClaudeRuntime(SandboxManager& manager, const Caller& caller, const SandboxRow& sandbox, bool runtime,
                        ExecSpec& spec);

}  // namespace corral::supervisor
