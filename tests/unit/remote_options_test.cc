// Options of the commands that talk to corrald (sandbox, exec, shell, cp, admin, token), the
// server URL, and the requests and exit codes the options turn into. No daemon needed.
#include "tools/corral/remote_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "tools/corral/exec_command.h"
#include "tools/corral/remote_commands.h"

namespace corral::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using Args = std::vector<std::string>;

EnvLookup Env(std::map<std::string, std::string> vars = {{"CORRAL_TOKEN", "env-token"}}) {
  return [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// ---- URL handling ----

TEST(ServerUrlTest, Default) {
  auto url = ParseServerUrl(kDefaultServerUrl);
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  EXPECT_EQ(url->host, "127.0.0.1");
  EXPECT_EQ(url->port, "7878");
  EXPECT_EQ(url->base_path, "");
  EXPECT_EQ(url->text, "http://127.0.0.1:7878");
  EXPECT_EQ(url->HostHeader(), "127.0.0.1:7878");
  EXPECT_EQ(url->WebSocketUrl(), "ws://127.0.0.1:7878/v1/ws");
}

TEST(ServerUrlTest, PortDefaultsTo80AndPrefixIsKept) {
  auto url = ParseServerUrl("HTTP://corral.internal/api/corral/");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  EXPECT_EQ(url->host, "corral.internal");
  EXPECT_EQ(url->port, "80");
  EXPECT_EQ(url->base_path, "/api/corral");
  EXPECT_EQ(url->text, "http://corral.internal:80/api/corral");
  EXPECT_EQ(url->WebSocketUrl(), "ws://corral.internal:80/api/corral/v1/ws");
}

TEST(ServerUrlTest, Ipv6AndNoScheme) {
  auto url = ParseServerUrl("http://[::1]:9000");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  EXPECT_EQ(url->host, "::1");
  EXPECT_EQ(url->port, "9000");
  EXPECT_EQ(url->HostHeader(), "[::1]:9000");
  auto bare = ParseServerUrl("localhost:7878");
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  EXPECT_EQ(bare->host, "localhost");
  EXPECT_EQ(bare->port, "7878");
}

TEST(ServerUrlTest, HttpsIsNotSupportedYet) {
  for (const char* text : {"https://corral.example.com", "wss://corral.example.com"}) {
    auto url = ParseServerUrl(text);
    ASSERT_FALSE(url.ok()) << text;
    EXPECT_THAT(url.status().message(), HasSubstr("not supported yet"));
  }
}

TEST(ServerUrlTest, BadUrls) {
  for (const char* text : {"ftp://host", "http://", "http://:7878", "http://host:", "http://host:0",
                           "http://host:65536", "http://host:12ab", "http://user@host", "http://host/?x=1",
                           "http://host/#top", "http://::1:7878", "http://[::1", "http://[::1]x"}) {
    auto url = ParseServerUrl(text);
    ASSERT_FALSE(url.ok()) << text;
    EXPECT_THAT(url.status().message(), HasSubstr(text));
  }
}

TEST(ServerUrlTest, PercentEncode) {
  EXPECT_EQ(PercentEncode("sb_1-a.b~c"), "sb_1-a.b~c");
  EXPECT_EQ(PercentEncode("a b&c/d"), "a%20b%26c%2Fd");
  EXPECT_EQ(PercentEncode("/home/agent/a b", /*keep_slash=*/true), "/home/agent/a%20b");
  EXPECT_EQ(PercentEncode("\xc3\xa9"), "%C3%A9");
}

TEST(DurationTest, Units) {
  EXPECT_EQ(*ParseDurationSeconds("90"), 90u);
  EXPECT_EQ(*ParseDurationSeconds("90s"), 90u);
  EXPECT_EQ(*ParseDurationSeconds("30m"), 1800u);
  EXPECT_EQ(*ParseDurationSeconds("1h"), 3600u);
  EXPECT_EQ(*ParseDurationSeconds("1.5h"), 5400u);
  EXPECT_EQ(*ParseDurationSeconds("7d"), 604800u);
  EXPECT_EQ(*ParseDurationSeconds("0"), 0u);
  for (const char* bad : {"", "h", "1x", "-1", "1h30m", "one"}) {
    EXPECT_FALSE(ParseDurationSeconds(bad).ok()) << bad;
  }
}

// ---- connection settings ----

TEST(ConnectionTest, FlagsBeatEnvironmentBeatsDefault) {
  auto from_env = ParseSandboxOptions({"ls"}, Env({{"CORRAL_TOKEN", "t1"}, {"CORRAL_URL", "http://h:1"}}));
  ASSERT_TRUE(from_env.ok()) << from_env.status().ToString();
  EXPECT_EQ(from_env->server.token, "t1");
  EXPECT_EQ(from_env->server.url.text, "http://h:1");

  auto from_flags = ParseSandboxOptions({"ls", "--url", "http://f:2", "--token=t2"},
                                        Env({{"CORRAL_TOKEN", "t1"}, {"CORRAL_URL", "http://h:1"}}));
  ASSERT_TRUE(from_flags.ok()) << from_flags.status().ToString();
  EXPECT_EQ(from_flags->server.token, "t2");
  EXPECT_EQ(from_flags->server.url.text, "http://f:2");

  auto defaults = ParseSandboxOptions({"ls"}, Env());
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->server.url.text, "http://127.0.0.1:7878");
}

TEST(ConnectionTest, MissingTokenSaysHowToGetOne) {
  auto options = ParseExecOptions({"sb", "--", "true"}, Env({}));
  ASSERT_FALSE(options.ok());
  EXPECT_THAT(options.status().message(), HasSubstr("CORRAL_TOKEN"));
  EXPECT_THAT(options.status().message(), HasSubstr("corral token mint"));
  EXPECT_THAT(ParseSandboxOptions({"ls", "--token", ""}, Env()).status().message(), StartsWith("--token"));
}

TEST(ConnectionTest, UrlErrorsNameTheirSource) {
  auto from_flag = ParseSandboxOptions({"ls", "--url", "https://x"}, Env());
  ASSERT_FALSE(from_flag.ok());
  EXPECT_THAT(from_flag.status().message(), StartsWith("--url: "));
  EXPECT_THAT(from_flag.status().message(), HasSubstr("not supported yet"));
  auto from_env = ParseCpOptions({"a", "sb:/b"}, Env({{"CORRAL_TOKEN", "t"}, {"CORRAL_URL", "ftp://x"}}));
  ASSERT_FALSE(from_env.ok());
  EXPECT_THAT(from_env.status().message(), StartsWith("CORRAL_URL: "));
}

// ---- sandbox ----

TEST(SandboxOptionsTest, CreateWithEveryOption) {
  auto options = ParseSandboxOptions({"create", "--name", "dev", "--memory=1G", "--cpus", "1.5", "--pids", "512",
                                      "--disk", "10G", "--idle-timeout", "30m", "--no-start", "--json"},
                                     Env());
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(options->verb, SandboxVerb::kCreate);
  EXPECT_EQ(options->name, "dev");
  EXPECT_EQ(options->memory_bytes, 1ull << 30);
  EXPECT_EQ(options->cpu_millis, 1500u);
  EXPECT_EQ(options->pids, 512u);
  EXPECT_EQ(options->disk_bytes, 10ull << 30);
  EXPECT_EQ(options->idle_timeout_s, 1800u);
  EXPECT_FALSE(options->start);
  EXPECT_TRUE(options->json);
  EXPECT_EQ(options->server.token, "env-token");

  nlohmann::json request = BuildCreateSandboxRequest(*options);
  EXPECT_EQ(request, nlohmann::json::parse(R"({"name": "dev", "idle_timeout_s": 1800, "start": false,
      "limits": {"memory_bytes": 1073741824, "cpus": 1.5, "pids": 512, "disk_bytes": 10737418240}})"));
}

TEST(SandboxOptionsTest, CreateDefaultsSendAnEmptyObject) {
  auto options = ParseSandboxOptions({"create"}, Env());
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_TRUE(options->start);
  EXPECT_FALSE(options->json);
  EXPECT_EQ(BuildCreateSandboxRequest(*options), nlohmann::json::object());
}

TEST(SandboxOptionsTest, CreateFromASnapshot) {
  auto options = ParseSandboxOptions({"create", "--snapshot", "snap_abc"}, Env());
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(BuildCreateSandboxRequest(*options), nlohmann::json::parse(R"({"snapshot": "snap_abc"})"));
  auto empty = ParseSandboxOptions({"create", "--snapshot="}, Env());
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().message(), "--snapshot: empty");
}

