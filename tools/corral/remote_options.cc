#include "tools/corral/remote_options.h"

#include <unistd.h>

#include <cstdlib>

#include "common/parse.h"
#include "tools/corral/backup_command.h"
#include "tools/corral/doctor_command.h"
#include "tools/corral/option_scanner.h"

namespace corral::cli {
namespace {

// ---- sandbox ----

struct SandboxVerbSpec {
  std::string_view word;
  SandboxVerb verb;
  std::vector<OptionSpec> options;
};

const std::vector<SandboxVerbSpec>& SandboxVerbs() {
  static const std::vector<SandboxVerbSpec> verbs = {
      {"create", SandboxVerb::kCreate,
       {{"--name", 0, true}, {"--memory", 0, true}, {"--cpus", 0, true}, {"--pids", 0, true},
        {"--disk", 0, true}, {"--idle-timeout", 0, true}, {"--snapshot", 0, true}, {"--no-start", 0, false},
        {"--image", 0, true},
        {"--allow-domain", 0, true}, {"--allow-port", 0, true}, {"--allow-cidr", 0, true},
        {"--full-network", 0, false}, {"--secret", 0, true}, kJson}},
      {"egress", SandboxVerb::kEgress,
       {{"--allow-domain", 0, true}, {"--allow-port", 0, true}, {"--allow-cidr", 0, true}, {"--none", 0, false}, kJson}},
      {"events", SandboxVerb::kEvents, {{"--type", 0, true}, {"--after", 0, true}, kJson}},
      {"ls", SandboxVerb::kList, {kJson}},
      {"list", SandboxVerb::kList, {kJson}},
      {"get", SandboxVerb::kGet, {kJson}},
      {"rm", SandboxVerb::kRemove, {}},
      {"start", SandboxVerb::kStart, {kJson}},
      {"stop", SandboxVerb::kStop, {kJson}},
      {"snapshot", SandboxVerb::kSnapshot, {kJson}},
      {"fork", SandboxVerb::kFork, {{"--name", 0, true}, {"--no-start", 0, false}, kJson}},
      {"snapshots", SandboxVerb::kSnapshotList, {kJson}},
      {"rm-snapshot", SandboxVerb::kSnapshotRemove, {}},
  };
  return verbs;
}

// Every value of a repeatable option, each split at commas ("--allow-domain a,b --allow-domain c").
std::optional<std::vector<std::string>> ListOption(const Scanned& scanned, std::string_view name) {
  if (!scanned.Has(name)) return std::nullopt;
  std::vector<std::string> items;
  for (const auto& [option, value] : scanned.options) {
    if (option != name) continue;
    size_t start = 0;
    while (start <= value.size()) {
      const size_t comma = value.find(',', start);
      const std::string item = value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (!item.empty()) items.push_back(item);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return items;
}

Status ApplyEgressOptions(const Scanned& scanned, SandboxOptions& out) {
  out.allow_domains = ListOption(scanned, "--allow-domain");
  out.allow_cidrs = ListOption(scanned, "--allow-cidr");
  if (auto ports = ListOption(scanned, "--allow-port")) {
    out.allow_ports.emplace();
    for (const std::string& port : *ports) {
      auto value = ParseUint(port);
      if (!value.ok() || *value == 0 || *value > 65535) return Status::Error("--allow-port: not a port: '" + port + "'");
      out.allow_ports->push_back(*value);
    }
  }
  if (scanned.Has("--none")) {
    if (out.allow_domains || out.allow_cidrs) return Status::Error("--none: not with --allow-domain or --allow-cidr");
    out.allow_domains.emplace();
    out.allow_cidrs.emplace();
  }
  return Status();
}

Status ApplyCreateOptions(const Scanned& scanned, SandboxOptions& out) {
  out.secrets = ListOption(scanned, "--secret").value_or(std::vector<std::string>{});
  if (scanned.Has("--memory")) {
    ASSIGN_OR_RETURN(out.memory_bytes, Positive(scanned, "--memory", ParseSize));
  }
  if (scanned.Has("--cpus")) {
    auto millis = [](std::string_view v) { return ParseFixedPoint(v, 1000); };
    ASSIGN_OR_RETURN(out.cpu_millis, Positive(scanned, "--cpus", millis));
  }
  if (scanned.Has("--pids")) {
    ASSIGN_OR_RETURN(out.pids, Positive(scanned, "--pids", ParseUint));
  }
  if (scanned.Has("--disk")) {
    ASSIGN_OR_RETURN(out.disk_bytes, Positive(scanned, "--disk", ParseSize));
  }
  if (scanned.Has("--idle-timeout")) {
    auto seconds = ParseDurationSeconds(*scanned.Value("--idle-timeout"));
    if (!seconds.ok()) return seconds.status().WithContext("--idle-timeout");
    out.idle_timeout_s = *seconds;
  }
  return Status();
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](const char* name) -> std::optional<std::string> {
    const char* value = getenv(name);
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::string(value);
  };
}

std::string ServerUrl::HostHeader() const {
  const bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + port;
}

std::string ServerUrl::WebSocketUrl() const { return "ws://" + HostHeader() + base_path + "/v1/ws"; }

StatusOr<ServerUrl> ParseServerUrl(std::string_view url) {
  const std::string original(url);
  auto bad = [&](const std::string& why) {
    return Status::Error("'" + original + "': " + why + " (expected http://HOST[:PORT])");
  };
  std::string_view rest = url;
  if (size_t scheme_end = rest.find("://"); scheme_end != std::string_view::npos) {
    std::string scheme(rest.substr(0, scheme_end));
    for (char& c : scheme) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
    if (scheme == "https" || scheme == "wss") {
      return Status::Error("'" + original + "': " + scheme +
                           ":// is not supported yet; corrald serves plain http:// (use an SSH "
                           "tunnel to reach a remote daemon)");
    }
    if (scheme != "http") return bad("unsupported scheme " + scheme + "://");
    rest.remove_prefix(scheme_end + 3);
  }
  if (rest.find_first_of("?#") != std::string_view::npos) return bad("no query or fragment allowed");
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos) return bad("no user info allowed");

  ServerUrl out;
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unterminated IPv6 address");
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty() && after.front() != ':') return bad("junk after the IPv6 address");
    if (!after.empty()) port = after.substr(1);
    if (after == ":") return bad("empty port");
  } else {
    const size_t colon = authority.find(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      if (port.empty()) return bad("empty port");
      if (port.find(':') != std::string_view::npos) return bad("an IPv6 address needs brackets");
    }
  }
  if (out.host.empty()) return bad("no host");
  if (port.empty()) {
    out.port = "80";
  } else {
    auto number = ParseUint(port);
    if (!number.ok() || *number == 0 || *number > 65535) return bad("bad port '" + std::string(port) + "'");
    out.port = std::to_string(*number);
  }
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  out.base_path = std::string(path);
  out.text = "http://" + out.HostHeader() + out.base_path;
  return out;
}

