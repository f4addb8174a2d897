// Claude Code for sandboxes whose image lacks it (issue 18): the host's own binary, bound
// read-only, run by a copy of the host's dynamic loader with the host's libraries, so that it
// runs in any image: a musl or busybox one, with no /lib64 and no glibc of its own.
//
// Claude Code is a native glibc executable (bun-compiled, ~380 MB). Nothing of it is copied:
// at its start corrald stages a small runtime directory (0755, root, a few MB)
//   <run_dir>/claude-runtime/ld.so        the binary's ELF interpreter (PT_INTERP), copied
//                            lib/<soname>  the libraries it needs (DT_NEEDED, transitively),
//                                          copied from the host's library directories
//                            bash          a copy of the host's static bash (Debian's
//                                          bash-static), when it has one: Claude Code's Bash tool
//                                          takes only a bash or a zsh, and its shell snapshot is
//                                          bash syntax (an ash or dash fails on it), so images
//                                          without either (busybox, alpine) get this one
//                            claude        corral-claude (tools/corral-claude), static: Claude
//                                          Code run by the loader under the name it is called by
//                            shell/bash    corral-claude again: the agent's shell, which sets
//                                          CLAUDE_CODE_EXECPATH=that claude and runs a bash
// and each image sandbox gets two read-only binds (SandboxHost::ClaudeBinds):
//   <run_dir>/claude-runtime -> /run/corral/claude
//   the binary (its real path) -> /run/corral/bin/claude   (beside corral-mcp; no nested bind)
// Sessions there run
//   /run/corral/claude/ld.so --inhibit-cache --library-path /run/corral/claude/lib
//       /run/corral/bin/claude -p ...
// The loader never reads the image's /etc/ld.so.cache or its libraries; the agent's own child
// processes (its shell, git, corral-mcp) are the image's and use the image's libraries.
// Claude Code's shell functions over find, grep and rg run its own executable again as bfs,
// ugrep or rg (by argv[0]); its executable being the loader there, the agent's shell
// (shell/bash) points them at corral-claude, which runs the loader with `--argv0`.
// Host sandboxes run `claude` from the host's /usr as before.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "supervisor/sandboxes/claude_paths.h"

namespace corral::supervisor {
// Where the host's static bash is (Debian's bash-static).
inline constexpr char kHostStaticBash[] = "/bin/bash-static";

// What a dynamically linked ELF file needs: its interpreter (PT_INTERP, "" for a library or a
// static executable) and its DT_NEEDED sonames, in order.
struct ElfNeeds {
  std::string interpreter;
  std::vector<std::string> needed;
};

// Reads the program headers and the dynamic section of the 64-bit ELF file `path` (a few
// small preads: the file may be hundreds of MB). EINVAL when it is not a 64-bit ELF file.
StatusOr<ElfNeeds> ReadElfNeeds(const std::string& path);

// A staged runtime: its host directory and the binary it runs.
struct ClaudeRuntime {
  std::string dir;     // <run_dir>/claude-runtime
  std::string binary;  // the real path of the host's Claude Code
  bool has_bash = false;  // <dir>/bash: a static bash for images without one
};

// Stages the runtime for `binary` (a real path) in `dir` (made 0755 if missing; each file is
// written beside its place and renamed there, so a running agent keeps the inodes it mapped).
// Sonames are looked up in `lib_dirs` (the host's, by default), the closure of DT_NEEDED.
// `static_bash`: copied as `bash` when it exists ("" or missing: no bash; has_bash says).
StatusOr<ClaudeRuntime> StageClaudeRuntime(const std::string& binary, const std::string& dir,
                                           const std::string& static_bash = kHostStaticBash,
                                           const std::vector<std::string>& lib_dirs = {
                                               "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                                               "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                                               "/lib64", "/usr/lib64", "/lib", "/usr/lib"});

// Copies `exec` (corral-claude, a static executable) into the staged runtime `dir` as `claude`
// and as `shell/bash`. EINVAL when `exec` is not a static executable; without it (an error
// here), Claude Code's find, grep and rg fail in image sandboxes and the rest works.
Status StageClaudeExec(const std::string& dir, const std::string& exec);

// The head of an agent's command line in an image sandbox, up to and including the binary; the
// Claude Code arguments follow.
std::vector<std::string> ClaudeLoaderArgv();

// Where Claude Code's own arguments start in a stored command line: 1 after "claude" (a host
// sandbox), ClaudeLoaderArgv().size() after the loader's head (an image sandbox), 0 when it is
// neither.
size_t ClaudeArgsStart(const std::vector<std::string>& argv);

}  // namespace corral::supervisor