TEST(SandboxOptionsTest, CreateFromAnImage) {
  auto options = ParseSandboxOptions({"create", "--image", "python:3.12", "--name", "py"}, Env());
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(BuildCreateSandboxRequest(*options), nlohmann::json::parse(R"({"image": "python:3.12", "name": "py"})"));
  auto empty = ParseSandboxOptions({"create", "--image="}, Env());
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().message(), "--image: empty");
}

TEST(SandboxOptionsTest, FullNetworkSaysSoTwice) {
  auto options = ParseSandboxOptions({"create", "--full-network", "--allow-cidr", "10.77.0.0/16"}, Env());
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(BuildCreateSandboxRequest(*options), nlohmann::json::parse(R"({"network": "full",
      "unsafe": ["full_network"], "egress": {"cidrs": ["10.77.0.0/16"]}})"));
  auto plain = ParseSandboxOptions({"create"}, Env());
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(BuildCreateSandboxRequest(*plain).contains("network"));
  EXPECT_FALSE(ParseSandboxOptions({"start", "sb_1", "--full-network"}, Env()).ok());  // create only
}

TEST(SandboxOptionsTest, EgressRulesRepeatOrTakeCommas) {
  auto options = ParseSandboxOptions({"create", "--allow-domain", "registry.npmjs.org,*.github.com", "--allow-domain",
                                      "pypi.org", "--allow-port", "443", "--allow-cidr", "10.1.0.0/16"},
                                     Env());
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(BuildCreateSandboxRequest(*options), nlohmann::json::parse(R"({"egress": {
      "domains": ["registry.npmjs.org", "*.github.com", "pypi.org"], "ports": [443], "cidrs": ["10.1.0.0/16"]}})"));
  // egress ID without rules shows them; with some, sends only those; --none clears domains and ranges.
  auto show = ParseSandboxOptions({"egress", "sb_1"}, Env());
  ASSERT_TRUE(show.ok());
  EXPECT_EQ(show->verb, SandboxVerb::kEgress);
  EXPECT_EQ(BuildEgressRules(*show), nlohmann::json::object());
  auto none = ParseSandboxOptions({"egress", "sb_1", "--none"}, Env());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(BuildEgressRules(*none), nlohmann::json::parse(R"({"domains": [], "cidrs": []})"));
  EXPECT_EQ(ParseSandboxOptions({"egress", "sb_1", "--none", "--allow-domain", "a.test"}, Env()).status().message(),
            "--none: not with --allow-domain or --allow-cidr");
  EXPECT_EQ(ParseSandboxOptions({"create", "--allow-port", "http"}, Env()).status().message(),
            "--allow-port: not a port: 'http'");
  EXPECT_EQ(ParseSandboxOptions({"create", "--allow-port", "65536"}, Env()).status().message(),
            "--allow-port: not a port: '65536'");
  EXPECT_FALSE(ParseSandboxOptions({"egress"}, Env()).ok());  // needs the sandbox
}