std::string PercentEncode(std::string_view text, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    const bool unreserved = (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') ||
                            u == '-' || u == '.' || u == '_' || u == '~' || (keep_slash && u == '/');
    if (unreserved) {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    }
  }
  return out;
}

StatusOr<uint64_t> ParseDurationSeconds(std::string_view text) {
  const std::string original(text);
  uint64_t unit = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 's': unit = 1; break;
      case 'm': unit = 60; break;
      case 'h': unit = 3600; break;
      case 'd': unit = 86400; break;
      default: unit = 0; break;
    }
    if (unit != 0) text.remove_suffix(1);
    else unit = 1;
  }
  auto seconds = ParseFixedPoint(text, unit);
  if (!seconds.ok()) return Status::Error("not a duration: '" + original + "' (e.g. 90, 90s, 30m, 1h, 7d)");
  return *seconds;
}

// ---- sandbox ----

StatusOr<SandboxOptions> ParseSandboxOptions(const std::vector<std::string>& args, const EnvLookup& env) {
  constexpr char kSee[] = "corral sandbox --help";
  SandboxOptions out;
  if (args.empty()) {
    return Status::Error("missing command: create, ls, get, rm, start, stop, snapshot, fork, snapshots or rm-snapshot");
  }
  if (IsHelpWord(args[0])) return HelpOnly(out);
  const SandboxVerbSpec* verb = nullptr;
  for (const auto& candidate : SandboxVerbs()) {
    if (candidate.word == args[0]) verb = &candidate;
  }
  if (verb == nullptr) return Status::Error("unknown command 'sandbox " + args[0] + "' (see " + kSee + ")");
  out.verb = verb->verb;
  const std::string what = "sandbox " + args[0];
  ASSIGN_OR_RETURN(Scanned scanned, Scan(args, 1, With(verb->options, {kUrl, kToken}), std::nullopt, kSee));
  if (scanned.help) return HelpOnly(out);
  out.ids = scanned.positionals;
  switch (out.verb) {
    case SandboxVerb::kCreate:
    case SandboxVerb::kList:
    case SandboxVerb::kSnapshotList:
      if (!out.ids.empty()) return Status::Error(what + ": unexpected argument '" + out.ids[0] + "'");
      break;
    case SandboxVerb::kRemove:
      if (out.ids.empty()) return Status::Error(what + ": expected one or more sandbox ids");
      break;
    case SandboxVerb::kSnapshotRemove:
      if (out.ids.empty()) return Status::Error(what + ": expected one or more snapshot ids");
      break;
    default:
      if (out.ids.size() != 1) return Status::Error(what + ": expected one sandbox id");
      break;
  }
  for (const auto& id : out.ids) {
    if (id.empty()) return Status::Error(what + ": empty sandbox id");
  }
  out.name = scanned.Value("--name");
  if (out.name && out.name->empty()) return Status::Error("--name: empty");
  out.start = !scanned.Has("--no-start");
  out.full_network = scanned.Has("--full-network");
  out.snapshot = scanned.Value("--snapshot");
  if (out.snapshot && out.snapshot->empty()) return Status::Error("--snapshot: empty");
  out.image = scanned.Value("--image");
  if (out.image && out.image->empty()) return Status::Error("--image: empty");
  out.json = scanned.Has("--json");
  RETURN_IF_ERROR(ApplyCreateOptions(scanned, out));
  RETURN_IF_ERROR(ApplyEgressOptions(scanned, out));
  out.event_type = scanned.Value("--type");
  if (auto after = scanned.Value("--after")) {
    auto value = ParseUint(*after);
    if (!value.ok()) return Status::Error("--after: not a sequence number: '" + *after + "'");
    out.after_seq = static_cast<int64_t>(*value);
  }
  ASSIGN_OR_RETURN(out.server, ResolveServer(scanned, env));
  return out;
}

