#include "tools/corral/remote_usage.h"

namespace corral::cli {

const char* SandboxUsage() {
  return "usage: corral sandbox COMMAND [OPTIONS]\n"
         "\n"
         "  create [--name N] [--memory SIZE] [--cpus N] [--pids N] [--disk SIZE]\n"
         "         [--idle-timeout DURATION] [--snapshot SNAP] [--no-start]\n"
         "         [--image NAME]   an image (corral image ls; default: host, the host's /usr)\n"
         "         [--allow-domain D] [--allow-port P] [--allow-cidr C]   its egress rules\n"
         "         [--secret NAME]   a secret it may use (corral secret; inside: a placeholder)\n"
         "         [--full-network]  a real interface with NAT (needs the token scope\n"
         "                           unsafe:full_network; public addresses only, unless --allow-cidr)\n"
         "                           create a sandbox (with a copy of SNAP's files); prints its id\n"
         "  ls                       your sandboxes: ID NAME STATE IMAGE CREATED\n"
         "  get ID                   one sandbox, as JSON\n"
         "  rm ID...                 destroy sandboxes and their files\n"
         "  start ID | stop ID       start or stop (files stay)\n"
         "  snapshot ID              copy its writable layer; prints the snapshot id\n"
         "  fork ID [--name N] [--no-start]   a new sandbox from a copy of its layer; prints its id\n"
         "  snapshots                your snapshots: ID SANDBOX SIZE CREATED\n"
         "  rm-snapshot SNAP...      delete snapshots\n"
         "  egress ID [--allow-domain D]... [--allow-port P]... [--allow-cidr C]... [--none]\n"
         "                           show its egress rules, or change them (what is not given stays;\n"
         "                           --none: no domains, no ranges)\n"
         "  events ID [--type T] [--after SEQ]   its event log (lifecycle, commands, egress decisions)\n"
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
         "  --allow-host-tools   offer the agent tools that run here, on this machine, in this\n"
         "                       directory: HostBash, HostRead, HostWrite, HostEdit, HostGlob, HostGrep\n"
         "                       (each call asks you first, on the terminal)\n"
         "  --permission-mode M  default|acceptEdits|plan: the agent asks you (here) before the tools\n"
         "                       that mode asks about run in the sandbox (default: it never asks)\n"
         "  -y, --yes            answer yes to every such question\n"
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
         "       corral admin issuer rotate NAME a new secret (printed once); tokens signed with\n"
         "                                       the old one stop working at once\n"
         "       corral admin token revoke JTI [--issuer NAME]\n"
         "                                       refuse the token with this id (\"jti\") from now on,\n"
         "                                       on open connections too (all issuers' without --issuer)\n"
         "       corral admin token revocations [--json]   the revoked token ids\n"
         "       corral admin stop-all [--json]  stop every running sandbox (workspaces stay)\n"
         "       corral token mint --issuer NAME --user ID [--ttl 1h] [--scope \"exec files\"]\n"
         "                         [--budget-usd 5 [--budget-window hour|day|week|month]]\n"
         "                         [--images \"python:* host\"]\n"
         "                                       mint a token (prints it; --json: with its jti);\n"
         "                                       --images: the only images its user may pick\n"
         "                                       (a trailing * matches any rest; \"\": none)\n"
         "\n"
         "These talk to corrald's admin socket (root, and the group daemon.admin_group):\n"
         "  --admin-socket PATH  default: $CORRAL_ADMIN_SOCKET, else /run/corral/admin.sock\n"
         "Scopes: sandboxes, exec, terminal, files (default: all four).\n";
}

const char* ExecuteUsage() {
  return "usage: corral execute --repo DIR_OR_BUNDLE [OPTIONS] \"TASK\"\n"
         "\n"
         "Gives TASK to a Claude Code agent working on a copy of a git repository in a sandbox of its\n"
         "own, waits for it, and brings its changes back: prints its summary, the files it changed and\n"
         "the cost, and writes DIR/result.json (the execution's record, with the diff) and\n"
         "DIR/changes.bundle (its commits, for `git fetch`). Only committed history is sent: commit or\n"
         "stash your work first. Exits 0 when the execution completed, 1 when it failed, 2 when\n"
         "corrald refused.\n"
         "\n"
         "  --repo PATH          a git work tree (sent as `git bundle create - --all`) or a bundle file\n"
         "  --out DIR            where to write the results (default: .corral-execute-<id>)\n"
         "  --keep               keep the sandbox afterwards (it holds the repository in\n"
         "                       /home/agent/repo)\n"
         "  --model MODEL        the model the agent asks for\n"
         "  --timeout DURATION   stop the agent after this long (default and maximum: the daemon's)\n"
         "  --json               print the execution's record instead of the summary\n"
         "  --url URL, --token JWT   as for corral sandbox\n"
         "The token needs the `sandboxes` and `sessions` scopes, and an AI budget.\n";
}

const char* GitUsage() {
  return "usage: corral git diff SANDBOX [--path P] [--base REV] [--json]\n"
         "       corral git bundle SANDBOX --out FILE [--path P] [--base REV]\n"
         "\n"
         "git out of a running sandbox (run there as its agent):\n"
         "  diff     the work tree, untracked files included, against REV (default HEAD); prints\n"
         "           the patch (--json: the daemon's answer, with the files changed and HEAD)\n"
         "  bundle   writes a git bundle of REV..HEAD (everything HEAD reaches without --base) to\n"
         "           FILE, for `git fetch FILE`\n"
         "\n"
         "  --path P             the repository in the sandbox (default /home/agent/repo)\n"
         "  --url URL, --token JWT   as for corral sandbox (the token needs the `files` scope)\n";
}

const char* UsageUsage() {
  return "usage: corral usage [--json]\n"
         "\n"
         "What your token's user has spent in the current window of its budget: AI dollars (model\n"
         "calls through the relay, per session) and compute (CPU-seconds of your sandboxes), with\n"
         "what remains.\n"
         "\n"
         "  --json               print the daemon's answer (GET /v1/usage)\n"
         "  --url URL, --token JWT   as for corral sandbox\n";
}

const char* LedgerExportUsage() {
  return "usage: corral admin usage [--issuer NAME [--user ID]] [--window hour|day|week|month | --from T --to T]\n"
         "                          [--format csv|jsonl] [--out FILE]\n"
         "\n"
         "Exports the ledger: one row per debit (an AI call priced in micro-dollars with the usage it\n"
         "was priced from, or CPU milliseconds of a sandbox), oldest first, every page of it.\n"
         "\n"
         "  --issuer NAME, --user ID   only this issuer's users, or this user\n"
         "  --window W           the current calendar window (UTC)\n"
         "  --from T, --to T     unix seconds, from <= at < to\n"
         "  --format F           csv (default, with a header line) or jsonl\n"
         "  --out FILE           write here instead of stdout\n"
         "  --admin-socket PATH  corrald's admin socket (default /run/corral/admin.sock)\n";
}

}  // namespace corral::cli