TEST(SandboxOptionsTest, EventsAndTheirLines) {
  auto options = ParseSandboxOptions({"events", "sb_1", "--type", "egress", "--after", "40"}, Env());
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(options->verb, SandboxVerb::kEvents);
  EXPECT_EQ(options->event_type, "egress");
  EXPECT_EQ(options->after_seq, 40);
  EXPECT_EQ(ParseSandboxOptions({"events", "sb_1", "--after", "x"}, Env()).status().message(),
            "--after: not a sequence number: 'x'");
  EXPECT_EQ(FormatEvent(nlohmann::json::parse(R"({"seq": 41, "type": "egress", "data": {"decision": "denied",
      "reason": "domain", "method": "CONNECT", "host": "evil.test", "port": 443, "message": "evil.test is not allowed"}})")),
            "41 egress denied CONNECT evil.test:443 reason=domain: evil.test is not allowed\n");
  EXPECT_EQ(FormatEvent(nlohmann::json::parse(R"({"seq": 42, "type": "egress", "data": {"decision": "allowed",
      "method": "GET", "host": "a.test", "port": 80, "address": "203.0.113.10", "rule": "a.test", "bytes_up": 10,
      "bytes_down": 20, "duration_ms": 3}})")),
            "42 egress allowed GET a.test:80 (203.0.113.10) rule=a.test up=10 down=20 3ms\n");
  EXPECT_EQ(FormatEvent(nlohmann::json::parse(R"({"seq": 1, "type": "sandbox.started", "data": {}})")),
            "1 sandbox.started\n");
  EXPECT_EQ(FormatEvent(nlohmann::json::parse(R"({"seq": 3, "type": "network", "data": {"mode": "full",
      "address": "10.231.0.2", "gateway": "10.231.0.1", "interface": "crl0"}})")),
            "3 network full 10.231.0.2 via 10.231.0.1 (crl0)\n");
}

TEST(SandboxOptionsTest, IdleTimeoutZeroMeansNever) {
  auto options = ParseSandboxOptions({"create", "--idle-timeout", "0"}, Env());
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(BuildCreateSandboxRequest(*options)["idle_timeout_s"], 0);
}

TEST(SandboxOptionsTest, VerbsAndIds) {
  struct Case {
    Args args;
    SandboxVerb verb;
    Args ids;
  };
  for (const auto& c : std::vector<Case>{{{"ls"}, SandboxVerb::kList, {}},
                                         {{"list", "--json"}, SandboxVerb::kList, {}},
                                         {{"get", "sb_1"}, SandboxVerb::kGet, {"sb_1"}},
                                         {{"rm", "sb_1", "sb_2"}, SandboxVerb::kRemove, {"sb_1", "sb_2"}},
                                         {{"start", "sb_1"}, SandboxVerb::kStart, {"sb_1"}},
                                         {{"stop", "sb_1"}, SandboxVerb::kStop, {"sb_1"}},
                                         {{"snapshot", "sb_1"}, SandboxVerb::kSnapshot, {"sb_1"}},
                                         {{"fork", "sb_1", "--name", "copy"}, SandboxVerb::kFork, {"sb_1"}},
                                         {{"rm", "--", "-odd-id"}, SandboxVerb::kRemove, {"-odd-id"}},
                                         {{"snapshots"}, SandboxVerb::kSnapshotList, {}},
                                         {{"rm-snapshot", "snap_1", "snap_2"}, SandboxVerb::kSnapshotRemove,
                                          {"snap_1", "snap_2"}}}) {
    auto options = ParseSandboxOptions(c.args, Env());
    ASSERT_TRUE(options.ok()) << c.args[0] << ": " << options.status().ToString();
    EXPECT_EQ(options->verb, c.verb) << c.args[0];
    EXPECT_EQ(options->ids, c.ids) << c.args[0];
  }
  auto fork = ParseSandboxOptions({"fork", "sb_1", "--name", "copy", "--no-start"}, Env());
  ASSERT_TRUE(fork.ok());
  EXPECT_EQ(fork->name, "copy");
  EXPECT_FALSE(fork->start);
}

TEST(SandboxOptionsTest, Help) {
  for (const Args& args : {Args{"--help"}, Args{"create", "--help"}, Args{"rm", "-h"}}) {
    auto options = ParseSandboxOptions(args, Env({}));  // No token needed for help.
    ASSERT_TRUE(options.ok()) << args[0];
    EXPECT_TRUE(options->help);
  }
}

struct BadCase {
  Args args;
  std::string expected_prefix;
};

