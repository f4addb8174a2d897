// Options of the commands that talk to corrald (docs/PROTOCOL.md): `sandbox`, `exec`, `shell`,
// `cp`, `admin` and `token`. Pure parsing, no I/O: every function here is unit-tested.
//
// Options take their value as the next argument or after '=' (--memory=64M); boolean short
// options may be grouped (-it). Errors are one line that names the option ("--memory: not a
// size: 'lots'") or the argument, and a request is never sent after one.
//
// Where requests go:
//   user commands   --url URL (else $CORRAL_URL, else http://127.0.0.1:7878) and --token JWT
//                   (else $CORRAL_TOKEN; required)
//   admin commands  --admin-socket PATH (else $CORRAL_ADMIN_SOCKET, else /run/corral/admin.sock)
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace corral::cli {

inline constexpr char kDefaultServerUrl[] = "http://127.0.0.1:7878";
inline constexpr char kDefaultAdminSocket[] = "/run/corral/admin.sock";

// Reads an environment variable (nullopt: unset or empty). Tests pass their own.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
EnvLookup ProcessEnv();

// corrald's base URL: "http://HOST[:PORT][/PREFIX]" (IPv6 as [::1]; without a scheme, http:// is
// assumed). https:// is refused ("not supported yet"), so are user info, queries and fragments.
// The WebSocket endpoint is derived from it: ws://HOST:PORT/PREFIX/v1/ws.
struct ServerUrl {
  std::string text;       // normalized, for messages: "http://127.0.0.1:7878"
  std::string host;       // "127.0.0.1", "::1" (no brackets)
  std::string port;       // "7878"; 80 when the URL has none
  std::string base_path;  // "" or "/prefix" (no trailing '/'); request targets are appended

  std::string HostHeader() const;             // "127.0.0.1:7878", "[::1]:7878"
  std::string WebSocketUrl() const;           // "ws://127.0.0.1:7878/v1/ws"
};
StatusOr<ServerUrl> ParseServerUrl(std::string_view url);

// Percent-encodes everything but RFC 3986 unreserved characters (and '/' when `keep_slash`):
// for ids in paths and values in queries.
std::string PercentEncode(std::string_view text, bool keep_slash = false);

// A duration in whole seconds: "90", "90s", "30m", "1h", "1.5h", "7d".
StatusOr<uint64_t> ParseDurationSeconds(std::string_view text);

// User commands: corrald's TCP address and the caller's token.
struct ServerConfig {
  ServerUrl url;
  std::string token;
};

// Admin commands: the admin unix socket (no token; root only).
struct AdminConfig {
  std::string socket_path;
};

// ---- corral sandbox VERB ----

enum class SandboxVerb {
  kCreate, kList, kGet, kRemove, kStart, kStop, kSnapshot, kFork, kSnapshotList, kSnapshotRemove, kEgress, kEvents
};

struct SandboxOptions {
  bool help = false;  // --help: print SandboxUsage(), nothing else is set
  SandboxVerb verb = SandboxVerb::kList;
  ServerConfig server;
  // rm, rm-snapshot: one or more; get/start/stop/snapshot/fork: exactly one; create, ls,
  // snapshots: none
  std::vector<std::string> ids;
  std::optional<std::string> name;        // create, fork
  std::optional<uint64_t> memory_bytes;   // create
  std::optional<uint64_t> cpu_millis;     // create: --cpus 1.5 -> 1500
  std::optional<uint64_t> pids;           // create
  std::optional<uint64_t> disk_bytes;     // create
  std::optional<uint64_t> idle_timeout_s; // create (0: never)
  std::optional<std::string> snapshot;    // create: from a copy of this snapshot
  std::optional<std::string> image;       // create: "host" (the daemon's default), a name or a digest
  bool start = true;                      // create, fork: false with --no-start
  bool full_network = false;              // create --full-network: "network": "full" (an unsafe option)
  std::vector<std::string> secrets;       // create --secret NAME (repeatable or comma-separated)
  bool json = false;                      // print the daemon's JSON instead of ids/tables
  // create, egress: egress rules (--allow-domain D, --allow-port P, --allow-cidr C, repeatable or
  // comma-separated); a field is sent only when its option was given. egress --none: no domains
  // and no ranges.
  std::optional<std::vector<std::string>> allow_domains;
  std::optional<std::vector<uint64_t>> allow_ports;
  std::optional<std::vector<std::string>> allow_cidrs;
  std::optional<std::string> event_type;  // events: --type egress
  int64_t after_seq = 0;                  // events: --after SEQ
};

// `args` follow "sandbox": the verb, then its options and ids.
StatusOr<SandboxOptions> ParseSandboxOptions(const std::vector<std::string>& args, const EnvLookup& env);

// ---- corral exec / corral shell ----

struct ExecOptions {
  bool help = false;
  ServerConfig server;
  std::string sandbox;
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;  // in order; a later K replaces an earlier
  std::optional<std::string> cwd;
  std::optional<std::string> user;  // "agent" or "root"
  bool forward_stdin = false;       // -i
  bool tty = false;                 // -t: a PTY of the local terminal's size
  std::optional<std::string> outcome_json;  // a path, or "-" for stderr
};

// `corral exec [OPTIONS] SANDBOX [--] CMD [ARGS...]`: options come before "--" (or before CMD,
// which starts at the first argument after SANDBOX that is not an option).
StatusOr<ExecOptions> ParseExecOptions(const std::vector<std::string>& args, const EnvLookup& env);

// `corral shell SANDBOX [--user U] [-- CMD...]`: a PTY with stdin, CMD defaulting to
// /bin/bash -l.
StatusOr<ExecOptions> ParseShellOptions(const std::vector<std::string>& args, const EnvLookup& env);

// ---- corral prompt ----

// `corral prompt [OPTIONS] TEXT`: one turn of an agent session in a sandbox, streamed.
struct PromptOptions {
  bool help = false;
  ServerConfig server;
  std::string text;
  std::string sandbox;   // --sandbox; "" = the newest running sandbox of the user
  std::string resume;    // --resume ses_...: continue that session
  std::string model;     // --model
  bool keep = false;     // --keep: leave the session running (ready) after the turn
  bool json = false;     // --json: print the events as they come, one JSON object a line
  bool host_tools = false;        // --allow-host-tools: offer the agent HostBash, HostRead, ...
  bool yes = false;               // --yes: run host tools and grant permissions without asking
  std::string permission_mode;    // --permission-mode: ask this terminal before tools run
};
StatusOr<PromptOptions> ParsePromptOptions(const std::vector<std::string>& args, const EnvLookup& env);

// ---- corral cp ----

// One side of a copy: a host path, or SANDBOX:/absolute/path. An argument is a sandbox path when
// the text before its first ':' is not empty and has no '/' ("./a:b" is a host file).
struct CpLocation {
  std::string sandbox;  // empty: the host
  std::string path;
  bool in_sandbox() const { return !sandbox.empty(); }
};
StatusOr<CpLocation> ParseCpLocation(std::string_view arg);

struct CpOptions {
  bool help = false;
  ServerConfig server;
  bool recursive = false;  // -r: directories, as tar archives
  CpLocation source;
  CpLocation destination;  // exactly one of source and destination is in a sandbox
};
StatusOr<CpOptions> ParseCpOptions(const std::vector<std::string>& args, const EnvLookup& env);

// ---- corral admin issuer ... / corral token mint ----

enum class AdminVerb {
  kIssuerAdd,
  kIssuerRemove,
  kIssuerList,
  kIssuerRotate,      // a new secret: the issuer's tokens stop working
  kNodeList,          // the fleet's nodes
  kNodeDrain,         // a node takes no new sandboxes
  kNodeUndrain,
  kTokenMint,
  kTokenRevoke,       // admin token revoke JTI [--issuer NAME]
  kTokenRevocations,  // admin token revocations
  kStopAll,
};

struct AdminOptions {
  bool help = false;
  AdminVerb verb = AdminVerb::kIssuerList;
  AdminConfig admin;
  std::string issuer;  // issuer add/rm/rotate: NAME; token mint, token revoke: --issuer
  std::string jti;     // token revoke: the token id
  std::string node;    // node drain/undrain: its id
  bool move = false;   // node drain --move: its stopped sandboxes move to other nodes
  std::string user;    // token mint: --user (the token's sub)
  uint64_t ttl_s = 3600;
  std::optional<std::string> scope;  // token mint: "exec files" (space-separated)
  std::optional<std::string> budget_usd;     // token mint: the AI budget, "5" or "0.25" USD
  std::optional<std::string> budget_window;  // token mint: hour|day|week|month (default day)
  std::optional<std::vector<std::string>> images;  // token mint: limits.images ([]: none)
  bool json = false;
};

// `args` follow "admin" ("issuer add NAME", ...) or "token" ("mint --issuer ...").
StatusOr<AdminOptions> ParseAdminOptions(const std::vector<std::string>& args, const EnvLookup& env);
StatusOr<AdminOptions> ParseTokenOptions(const std::vector<std::string>& args, const EnvLookup& env);

// ---- corral execute / corral git ----

// `corral execute --repo DIR_OR_BUNDLE [OPTIONS] "TASK"`: a headless execution (POST /v1/execute).
struct ExecuteOptions {
  bool help = false;
  ServerConfig server;
  std::string repo;                     // --repo: a git work tree (bundled here) or a bundle file
  std::string task;
  bool keep = false;                    // --keep: keep_sandbox
  std::string out_dir;                  // --out; "" = .corral-execute-<id>
  std::string model;                    // --model
  std::optional<uint64_t> timeout_s;    // --timeout DURATION
  bool json = false;                    // --json: print the record instead of the summary
};
StatusOr<ExecuteOptions> ParseExecuteOptions(const std::vector<std::string>& args, const EnvLookup& env);

enum class GitVerb { kDiff, kBundle };

// `corral git diff SANDBOX [--path P] [--base REV] [--json]`,
// `corral git bundle SANDBOX --out FILE [--path P] [--base REV]`.
struct GitOptions {
  bool help = false;
  GitVerb verb = GitVerb::kDiff;
  ServerConfig server;
  std::string sandbox;
  std::string path;   // "" = the daemon's default (/home/agent/repo)
  std::string base;   // "" = HEAD (diff) or everything (bundle)
  std::string out;    // bundle: the file to write
  bool json = false;  // diff: the daemon's JSON instead of the patch
};
StatusOr<GitOptions> ParseGitOptions(const std::vector<std::string>& args, const EnvLookup& env);

// `corral usage [--json]`: the caller's spending in the current window of their token's budget.
struct UsageOptions {
  bool help = false;
  ServerConfig server;
  bool json = false;
};
StatusOr<UsageOptions> ParseUsageOptions(const std::vector<std::string>& args, const EnvLookup& env);

// `corral admin usage [--issuer I [--user U]] [--window W | --from T --to T] [--format csv|jsonl]
// [--out FILE]`: the ledger, exported (args follow "admin usage").
struct LedgerExportOptions {
  bool help = false;
  AdminConfig admin;
  std::string issuer;
  std::string user;
  std::string window;                 // hour|day|week|month: the current calendar window
  std::optional<uint64_t> from;       // unix seconds
  std::optional<uint64_t> to;
  std::string format = "csv";         // csv | jsonl
  std::string out;                    // "" = stdout
};
StatusOr<LedgerExportOptions> ParseLedgerExportOptions(const std::vector<std::string>& args, const EnvLookup& env);

}  // namespace corral::cli