// ---- exec, shell ----

namespace {

Status ApplyCommandOptions(const Scanned& scanned, ExecOptions& out) {
  for (const auto& [option, value] : scanned.options) {
    if (option != "--env") continue;
    const size_t eq = value.find('=');
    if (eq == std::string::npos || eq == 0) return Status::Error("--env: expected K=V, not '" + value + "'");
    std::string key = value.substr(0, eq);
    std::erase_if(out.env, [&](const auto& kv) { return kv.first == key; });
    out.env.emplace_back(key, value.substr(eq + 1));
  }
  out.cwd = scanned.Value("--cwd");
  if (out.cwd && (out.cwd->empty() || (*out.cwd)[0] != '/')) {
    return Status::Error("--cwd: must be an absolute path, not '" + *out.cwd + "'");
  }
  out.user = scanned.Value("--user");
  return CheckUser(out.user);
}

}  // namespace

StatusOr<ExecOptions> ParseExecOptions(const std::vector<std::string>& args, const EnvLookup& env) {
  static const std::vector<OptionSpec> kSpecs = {
      {"--env", 0, true},   {"--cwd", 0, true},   {"--user", 0, true}, {"--stdin", 'i', false},
      {"--tty", 't', false}, {"--outcome-json", 0, true}, kUrl, kToken};
  ExecOptions out;
  ASSIGN_OR_RETURN(Scanned scanned, Scan(args, 0, kSpecs, 1, "corral exec --help"));
  if (scanned.help) return HelpOnly(out);
  if (scanned.positionals.empty()) {
    return Status::Error("missing SANDBOX (corral exec [OPTIONS] SANDBOX -- CMD [ARGS...])");
  }
  out.sandbox = scanned.positionals[0];
  if (out.sandbox.empty()) return Status::Error("empty SANDBOX");
  if (scanned.command.empty()) {
    return Status::Error("missing the command to run (corral exec " + out.sandbox + " -- CMD [ARGS...])");
  }
  out.argv = scanned.command;
  RETURN_IF_ERROR(ApplyCommandOptions(scanned, out));
  out.forward_stdin = scanned.Has("--stdin");
  out.tty = scanned.Has("--tty");
  out.outcome_json = scanned.Value("--outcome-json");
  if (out.outcome_json && out.outcome_json->empty()) return Status::Error("--outcome-json: missing file name");
  ASSIGN_OR_RETURN(out.server, ResolveServer(scanned, env));
  return out;
}