TEST(SandboxOptionsTest, ErrorsNameTheOptionOrArgument) {
  for (const auto& c : std::vector<BadCase>{
           {{}, "missing command"},
           {{"destroy", "sb_1"}, "unknown command 'sandbox destroy'"},
           {{"create", "--memory", "lots"}, "--memory: not a size: 'lots'"},
           {{"create", "--memory", "0"}, "--memory: must be above 0"},
           {{"create", "--cpus", "many"}, "--cpus: not a number"},
           {{"create", "--cpus", "0"}, "--cpus: must be above 0"},
           {{"create", "--pids", "-1"}, "--pids: not a number"},
           {{"create", "--disk", "x"}, "--disk: not a size"},
           {{"create", "--idle-timeout", "soon"}, "--idle-timeout: not a duration"},
           {{"create", "--name"}, "--name: missing value"},
           {{"create", "--name", ""}, "--name: empty"},
           {{"create", "--no-start=yes"}, "--no-start: takes no value"},
           {{"fork", "sb_1", "--image", "x"}, "unknown option '--image'"},
           {{"create", "extra"}, "sandbox create: unexpected argument 'extra'"},
           {{"ls", "--name", "x"}, "unknown option '--name'"},
           {{"get"}, "sandbox get: expected one sandbox id"},
           {{"get", "a", "b"}, "sandbox get: expected one sandbox id"},
           {{"start"}, "sandbox start: expected one sandbox id"},
           {{"rm"}, "sandbox rm: expected one or more sandbox ids"},
           {{"rm", "-x"}, "unknown option '-x'"},
           {{"snapshot", "--memory", "1G", "sb"}, "unknown option '--memory'"},
           {{"snapshots", "sb_1"}, "sandbox snapshots: unexpected argument 'sb_1'"},
           {{"rm-snapshot"}, "sandbox rm-snapshot: expected one or more snapshot ids"},
       }) {
    auto options = ParseSandboxOptions(c.args, Env());
    ASSERT_FALSE(options.ok()) << (c.args.empty() ? "" : c.args[0]) << " should fail";
    EXPECT_THAT(options.status().message(), StartsWith(c.expected_prefix));
  }
}

TEST(SandboxTableTest, Columns) {
  nlohmann::json sandboxes = nlohmann::json::parse(R"([
      {"id": "sb_1", "name": "dev", "state": "running", "image": "host", "created_at": 1000},
      {"id": "sb_22", "name": "", "state": "stopped", "image": "host", "created_at": 9000, "new": 1}])");
  EXPECT_EQ(FormatSandboxTable(sandboxes, 10000),
            "ID      NAME   STATE     IMAGE   CREATED\n"
            "sb_1    dev    running   host    2 hours ago\n"
            "sb_22   -      stopped   host    16 minutes ago\n");
  nlohmann::json snapshots = nlohmann::json::parse(R"([
      {"id": "snap_1", "sandbox": "sb_1", "bytes": 1, "created_at": 9990},
      {"id": "snap_22", "sandbox": "sb_22", "bytes": 3145728, "created_at": 6400}])");
  EXPECT_EQ(FormatSnapshotTable(snapshots, 10000),
            "ID        SANDBOX   SIZE    CREATED\n"
            "snap_1    sb_1      1 MiB   just now\n"
            "snap_22   sb_22     3 MiB   1 hour ago\n");
  EXPECT_EQ(FormatAge(0), "just now");
  EXPECT_EQ(FormatAge(60), "1 minute ago");
  EXPECT_EQ(FormatAge(86400 * 3), "3 days ago");
}

// ---- exec ----

TEST(ExecOptionsTest, EveryOption) {
  auto options = ParseExecOptions({"--env", "A=1", "--env=B=x=y", "--env", "A=2", "--cwd", "/work", "--user",
                                   "root", "-i", "--tty", "--outcome-json", "-",  //
                                   "sb_1", "--", "sh", "-c", "echo $A"},
                                  Env());
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(options->sandbox, "sb_1");
  EXPECT_EQ(options->argv, (Args{"sh", "-c", "echo $A"}));
  EXPECT_EQ(options->env, (std::vector<std::pair<std::string, std::string>>{{"B", "x=y"}, {"A", "2"}}));
  EXPECT_EQ(options->cwd, "/work");
  EXPECT_EQ(options->user, "root");
  EXPECT_TRUE(options->forward_stdin);
  EXPECT_TRUE(options->tty);
  EXPECT_EQ(options->outcome_json, "-");

  nlohmann::json request = BuildExecRequest(*options, TerminalSize{50, 132}, "xterm-256color");
  EXPECT_EQ(request, nlohmann::json::parse(R"({"sandbox": "sb_1", "argv": ["sh", "-c", "echo $A"],
      "env": {"A": "2", "B": "x=y", "TERM": "xterm-256color"}, "cwd": "/work", "user": "root",
      "stdin": true, "pty": {"rows": 50, "cols": 132}})"));
}

TEST(ExecOptionsTest, DefaultsAndTheCommandAfterTheSandbox) {
  auto options = ParseExecOptions({"sb_1", "ls", "-l", "--", "--env"}, Env());
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(options->argv, (Args{"ls", "-l", "--", "--env"}));
  EXPECT_FALSE(options->forward_stdin);
  EXPECT_FALSE(options->tty);
  EXPECT_FALSE(options->user);
  nlohmann::json request = BuildExecRequest(*options, TerminalSize{}, "xterm");
  EXPECT_EQ(request, nlohmann::json::parse(R"({"sandbox": "sb_1", "argv": ["ls", "-l", "--", "--env"],
      "stdin": false})"));  // No PTY: no TERM either.
}

