// corral-claude: Claude Code as an executable of its own in image sandboxes, staged twice in the
// runtime (supervisor/sandboxes/claude_runtime.h): as `claude`, and as `shell/bash`, the agent's
// shell.
//
// There the agent runs through the runtime's loader, so its /proc/self/exe is the loader. Claude
// Code hands that path to its shell as CLAUDE_CODE_EXECPATH, and the shell functions it puts
// over find, grep and rg run it again under another name (`exec -a bfs|ugrep|rg "$path" ...`:
// its embedded bfs, ugrep and ripgrep, chosen by argv[0]). The loader takes no such call: it
// would load "-G" as a program. So:
//  - as the agent's shell (CLAUDE_CODE_SHELL, run as .../shell/bash), it sets
//    CLAUDE_CODE_EXECPATH to the runtime's `claude`, puts that path for the loader's in its
//    arguments (the script that writes the shell snapshot has the loader's path in the
//    functions' text), and runs the image's bash (/bin/bash, /usr/bin/bash,
//    /usr/local/bin/bash), else the runtime's static one. (Not BASH_ENV: bash ignores it when its
//    stdin is a socket, as the agent's shells' is.)
//  - as `claude`, it runs the loader on Claude Code with the name it was called by (ld.so
//    --argv0), so Claude Code sees the call its shell made.
// Which one it is comes from its own path (/proc/self/exe). Static, like corral-init: it runs in
// any image.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "supervisor/sandboxes/claude_paths.h"

namespace paths = corral::supervisor;

namespace {

int Fail(const char* what) {
  fprintf(stderr, "corral-claude: %s: %s\n", what, strerror(errno));
  return 127;
}

// `arg` with every occurrence of the loader's path replaced by the runtime's `claude`.
std::string WithExecPath(std::string arg) {
  const std::string from = paths::kClaudeLoaderInSandbox;
  const std::string to = paths::kClaudeExecInSandbox;
  for (size_t at = arg.find(from); at != std::string::npos; at = arg.find(from, at + to.size())) {
    arg.replace(at, from.size(), to);
  }
  return arg;
}

int Shell(int argc, char** argv) {
  if (setenv("CLAUDE_CODE_EXECPATH", paths::kClaudeExecInSandbox, 1) != 0) return Fail("setenv");
  std::vector<std::string> args(argv, argv + argc);
  std::vector<char*> pointers;
  for (size_t i = 0; i < args.size(); ++i) {
    if (i > 0) args[i] = WithExecPath(std::move(args[i]));
    pointers.push_back(args[i].data());
  }
  pointers.push_back(nullptr);
  for (const char* bash : {"/bin/bash", "/usr/bin/bash", "/usr/local/bin/bash", paths::kClaudeFallbackShell}) {
    if (access(bash, X_OK) == 0) {
      execv(bash, pointers.data());
      return Fail(bash);
    }
  }
  errno = ENOENT;
  return Fail("no bash in this image or the runtime");
}

int Claude(int argc, char** argv) {
  const char* name = argc > 0 && argv[0] != nullptr ? argv[0] : "claude";
  std::vector<const char*> args = {paths::kClaudeLoaderInSandbox, "--inhibit-cache", "--library-path",
                                   paths::kClaudeLibDirInSandbox, "--argv0", name, paths::kClaudeBinaryInSandbox};
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(paths::kClaudeLoaderInSandbox, const_cast<char* const*>(args.data()));
  return Fail(paths::kClaudeLoaderInSandbox);
}

}  // namespace

int main(int argc, char** argv) {
  char self[256];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) self[n] = '\0';
  if (n > 0 && strcmp(self, paths::kClaudeShellInSandbox) == 0) {
    if (argc < 1) return 127;
    return Shell(argc, argv);
  }
  return Claude(argc, argv);
}