StatusOr<PromptOptions> ParsePromptOptions(const std::vector<std::string>& args, const EnvLookup& env) {
  static const std::vector<OptionSpec> kSpecs = {
      {"--sandbox", 0, true},           {"--resume", 0, true},       {"--model", 0, true},
      {"--keep", 0, false},             {"--json", 0, false},        {"--allow-host-tools", 0, false},
      {"--yes", 'y', false},            {"--permission-mode", 0, true}, kUrl, kToken};
  PromptOptions out;
  ASSIGN_OR_RETURN(Scanned scanned, Scan(args, 0, kSpecs, 1, "corral prompt --help"));
  if (scanned.help) return HelpOnly(out);
  if (scanned.positionals.empty() || scanned.positionals[0].empty()) {
    return Status::Error("missing the prompt (corral prompt [OPTIONS] \"TEXT\")");
  }
  out.text = scanned.positionals[0];
  out.sandbox = scanned.Value("--sandbox").value_or("");
  out.resume = scanned.Value("--resume").value_or("");
  out.model = scanned.Value("--model").value_or("");
  out.keep = scanned.Has("--keep");
  out.json = scanned.Has("--json");
  out.host_tools = scanned.Has("--allow-host-tools");
  out.yes = scanned.Has("--yes");
  out.permission_mode = scanned.Value("--permission-mode").value_or("");
  ASSIGN_OR_RETURN(out.server, ResolveServer(scanned, env));
  return out;
}

StatusOr<ExecOptions> ParseShellOptions(const std::vector<std::string>& args, const EnvLookup& env) {
  static const std::vector<OptionSpec> kSpecs = {
      {"--env", 0, true}, {"--cwd", 0, true}, {"--user", 0, true}, kUrl, kToken};
  ExecOptions out;
  ASSIGN_OR_RETURN(Scanned scanned, Scan(args, 0, kSpecs, 1, "corral shell --help"));
  if (scanned.help) return HelpOnly(out);
  if (scanned.positionals.empty()) return Status::Error("missing SANDBOX (corral shell SANDBOX [-- CMD...])");
  out.sandbox = scanned.positionals[0];
  if (out.sandbox.empty()) return Status::Error("empty SANDBOX");
  out.argv = scanned.command;
  if (out.argv.empty()) out.argv = {"/bin/bash", "-l"};
  RETURN_IF_ERROR(ApplyCommandOptions(scanned, out));
  out.forward_stdin = true;
  out.tty = true;
  ASSIGN_OR_RETURN(out.server, ResolveServer(scanned, env));
  return out;
}