TEST(ExecOptionsTest, OptionsAfterTheSandboxAndGroupedShortOptions) {
  auto options = ParseExecOptions({"sb_1", "-it", "--user=agent", "--", "bash"}, Env());
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(options->sandbox, "sb_1");
  EXPECT_TRUE(options->forward_stdin);
  EXPECT_TRUE(options->tty);
  EXPECT_EQ(options->user, "agent");
  EXPECT_EQ(options->argv, (Args{"bash"}));
}

TEST(ExecOptionsTest, Errors) {
  for (const auto& c : std::vector<BadCase>{
           {{}, "missing SANDBOX"},
           {{"--", "ls"}, "missing SANDBOX"},
           {{"sb_1"}, "missing the command"},
           {{"sb_1", "--"}, "missing the command"},
           {{"--env", "NOVALUE", "sb", "--", "true"}, "--env: expected K=V, not 'NOVALUE'"},
           {{"--env", "=v", "sb", "--", "true"}, "--env: expected K=V"},
           {{"--user", "nobody", "sb", "--", "true"}, "--user: expected agent or root, not 'nobody'"},
           {{"--cwd", "rel", "sb", "--", "true"}, "--cwd: must be an absolute path"},
           {{"--outcome-json", "", "sb", "--", "true"}, "--outcome-json: missing file name"},
           {{"--memory", "1G", "sb", "--", "true"}, "unknown option '--memory' (see corral exec --help)"},
           {{"-ix", "sb", "--", "true"}, "unknown option '-x'"},
           {{"sb", "--cwd"}, "--cwd: missing value"},
       }) {
    auto options = ParseExecOptions(c.args, Env());
    ASSERT_FALSE(options.ok()) << testing::PrintToString(c.args);
    EXPECT_THAT(options.status().message(), StartsWith(c.expected_prefix)) << testing::PrintToString(c.args);
  }
}

TEST(ShellOptionsTest, DefaultsToALoginBashOnAPty) {
  auto options = ParseShellOptions({"sb_1"}, Env());
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(options->sandbox, "sb_1");
  EXPECT_EQ(options->argv, (Args{"/bin/bash", "-l"}));
  EXPECT_TRUE(options->tty);
  EXPECT_TRUE(options->forward_stdin);
  nlohmann::json request = BuildExecRequest(*options, TerminalSize{24, 80}, std::nullopt);
  EXPECT_EQ(request["pty"], nlohmann::json::parse(R"({"rows": 24, "cols": 80})"));
  EXPECT_EQ(request["stdin"], true);
  EXPECT_FALSE(request.contains("env"));
}

TEST(ShellOptionsTest, UserAndCommand) {
  auto options = ParseShellOptions({"sb_1", "--user", "root", "--", "sh", "-i"}, Env());
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(options->user, "root");
  EXPECT_EQ(options->argv, (Args{"sh", "-i"}));
  EXPECT_FALSE(ParseShellOptions({}, Env()).ok());
  EXPECT_THAT(ParseShellOptions({"--user", "x", "sb"}, Env()).status().message(), StartsWith("--user:"));
  EXPECT_THAT(ParseShellOptions({"-i", "sb"}, Env()).status().message(), StartsWith("unknown option '-i'"));
}

// ---- exit codes, as `corral run` ----

TEST(RemoteOutcomeTest, ExitCodes) {
  auto code = [](const char* json) { return ExitCodeForRemoteOutcome(nlohmann::json::parse(json)); };
  EXPECT_EQ(code(R"({"outcome": "exited", "exit_code": 0, "wall_s": 0.1})"), 0);
  EXPECT_EQ(code(R"({"outcome": "exited", "exit_code": 3})"), 3);
  EXPECT_EQ(code(R"({"outcome": "signaled", "signal": 15})"), 143);
  EXPECT_EQ(code(R"({"outcome": "signaled", "signal": "TERM"})"), 143);
  EXPECT_EQ(code(R"({"outcome": "signaled", "signal": "SIGINT"})"), 130);
  EXPECT_EQ(code(R"({"outcome": "oom_killed", "signal": 9})"), 137);
  EXPECT_EQ(code(R"({"outcome": "oom_killed"})"), 137);
  EXPECT_EQ(code(R"({"outcome": "wall_timeout"})"), 137);
  EXPECT_EQ(code(R"({"outcome": "cpu_time_limit"})"), 137);
  EXPECT_EQ(code(R"({"outcome": "pids_limit", "signal": 9})"), 137);
  EXPECT_EQ(code(R"({"outcome": "killed_by_request"})"), 137);
  EXPECT_EQ(code(R"({"outcome": "setup_failed", "setup_step": "execve", "errno": "ENOENT"})"), 125);
  EXPECT_EQ(code(R"({"outcome": "lost"})"), 125);
  EXPECT_EQ(code(R"({"outcome": "something_new", "exit_code": 4})"), 4);
  EXPECT_EQ(code(R"({"outcome": "something_new"})"), 125);
  EXPECT_EQ(code(R"({"exit_code": "zero"})"), 125);
  EXPECT_EQ(code(R"([])"), 125);
}

// ---- cp ----

