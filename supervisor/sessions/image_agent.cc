#include "supervisor/sessions/image_agent.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "isolation/sandbox_spec.h"
#include "rootfs/scoped_path.h"
#include "supervisor/sandboxes/claude_runtime.h"

namespace corral::supervisor {

bool HasAgentShell(int root, bool or_zsh) {
  for (const char* path : {"bin/bash", "usr/bin/bash", "usr/local/bin/bash", "bin/zsh", "usr/bin/zsh",
                           "usr/local/bin/zsh"}) {
    if (!or_zsh && strstr(path, "zsh") != nullptr) break;
    UniqueFd node = rootfs::OpenInRoot(root, path, O_PATH);
    struct stat st;
    if (node && fstat(node.get(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111) != 0) return true;
  }
  return false;
}

Status UseClaudeRuntime(SandboxManager& manager, const Caller& caller, const SandboxRow& sandbox,
                        const AgentRuntime& runtime, ExecSpec& spec) {
  if (sandbox.image.empty() || sandbox.image == isolation::kHostImage) return Status();
  if (!runtime.staged) {
    return Status::Error("sandbox " + sandbox.id + " runs image " + (sandbox.image_name.empty() ? sandbox.image : sandbox.image_name) +
                             ": the daemon provides Claude Code to image sandboxes from the host, where it is not "
                             "installed (npm install -g @anthropic-ai/claude-code, then restart corrald)",
                         ENOTSUP);
  }
  if (spec.argv.empty() || spec.argv[0] != "claude") return Status::Error("agent command line without claude", EINVAL);
  std::vector<std::string> argv = ClaudeLoaderArgv();
  argv.insert(argv.end(), spec.argv.begin() + 1, spec.argv.end());
  spec.argv = std::move(argv);
  // A session's "" is the agent's home here too (its transcripts and resumes are kept by cwd),
  // not the image's working directory, which commands get and which may not be the agent's.
  if (spec.cwd.empty()) spec.cwd = "/home/agent";
  ASSIGN_OR_RETURN(FileAccess files, manager.OpenFiles(caller, sandbox.id));
  if (runtime.exec && (runtime.bash || HasAgentShell(files.root.get(), /*or_zsh=*/false))) {
    spec.env.push_back(std::string("CLAUDE_CODE_SHELL=") + kClaudeShellInSandbox);
  } else if (!HasAgentShell(files.root.get())) {
    spec.env.push_back(std::string("CLAUDE_CODE_SHELL=") + kClaudeFallbackShell);
  }
  return Status();
}

}  // namespace corral::supervisor