// ---- cp ----

StatusOr<CpLocation> ParseCpLocation(std::string_view arg) {
  if (arg.empty()) return Status::Error("empty path");
  const size_t colon = arg.find(':');
  const bool in_sandbox = colon != std::string_view::npos && colon > 0 &&
                          arg.substr(0, colon).find('/') == std::string_view::npos;
  if (!in_sandbox) return CpLocation{"", std::string(arg)};
  CpLocation out{std::string(arg.substr(0, colon)), std::string(arg.substr(colon + 1))};
  if (out.path.empty() || out.path[0] != '/') {
    return Status::Error("'" + std::string(arg) + "': the path in the sandbox must be absolute (" +
                         out.sandbox + ":/home/agent/...; a host file with ':' in its name: ./" +
                         std::string(arg) + ")");
  }
  return out;
}

StatusOr<CpOptions> ParseCpOptions(const std::vector<std::string>& args, const EnvLookup& env) {
  CpOptions out;
  ASSIGN_OR_RETURN(Scanned scanned,
                   Scan(args, 0, {{"--recursive", 'r', false}, kUrl, kToken}, std::nullopt, "corral cp --help"));
  if (scanned.help) return HelpOnly(out);
  if (scanned.positionals.size() != 2) {
    return Status::Error("expected SRC and DST, got " + std::to_string(scanned.positionals.size()) +
                         " argument(s) (corral cp [-r] SRC DST)");
  }
  auto source = ParseCpLocation(scanned.positionals[0]);
  if (!source.ok()) return source.status().WithContext("SRC");
  auto destination = ParseCpLocation(scanned.positionals[1]);
  if (!destination.ok()) return destination.status().WithContext("DST");
  out.source = std::move(source).value();
  out.destination = std::move(destination).value();
  if (out.source.in_sandbox() == out.destination.in_sandbox()) {
    return Status::Error(out.source.in_sandbox()
                             ? "both SRC and DST are in sandboxes; one side must be a host path"
                             : "neither SRC nor DST is in a sandbox; one side must be SANDBOX:/path");
  }
  out.recursive = scanned.Has("--recursive");
  ASSIGN_OR_RETURN(out.server, ResolveServer(scanned, env));
  return out;
}

// ---- execute, git ----

StatusOr<ExecuteOptions> ParseExecuteOptions(const std::vector<std::string>& args, const EnvLookup& env) {
  static const std::vector<OptionSpec> kSpecs = {{"--repo", 0, true},  {"--keep", 0, false}, {"--out", 0, true},
                                                 {"--model", 0, true}, {"--timeout", 0, true}, kJson, kUrl, kToken};
  ExecuteOptions out;
  ASSIGN_OR_RETURN(Scanned scanned, Scan(args, 0, kSpecs, std::nullopt, "corral execute --help"));
  if (scanned.help) return HelpOnly(out);
  if (scanned.positionals.size() != 1 || scanned.positionals[0].empty()) {
    return Status::Error("expected the task, one argument (corral execute --repo DIR \"TASK\")");
  }
  out.task = scanned.positionals[0];
  out.repo = scanned.Value("--repo").value_or("");
  if (out.repo.empty()) return Status::Error("--repo: required (a git work tree, or a bundle file)");
  out.keep = scanned.Has("--keep");
  out.out_dir = scanned.Value("--out").value_or("");
  if (scanned.Has("--out") && out.out_dir.empty()) return Status::Error("--out: missing directory");
  out.model = scanned.Value("--model").value_or("");
  if (scanned.Has("--timeout")) {
    auto seconds = ParseDurationSeconds(*scanned.Value("--timeout"));
    if (!seconds.ok() || *seconds == 0) return Status::Error("--timeout: a duration like 600, 10m or 1h");
    out.timeout_s = *seconds;
  }
  out.json = scanned.Has("--json");
  ASSIGN_OR_RETURN(out.server, ResolveServer(scanned, env));
  return out;
}