TEST(CpLocationTest, SandboxPaths) {
  auto remote = ParseCpLocation("sb_1:/home/agent/a:b");
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  EXPECT_TRUE(remote->in_sandbox());
  EXPECT_EQ(remote->sandbox, "sb_1");
  EXPECT_EQ(remote->path, "/home/agent/a:b");

  for (const char* host : {"file", "./a:b", "/tmp/x:/y", "dir/", ":/x"}) {
    auto location = ParseCpLocation(host);
    ASSERT_TRUE(location.ok()) << host;
    EXPECT_FALSE(location->in_sandbox()) << host;
    EXPECT_EQ(location->path, host);
  }
  auto relative = ParseCpLocation("sb_1:notes.txt");
  ASSERT_FALSE(relative.ok());
  EXPECT_THAT(relative.status().message(), HasSubstr("must be absolute"));
  EXPECT_FALSE(ParseCpLocation("sb_1:").ok());
  EXPECT_FALSE(ParseCpLocation("").ok());
}

TEST(CpOptionsTest, OneSideInASandbox) {
  auto upload = ParseCpOptions({"-r", "./src", "sb_1:/home/agent/src"}, Env());
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  EXPECT_TRUE(upload->recursive);
  EXPECT_FALSE(upload->source.in_sandbox());
  EXPECT_EQ(upload->destination.sandbox, "sb_1");
  EXPECT_EQ(upload->destination.path, "/home/agent/src");

  auto download = ParseCpOptions({"sb_1:/etc/hosts", "hosts", "--recursive"}, Env());
  ASSERT_TRUE(download.ok()) << download.status().ToString();
  EXPECT_TRUE(download->recursive);
  EXPECT_EQ(download->source.sandbox, "sb_1");
  EXPECT_EQ(download->destination.path, "hosts");
}

TEST(CpOptionsTest, Errors) {
  for (const auto& c : std::vector<BadCase>{
           {{"a"}, "expected SRC and DST, got 1"},
           {{"a", "b", "c"}, "expected SRC and DST, got 3"},
           {{"a", "b"}, "neither SRC nor DST is in a sandbox"},
           {{"s1:/a", "s2:/b"}, "both SRC and DST are in sandboxes"},
           {{"s1:a", "b"}, "SRC: 's1:a': the path in the sandbox must be absolute"},
           {{"a", "s1:b"}, "DST: 's1:b': the path in the sandbox must be absolute"},
           {{"-R", "a", "s:/b"}, "unknown option '-R'"},
       }) {
    auto options = ParseCpOptions(c.args, Env());
    ASSERT_FALSE(options.ok()) << testing::PrintToString(c.args);
    EXPECT_THAT(options.status().message(), StartsWith(c.expected_prefix)) << testing::PrintToString(c.args);
  }
}

// ---- admin, token ----

TEST(AdminOptionsTest, Issuers) {
  auto add = ParseAdminOptions({"issuer", "add", "acme.prod-1"}, Env({}));
  ASSERT_TRUE(add.ok()) << add.status().ToString();
  EXPECT_EQ(add->verb, AdminVerb::kIssuerAdd);
  EXPECT_EQ(add->issuer, "acme.prod-1");
  EXPECT_EQ(add->admin.socket_path, "/run/corral/admin.sock");

  auto rm = ParseAdminOptions({"issuer", "rm", "acme", "--admin-socket", "/tmp/a.sock"},
                              Env({{"CORRAL_ADMIN_SOCKET", "/env.sock"}}));
  ASSERT_TRUE(rm.ok()) << rm.status().ToString();
  EXPECT_EQ(rm->verb, AdminVerb::kIssuerRemove);
  EXPECT_EQ(rm->admin.socket_path, "/tmp/a.sock");

  auto ls = ParseAdminOptions({"issuer", "ls", "--json"}, Env({{"CORRAL_ADMIN_SOCKET", "/env.sock"}}));
  ASSERT_TRUE(ls.ok()) << ls.status().ToString();
  EXPECT_EQ(ls->verb, AdminVerb::kIssuerList);
  EXPECT_TRUE(ls->json);
  EXPECT_EQ(ls->admin.socket_path, "/env.sock");

  auto stop_all = ParseAdminOptions({"stop-all", "--admin-socket", "/tmp/b.sock"}, Env({}));
  ASSERT_TRUE(stop_all.ok()) << stop_all.status().ToString();
  EXPECT_EQ(stop_all->verb, AdminVerb::kStopAll);
  EXPECT_FALSE(stop_all->json);
  EXPECT_EQ(stop_all->admin.socket_path, "/tmp/b.sock");
}

TEST(AdminOptionsTest, Nodes) {
  auto drain = ParseAdminOptions({"node", "drain", "n2"}, Env({}));
  ASSERT_TRUE(drain.ok()) << drain.status().ToString();
  EXPECT_EQ(drain->verb, AdminVerb::kNodeDrain);
  EXPECT_EQ(drain->node, "n2");
  EXPECT_FALSE(drain->move);
  auto move = ParseAdminOptions({"node", "drain", "--move", "n2"}, Env({}));
  ASSERT_TRUE(move.ok()) << move.status().ToString();
  EXPECT_TRUE(move->move);
  // --move is a drain's alone.
  auto undrain = ParseAdminOptions({"node", "undrain", "--move", "n2"}, Env({}));
  EXPECT_FALSE(undrain.ok());
  auto undrained = ParseAdminOptions({"node", "undrain", "n2"}, Env({}));
  ASSERT_TRUE(undrained.ok()) << undrained.status().ToString();
  EXPECT_EQ(undrained->verb, AdminVerb::kNodeUndrain);
  EXPECT_FALSE(undrained->move);
}

