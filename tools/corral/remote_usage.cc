#include "tools/corral/remote_usage.h"

namespace corral::cli {

const char* SandboxUsage() {
  return "usage: corral sandbox COMMAND [OPTIONS]\n"
         "\n"
         "  create [--name N] [--memory SIZE] [--cpus N] [--pids N] [--disk SIZE]\n"
         "         [--idle-timeout DURATION] [--snapshot SNAP] [--no-start]\n"
         "                           create a sandbox (with a copy of SNAP's files); prints its id\n"
         "  ls                       your sandboxes: ID NAME STATE IMAGE CREATED\n"
         "  get ID                   one sandbox, as JSON\n"
         "  rm ID...                 destroy sandboxes and their files\n"
         "  start ID | stop ID       start or stop (files stay)\n"
         "  snapshot ID              copy its writable layer; prints the snapshot id\n"
         "  fork ID [--name N] [--no-start]   a new sandbox from a copy of its layer; prints its id\n"
         "  snapshots                your snapshots: ID SANDBOX SIZE CREATED\n"
         "  rm-snapshot SNAP...      delete snapshots\n"
         "\n"
         "  --json                   print the daemon's JSON instead\n"
         "  --url URL                corrald (default: $CORRAL_URL, else http://127.0.0.1:7878)\n"
         "  --token JWT              your token (default: $CORRAL_TOKEN)\n"
         "SIZE takes K/M/G suffixes; DURATION is seconds or 30s, 15m, 1h, 1d (0: never).\n";
}

const char* PromptUsage() {
  return "usage: corral prompt [OPTIONS] \"TEXT\"\n"
         "\n"
         "Runs one turn of a Claude Code agent in a sandbox and streams its work: its text, each tool\n"
         "call and result, and at the end the turn's cost as the model relay metered it. Exits 0\n"
         "when the turn succeeded, 1 when it did not, 2 when corrald refused.\n"
         "\n"
         "  --sandbox ID         the sandbox (default: your newest running one)\n"
         "  --resume SES         continue that session (its history) instead of a new one\n"
         "  --model MODEL        the model the agent asks for\n"
         "  --keep               leave the session running after the turn (for `--resume`, later)\n"
         "  --json               print the session's events as they come, one JSON object a line\n"
         "  --url URL, --token JWT   as for corral sandbox\n";
}

const char* ExecUsage() {
  return "usage: corral exec [OPTIONS] SANDBOX -- CMD [ARGS...]\n"
         "\n"
         "Runs CMD in a running sandbox, streams its output, and exits with its exit code (128+N\n"
         "for signal N, 137 when a limit killed it, 125 when it could not be started or corrald\n"
         "refused). SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to it.\n"
         "\n"
         "  --env K=V            environment variable (repeatable)\n"
         "  --cwd DIR            working directory (default: the user's home)\n"
         "  --user agent|root    user inside (default: agent)\n"
         "  -i, --stdin          forward this terminal's stdin (EOF closes CMD's stdin)\n"
         "  -t, --tty            run CMD on a terminal of this terminal's size\n"
         "  --outcome-json FILE  write the outcome as JSON ('-' for stderr)\n"
         "  --url URL, --token JWT   as for corral sandbox\n";
}

const char* ShellUsage() {
  return "usage: corral shell [OPTIONS] SANDBOX [-- CMD [ARGS...]]\n"
         "\n"
         "An interactive terminal in a running sandbox (default CMD: /bin/bash -l). Exits with\n"
         "the shell's exit code. Needs a token with the `terminal` scope.\n"
         "\n"
         "  --user agent|root    user inside (default: agent)\n"
         "  --env K=V, --cwd DIR as for corral exec\n"
         "  --url URL, --token JWT   as for corral sandbox\n";
}

const char* CpUsage() {
  return "usage: corral cp [-r] SRC DST\n"
         "\n"
         "Copies a file (or with -r a directory) between the host and a running sandbox; exactly\n"
         "one of SRC and DST is SANDBOX:/absolute/path (a host path with ':' in it: ./a:b).\n"
         "A DST that is an existing directory receives SRC under its own name.\n"
         "\n"
         "  -r, --recursive      copy directories (as tar archives); symlinks are copied as\n"
         "                       symlinks, never followed\n"
         "  --url URL, --token JWT   as for corral sandbox\n";
}

const char* AdminUsage() {
  return "usage: corral admin issuer add NAME    create an issuer; prints its secret (once)\n"
         "       corral admin issuer rm NAME     delete it; its tokens stop working at once\n"
         "       corral admin issuer ls [--json] list issuers\n"
         "       corral token mint --issuer NAME --user ID [--ttl 1h] [--scope \"exec files\"]\n"
         "                         [--budget-usd 5 [--budget-window hour|day|week|month]]\n"
         "                                       mint a token (prints it)\n"
         "\n"
         "These talk to corrald's admin socket (root only):\n"
         "  --admin-socket PATH  default: $CORRAL_ADMIN_SOCKET, else /run/corral/admin.sock\n"
         "Scopes: sandboxes, exec, terminal, files (default: all four).\n";
}

}  // namespace corral::cli