StatusOr<GitOptions> ParseGitOptions(const std::vector<std::string>& args, const EnvLookup& env) {
  constexpr char kSee[] = "corral git --help";
  GitOptions out;
  if (args.empty()) return Status::Error("missing command: diff or bundle (see corral git --help)");
  if (IsHelpWord(args[0])) return HelpOnly(out);
  if (args[0] == "diff") out.verb = GitVerb::kDiff;
  else if (args[0] == "bundle") out.verb = GitVerb::kBundle;
  else return Status::Error("unknown command 'git " + args[0] + "' (see " + kSee + ")");
  std::vector<OptionSpec> specs = {{"--path", 0, true}, {"--base", 0, true}, kUrl, kToken};
  specs.push_back(out.verb == GitVerb::kDiff ? kJson : OptionSpec{"--out", 0, true});
  ASSIGN_OR_RETURN(Scanned scanned, Scan(args, 1, specs, std::nullopt, kSee));
  if (scanned.help) return HelpOnly(out);
  if (scanned.positionals.size() != 1 || scanned.positionals[0].empty()) {
    return Status::Error("expected one SANDBOX (corral git " + args[0] + " SANDBOX)");
  }
  out.sandbox = scanned.positionals[0];
  out.path = scanned.Value("--path").value_or("");
  if (scanned.Has("--path") && (out.path.empty() || out.path[0] != '/')) {
    return Status::Error("--path: an absolute path in the sandbox");
  }
  out.base = scanned.Value("--base").value_or("");
  if (scanned.Has("--base") && out.base.empty()) return Status::Error("--base: missing revision");
  if (out.verb == GitVerb::kBundle) {
    out.out = scanned.Value("--out").value_or("");
    if (out.out.empty()) return Status::Error("--out: required (the file to write the bundle to)");
  }
  out.json = scanned.Has("--json");
  ASSIGN_OR_RETURN(out.server, ResolveServer(scanned, env));
  return out;
}

StatusOr<UsageOptions> ParseUsageOptions(const std::vector<std::string>& args, const EnvLookup& env) {
  UsageOptions out;
  ASSIGN_OR_RETURN(Scanned scanned, Scan(args, 0, {kUrl, kToken, kJson}, std::nullopt, "corral usage --help"));
  if (scanned.help) return HelpOnly(out);
  if (!scanned.positionals.empty()) return Status::Error("usage: unexpected argument '" + scanned.positionals[0] + "'");
  out.json = scanned.Has("--json");
  ASSIGN_OR_RETURN(out.server, ResolveServer(scanned, env));
  return out;
}

StatusOr<LedgerExportOptions> ParseLedgerExportOptions(const std::vector<std::string>& args, const EnvLookup& env) {
  constexpr char kSee[] = "corral admin usage --help";
  static const std::vector<OptionSpec> kSpecs = {{"--issuer", 0, true}, {"--user", 0, true}, {"--window", 0, true},
                                                 {"--from", 0, true},   {"--to", 0, true},   {"--format", 0, true},
                                                 {"--out", 'o', true},  kAdminSocket};
  LedgerExportOptions out;
  ASSIGN_OR_RETURN(Scanned scanned, Scan(args, 0, kSpecs, std::nullopt, kSee));
  if (scanned.help) return HelpOnly(out);
  if (!scanned.positionals.empty()) {
    return Status::Error("admin usage: unexpected argument '" + scanned.positionals[0] + "'");
  }
  out.issuer = scanned.Value("--issuer").value_or("");
  out.user = scanned.Value("--user").value_or("");
  if (!out.user.empty() && out.issuer.empty()) return Status::Error("--user needs --issuer (a user is the pair)");
  if (!out.issuer.empty()) RETURN_IF_ERROR(CheckIssuerName(out.issuer, "--issuer"));
  out.window = scanned.Value("--window").value_or("");
  if (!out.window.empty() && out.window != "hour" && out.window != "day" && out.window != "week" &&
      out.window != "month") {
    return Status::Error("--window: hour, day, week or month");
  }
  for (const char* name : {"--from", "--to"}) {
    auto value = scanned.Value(name);
    if (!value) continue;
    if (!out.window.empty()) return Status::Error(std::string(name) + ": not with --window");
    char* end = nullptr;
    errno = 0;
    const unsigned long long seconds = strtoull(value->c_str(), &end, 10);
    if (value->empty() || *end != '\0' || errno != 0 || (*value)[0] == '-') {
      return Status::Error(std::string(name) + ": unix seconds");
    }
    (std::string(name) == "--from" ? out.from : out.to) = seconds;
  }
  out.format = scanned.Value("--format").value_or("csv");
  if (out.format != "csv" && out.format != "jsonl") return Status::Error("--format: csv or jsonl");
  out.out = scanned.Value("--out").value_or("");
  out.admin = ResolveAdmin(scanned, env);
  return out;
}