TEST(AdminOptionsTest, Errors) {
  for (const auto& c : std::vector<BadCase>{
           {{}, "missing command"},
           {{"issuer"}, "missing command"},
           {{"user", "add", "x"}, "unknown command 'admin user'"},
           {{"issuer", "create", "x"}, "unknown command 'admin issuer create'"},
           {{"issuer", "add"}, "admin issuer add: expected one issuer NAME"},
           {{"issuer", "add", "a", "b"}, "admin issuer add: expected one issuer NAME"},
           {{"issuer", "add", "bad name"}, "NAME: 'bad name' is not an issuer name"},
           {{"issuer", "add", std::string(65, 'a')}, "NAME: '"},
           {{"issuer", "ls", "x"}, "admin issuer ls: unexpected argument 'x'"},
           {{"issuer", "rm", "x", "--json"}, "unknown option '--json'"},
           {{"stop-all", "sb_1"}, "admin stop-all: unexpected argument 'sb_1'"},
       }) {
    auto options = ParseAdminOptions(c.args, Env());
    ASSERT_FALSE(options.ok()) << testing::PrintToString(c.args);
    EXPECT_THAT(options.status().message(), StartsWith(c.expected_prefix)) << testing::PrintToString(c.args);
  }
}

TEST(TokenOptionsTest, Mint) {
  auto options = ParseTokenOptions({"mint", "--issuer", "acme", "--user", "user-42", "--ttl", "2h", "--scope",
                                    "exec,  files terminal"},
                                   Env({}));
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(options->verb, AdminVerb::kTokenMint);
  EXPECT_EQ(options->issuer, "acme");
  EXPECT_EQ(options->user, "user-42");
  EXPECT_EQ(options->ttl_s, 7200u);
  EXPECT_EQ(options->scope, "exec files terminal");
  EXPECT_EQ(BuildMintTokenRequest(*options),
            nlohmann::json::parse(R"({"issuer": "acme", "sub": "user-42", "ttl_s": 7200,
                                      "scope": "exec files terminal"})"));

  auto defaults = ParseTokenOptions({"mint", "--issuer=acme", "--user=u"}, Env({}));
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(BuildMintTokenRequest(*defaults),
            nlohmann::json::parse(R"({"issuer": "acme", "sub": "u", "ttl_s": 3600})"));

  auto budget = ParseTokenOptions({"mint", "--issuer=acme", "--user=u", "--budget-usd", "0.25", "--budget-window",
                                   "week"},
                                  Env({}));
  ASSERT_TRUE(budget.ok()) << budget.status().ToString();
  EXPECT_EQ(BuildMintTokenRequest(*budget),
            nlohmann::json::parse(R"({"issuer": "acme", "sub": "u", "ttl_s": 3600,
                                      "budget": {"ai_usd": 0.25, "window": "week"}})"));
  auto daily = ParseTokenOptions({"mint", "--issuer=acme", "--user=u", "--budget-usd=5"}, Env({}));
  ASSERT_TRUE(daily.ok());
  EXPECT_EQ(BuildMintTokenRequest(*daily)["budget"], nlohmann::json::parse(R"({"ai_usd": 5.0, "window": "day"})"));

  auto images = ParseTokenOptions({"mint", "--issuer=acme", "--user=u", "--images", "python:*, host acme/agent:1"},
                                  Env({}));
  ASSERT_TRUE(images.ok()) << images.status().ToString();
  EXPECT_EQ(BuildMintTokenRequest(*images)["limits"],
            nlohmann::json::parse(R"({"images": ["python:*", "host", "acme/agent:1"]})"));
  // An empty list is "no image at all", not "any image" (which is leaving --images out).
  auto none = ParseTokenOptions({"mint", "--issuer=acme", "--user=u", "--images="}, Env({}));
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(BuildMintTokenRequest(*none)["limits"], nlohmann::json::parse(R"({"images": []})"));
  EXPECT_FALSE(BuildMintTokenRequest(*daily).contains("limits"));
}

TEST(TokenOptionsTest, Errors) {
  for (const auto& c : std::vector<BadCase>{
           {{}, "missing command: mint"},
           {{"issue"}, "unknown command 'token issue'"},
           {{"mint", "--user", "u"}, "--issuer: required"},
           {{"mint", "--issuer", "acme"}, "--user: required"},
           {{"mint", "--issuer", "a/b", "--user", "u"}, "--issuer: 'a/b' is not an issuer name"},
           {{"mint", "--issuer", "a", "--user", ""}, "--user: 1 to 256 bytes"},
           {{"mint", "--issuer", "a", "--user", std::string(257, 'u')}, "--user: 1 to 256 bytes"},
           {{"mint", "--issuer", "a", "--user", "u", "--ttl", "soon"}, "--ttl: not a duration: 'soon'"},
           {{"mint", "--issuer", "a", "--user", "u", "--ttl", "0"}, "--ttl: must be at least 1s"},
           {{"mint", "--issuer", "a", "--user", "u", "--scope", " , "}, "--scope: empty"},
           {{"mint", "--issuer", "a", "--user", "u", "extra"}, "token mint: unexpected argument 'extra'"},
           {{"mint", "--issuer", "a", "--user", "u", "--budget-usd", "five"}, "--budget-usd: expected an amount"},
           {{"mint", "--issuer", "a", "--user", "u", "--budget-usd", "-1"}, "--budget-usd: expected an amount"},
           {{"mint", "--issuer", "a", "--user", "u", "--budget-usd", "1", "--budget-window", "year"},
            "--budget-window: hour, day, week or month"},
           {{"mint", "--issuer", "a", "--user", "u", "--budget-window", "day"}, "--budget-window: only with"},
           {{"mint", "--issuer", "a", "--user", "u", "--images", std::string(256, 'i')},
            "--images: an entry is at most 255 characters"},
       }) {
    auto options = ParseTokenOptions(c.args, Env());
    ASSERT_FALSE(options.ok()) << testing::PrintToString(c.args);
    EXPECT_THAT(options.status().message(), StartsWith(c.expected_prefix)) << testing::PrintToString(c.args);
  }
}

