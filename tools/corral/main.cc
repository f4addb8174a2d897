// corral: the command-line client. `corral run` and `corral gc` drive the sandbox engine on
// this host; `sandbox`, `exec`, `shell` and `cp` talk to corrald over its HTTP + WebSocket API;
// `admin`, `token` and `image` talk to corrald's admin socket.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tools/corral/backup_command.h"
#include "tools/corral/cp_command.h"
#include "tools/corral/doctor_command.h"
#include "tools/corral/exec_command.h"
#include "tools/corral/image_build_command.h"
#include "tools/corral/image_command.h"
#include "tools/corral/execute_command.h"
#include "tools/corral/remote_commands.h"
#include "tools/corral/remote_options.h"
#include "tools/corral/prompt_command.h"
#include "tools/corral/remote_usage.h"
#include "tools/corral/run_command.h"
#include "tools/corral/run_options.h"
#include "tools/corral/secret_command.h"
#include "tools/corral/usage_command.h"

namespace {

constexpr char kUsage[] =
    "usage: corral <command> [ARGS...]\n"
    "\n"
    "sandboxes on this host (root):\n"
    "  run [OPTIONS] -- CMD [ARGS...]   run CMD in a fresh sandbox (corral run --help)\n"
    "  gc                               remove what killed runs left behind\n"
    "\n"
    "sandboxes in corrald (--url, --token; corral <command> --help):\n"
    "  sandbox create|ls|get|rm|start|stop|snapshot|fork|snapshots|rm-snapshot\n"
    "                                   manage your sandboxes and snapshots\n"
    "  exec [OPTIONS] SANDBOX -- CMD    run CMD in a sandbox, streaming its output\n"
    "  prompt [OPTIONS] \"TEXT\"          one turn of a Claude Code agent in a sandbox, streamed\n"
    "  shell SANDBOX [-- CMD]           an interactive terminal in a sandbox\n"
    "  cp [-r] SRC DST                  copy between the host and SANDBOX:/path\n"
    "  execute --repo DIR \"TASK\"        an agent works on a copy of a git repository; its\n"
    "                                   changes come back as a diff and a bundle to git fetch\n"
    "  git diff|bundle SANDBOX          git out of a sandbox: the work tree's diff, or a bundle\n"
    "  usage                            what you spent in this budget window (AI, compute)\n"
    "  secret put|ls|rm [NAME]          credentials the egress proxy adds for your sandboxes\n"
    "                                   (--issuer ISS: an issuer's, on the admin socket)\n"
    "\n"
    "operating corrald (its admin socket, root):\n"
    "  doctor [--json]                  check that this host can run corrald (OK, WARN, FAIL)\n"
    "  admin issuer add|rm|ls|rotate NAME   manage the issuers of tokens\n"
    "  admin token revoke JTI           refuse a token from now on (open connections too)\n"
    "  admin node ls|drain|undrain [ID] the fleet's nodes; a drained node takes no new sandboxes\n"
    "                                   (drain --move: and moves its stopped ones to other nodes)\n"
    "  admin stop-all                   stop every running sandbox (before removing corral)\n"
    "  admin usage [--issuer N] [--format csv|jsonl]   export the ledger\n"
    "  admin backup FILE                an online copy of the store (restore: corrald stopped)\n"
    "  image import|pull|build|ls|inspect|tag|rm|prune   the images sandboxes are made of\n"
    "  token mint --issuer NAME --user ID   mint a token\n"
    "\n"
    "  version                          print the version\n";

// Parses with `parse`; on --help prints `usage`; on an error prints it and returns
// `usage_error`; else runs `run`.
template <typename Parse, typename Run>
int Dispatch(const char* name, const std::vector<std::string>& args, Parse parse, const char* usage,
             int usage_error, Run run) {
  auto options = parse(args, corral::cli::ProcessEnv());
  if (!options.ok()) {
    fprintf(stderr, "corral %s: %s\n", name, options.status().ToString().c_str());
    return usage_error;
  }
  if (options->help) {
    fputs(usage, stdout);
    return 0;
  }
  return run(*options);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace corral::cli;
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
    fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "run") return RunMain(args);
  if (command == "gc") return RunGc(DefaultRunEnvironment());
  if (command == "doctor") return Dispatch("doctor", args, ParseDoctorOptions, DoctorUsage(), 2, RunDoctorCommand);
  // exec and shell exit with the command's code, so their own errors are 125 (as `corral run`).
  if (command == "sandbox") {
    return Dispatch("sandbox", args, ParseSandboxOptions, SandboxUsage(), 2, RunSandboxCommand);
  }
  if (command == "exec") return Dispatch("exec", args, ParseExecOptions, ExecUsage(), 125, RunExecCommand);
  if (command == "shell") return Dispatch("shell", args, ParseShellOptions, ShellUsage(), 125, RunExecCommand);
  if (command == "prompt") return Dispatch("prompt", args, ParsePromptOptions, PromptUsage(), 2, RunPromptCommand);
  if (command == "cp") return Dispatch("cp", args, ParseCpOptions, CpUsage(), 2, RunCpCommand);
  if (command == "execute") {
    return Dispatch("execute", args, ParseExecuteOptions, ExecuteUsage(), 2, RunExecuteCommand);
  }
  if (command == "git") return Dispatch("git", args, ParseGitOptions, GitUsage(), 2, RunGitCommand);
  if (command == "usage") return Dispatch("usage", args, ParseUsageOptions, UsageUsage(), 2, RunUsageCommand);
  if (command == "secret") return Dispatch("secret", args, ParseSecretOptions, SecretUsage(), 2, RunSecretCommand);
  if (command == "admin" && !args.empty() && args[0] == "usage") {
    return Dispatch("admin usage", std::vector<std::string>(args.begin() + 1, args.end()), ParseLedgerExportOptions,
                    LedgerExportUsage(), 2, RunLedgerExportCommand);
  }
  if (command == "admin" && !args.empty() && (args[0] == "backup" || args[0] == "restore")) {
    return Dispatch(args[0] == "backup" ? "admin backup" : "admin restore", args, ParseBackupOptions, BackupUsage(), 2,
                    RunBackupCommand);
  }
  if (command == "image" && !args.empty() && args[0] == "build") {
    return Dispatch("image build", args, ParseImageBuildOptions, ImageBuildUsage(), 2, RunImageBuildCommand);
  }
  if (command == "image") return Dispatch("image", args, ParseImageOptions, ImageUsage(), 2, RunImageCommand);
  if (command == "admin") return Dispatch("admin", args, ParseAdminOptions, AdminUsage(), 2, RunAdminCommand);
  if (command == "token") return Dispatch("token", args, ParseTokenOptions, AdminUsage(), 2, RunAdminCommand);
  if (command == "version" || command == "--version") {
    printf("corral 0.1.0\n");
    return 0;
  }
  fprintf(stderr, "corral: unknown command '%s'\n%s", command.c_str(), kUsage);
  return 2;
}