// ---- corral doctor, corral admin backup|restore ----

StatusOr<DoctorCommandOptions> ParseDoctorOptions(const std::vector<std::string>& args, const EnvLookup&) {
  static const std::vector<OptionSpec> kSpecs = {kJson, {"--config", 0, true}, {"--state-dir", 0, true},
                                                 {"--cgroup-mount", 0, true}, {"--cgroup-parent", 0, true},
                                                 {"--claude", 0, true}};
  DoctorCommandOptions out;
  ASSIGN_OR_RETURN(Scanned scanned, Scan(args, 0, kSpecs, std::nullopt, "corral doctor --help"));
  if (scanned.help) return HelpOnly(out);
  if (!scanned.positionals.empty()) return Status::Error("unexpected argument '" + scanned.positionals[0] + "'");
  out.json = scanned.Has("--json");
  out.doctor.claude_version = supervisor::TestedClaudeCodeVersion();
  RETURN_IF_ERROR(ReadDaemonConfig(scanned.Value("--config").value_or(""), out.doctor));
  for (auto [option, field] : {std::pair{"--state-dir", &out.doctor.state_dir},
                               std::pair{"--cgroup-mount", &out.doctor.cgroup_mount},
                               std::pair{"--cgroup-parent", &out.doctor.cgroup_parent},
                               std::pair{"--claude", &out.doctor.claude}}) {
    if (auto value = scanned.Value(option)) *field = *value;
  }
  return out;
}

StatusOr<BackupCommandOptions> ParseBackupOptions(const std::vector<std::string>& args, const EnvLookup& env) {
  BackupCommandOptions out;
  if (args.empty()) return Status::Error("missing command: backup|restore FILE");
  out.restore = args[0] == "restore";
  const std::vector<OptionSpec> specs =
      out.restore ? std::vector<OptionSpec>{kJson, {"--config", 0, true}, {"--state-dir", 0, true}}
                  : std::vector<OptionSpec>{kJson, kAdminSocket};
  ASSIGN_OR_RETURN(Scanned scanned, Scan(args, 1, specs, std::nullopt, "corral admin " + args[0] + " --help"));
  if (scanned.help) return HelpOnly(out);
  if (scanned.positionals.size() != 1) return Status::Error("expected one FILE");
  out.json = scanned.Has("--json");
  out.file = scanned.positionals[0];
  if (out.file[0] != '/') {
    char cwd[4096];
    if (getcwd(cwd, sizeof(cwd)) == nullptr) return Status::Error("getcwd failed", errno);
    out.file = std::string(cwd) + "/" + out.file;
  }
  out.admin_socket = ResolveAdmin(scanned, env).socket_path;
  out.state_dir = scanned.Value("--state-dir").value_or("");
  if (out.restore && out.state_dir.empty()) {
    supervisor::DoctorOptions paths;
    RETURN_IF_ERROR(ReadDaemonConfig(scanned.Value("--config").value_or(""), paths));
    out.state_dir = paths.state_dir;
  }
  return out;
}

}  // namespace corral::cli