// ---- corral execute, corral git ----

TEST(ExecuteOptionsTest, EveryOption) {
  auto options = ParseExecuteOptions({"--repo", "./app", "--keep", "--out=results", "--model", "sonnet", "--timeout",
                                      "10m", "--json", "fix the bug"},
                                     Env());
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(options->repo, "./app");
  EXPECT_EQ(options->task, "fix the bug");
  EXPECT_TRUE(options->keep);
  EXPECT_EQ(options->out_dir, "results");
  EXPECT_EQ(options->model, "sonnet");
  EXPECT_EQ(options->timeout_s, 600u);
  EXPECT_TRUE(options->json);
  EXPECT_EQ(options->server.token, "env-token");
  // The defaults, and a task that looks like an option after "--".
  auto plain = ParseExecuteOptions({"--repo", "x.bundle", "--", "--not-an-option"}, Env());
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->task, "--not-an-option");
  EXPECT_FALSE(plain->keep);
  EXPECT_EQ(plain->out_dir, "");
  EXPECT_FALSE(plain->timeout_s.has_value());
  EXPECT_TRUE(ParseExecuteOptions({"--help"}, Env())->help);
}

TEST(ExecuteOptionsTest, Errors) {
  for (const auto& c : std::vector<BadCase>{
           {{"--repo", "."}, "expected the task"},
           {{"--repo", ".", "one", "two"}, "expected the task"},
           {{"task"}, "--repo: required"},
           {{"--repo", "", "task"}, "--repo: required"},
           {{"--repo", ".", "--out=", "task"}, "--out: missing directory"},
           {{"--repo", ".", "--timeout", "soon", "task"}, "--timeout: a duration"},
           {{"--repo", ".", "--timeout", "0", "task"}, "--timeout: a duration"},
           {{"--repo", ".", "--bogus", "task"}, "unknown option '--bogus'"},
       }) {
    auto options = ParseExecuteOptions(c.args, Env());
    ASSERT_FALSE(options.ok()) << testing::PrintToString(c.args);
    EXPECT_THAT(options.status().message(), StartsWith(c.expected_prefix)) << testing::PrintToString(c.args);
  }
}

TEST(GitOptionsTest, DiffAndBundle) {
  auto diff = ParseGitOptions({"diff", "sb_1", "--path", "/home/agent/w", "--base=HEAD~2", "--json"}, Env());
  ASSERT_TRUE(diff.ok()) << diff.status().ToString();
  EXPECT_EQ(diff->verb, GitVerb::kDiff);
  EXPECT_EQ(diff->sandbox, "sb_1");
  EXPECT_EQ(diff->path, "/home/agent/w");
  EXPECT_EQ(diff->base, "HEAD~2");
  EXPECT_TRUE(diff->json);
  auto bundle = ParseGitOptions({"bundle", "sb_1", "--out", "x.bundle"}, Env());
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  EXPECT_EQ(bundle->verb, GitVerb::kBundle);
  EXPECT_EQ(bundle->out, "x.bundle");
  EXPECT_EQ(bundle->path, "");
  EXPECT_EQ(bundle->base, "");
  EXPECT_TRUE(ParseGitOptions({"--help"}, Env())->help);
  EXPECT_TRUE(ParseGitOptions({"diff", "--help"}, Env())->help);
}

TEST(GitOptionsTest, Errors) {
  for (const auto& c : std::vector<BadCase>{
           {{}, "missing command: diff or bundle"},
           {{"log", "sb"}, "unknown command 'git log'"},
           {{"diff"}, "expected one SANDBOX"},
           {{"diff", "a", "b"}, "expected one SANDBOX"},
           {{"diff", "sb", "--path", "relative"}, "--path: an absolute path"},
           {{"diff", "sb", "--base="}, "--base: missing revision"},
           {{"diff", "sb", "--out", "f"}, "unknown option '--out'"},
           {{"bundle", "sb"}, "--out: required"},
           {{"bundle", "sb", "--out", "f", "--json"}, "unknown option '--json'"},
       }) {
    auto options = ParseGitOptions(c.args, Env());
    ASSERT_FALSE(options.ok()) << testing::PrintToString(c.args);
    EXPECT_THAT(options.status().message(), StartsWith(c.expected_prefix)) << testing::PrintToString(c.args);
  }
}

}  // namespace
}  // namespace corral::cli
