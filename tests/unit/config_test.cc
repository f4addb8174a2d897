#include "supervisor/config.h"

#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "tests/testing/temp_dir.h"

namespace corral::supervisor {
namespace {

// Every field, one per line, so that a mismatch shows which one differs.
std::string Dump(const DaemonConfig& c) {
  std::ostringstream out;
  out << "state_dir=" << c.state_dir << "\nrun_dir=" << c.run_dir << "\nadmin_socket=" << c.admin_socket
      << "\nadmin_group=" << c.admin_group
      << "\ncgroup_mount=" << c.cgroup_mount << "\ncgroup_parent=" << c.cgroup_parent
      << "\ninit_path=" << c.init_path << "\nlisten_address=" << c.listen_address
      << "\nlisten_port=" << c.listen_port << "\nallowed_origins=";
  for (const auto& o : c.server_limits.allowed_origins) out << o << ",";
  out << "\nweb=" << c.web << "\nweb_dir=" << c.web_dir;
  out << "\nmax_message_bytes=" << c.server_limits.max_ws_message_bytes
      << "\nmax_body_bytes=" << c.server_limits.max_body_bytes
      << "\nmax_body_memory_bytes=" << c.server_limits.max_body_memory
      << "\nbody_min_rate_bytes=" << c.server_limits.body_min_rate
      << "\nmax_connections=" << c.server_limits.max_connections
      << "\nmax_connections_per_user=" << c.server_limits.max_ws_connections_per_user
      << "\nhandshake_timeout_s=" << c.server_limits.handshake_timeout_s
      << "\nidle_timeout_s=" << c.server_limits.idle_timeout_s
      << "\nmax_clock_skew_s=" << c.max_clock_skew_s << "\nmax_token_lifetime_s=" << c.max_token_lifetime_s
      << "\ndefault_memory_bytes=" << c.default_memory_bytes << "\nmax_memory_bytes=" << c.max_memory_bytes
      << "\ndefault_cpu_millicores=" << c.default_cpu_millicores
      << "\nmax_cpu_millicores=" << c.max_cpu_millicores << "\ndefault_pids=" << c.default_pids
      << "\nmax_pids=" << c.max_pids << "\ndefault_disk_bytes=" << c.default_disk_bytes
      << "\nmax_disk_bytes=" << c.max_disk_bytes << "\ndisk_quota=" << static_cast<int>(c.disk_quota)
      << "\ndefault_idle_timeout_s=" << c.default_idle_timeout_s
      << "\nmax_idle_timeout_s=" << c.max_idle_timeout_s
      << "\nmax_sandboxes_per_user=" << c.max_sandboxes_per_user << "\nmax_sandboxes=" << c.max_sandboxes
      << "\nmax_snapshots_per_user=" << c.max_snapshots_per_user
      << "\nmax_commands_per_sandbox=" << c.max_commands_per_sandbox << "\nstop_grace_s=" << c.stop_grace_s
      << "\nmax_sandboxes_per_issuer=" << c.max_sandboxes_per_issuer
      << "\nmax_sessions_per_user=" << c.max_sessions_per_user
      << "\nmax_sessions_per_issuer=" << c.max_sessions_per_issuer
      << "\nrequests_per_minute=" << c.requests_per_minute << "\npool_sizes=";
  for (const auto& [image, count] : c.pool_sizes) out << image << ":" << count << ",";
  out
      << "\nws_queue_hard_limit=" << c.server_limits.ws_queue_hard_limit
      << "\nrelay_requests_per_minute=" << c.relay.requests_per_minute
      << "\ntool_call_timeout_s=" << c.tool_call_timeout_s
      << "\nagent_silence_timeout_s=" << c.agent_silence_timeout_s
      << "\nfile_scan_entries=" << c.file_scan_entries << "\nfile_scan_interval_s=" << c.file_scan_interval_s
      << "\nreplay_buffer_bytes=" << c.replay_buffer_bytes << "\nmax_file_bytes=" << c.max_file_bytes
      << "\nstore_synchronous_full=" << c.store_synchronous_full << "\nrelay_port=" << c.relay.port
      << "\nrelay_upstream=" << c.relay.upstream << "\nrelay_api_key_file=" << c.relay.api_key_file
      << "\nrelay_ca_file=" << c.relay.ca_file << "\nrelay_max_request_bytes=" << c.relay.max_request_bytes
      << "\nrelay_timeout_s=" << c.relay.timeout_s << "\nexecute_allowed_repo_paths=";
  for (const auto& p : c.execute_allowed_repo_paths) out << p << ",";
  out << "\nexecute_timeout_s=" << c.execute_timeout_s << "\nexecute_max_diff_bytes=" << c.execute_max_diff_bytes
      << "\nexecute_max_bundle_bytes=" << c.execute_max_bundle_bytes << "\negress_enabled=" << c.egress_enabled
      << "\negress_port=" << c.egress_port << "\negress_defaults=" << EgressRulesJson(c.egress_defaults).dump()
      << "\negress_allowed=" << EgressRulesJson(c.egress_allowed).dump() << "\negress_netns=" << c.egress_netns
      << "\negress_resolver=" << c.egress_resolver << "\negress_max_connections=" << c.egress_max_connections
      << "\negress_bandwidth=" << c.egress_bandwidth << "\negress_connect_timeout_s=" << c.egress_connect_timeout_s
      << "\negress_idle_timeout_s=" << c.egress_idle_timeout_s << "\nsecrets_key_file=" << c.secrets_key_file
      << "\nsecrets_ca_file=" << c.secrets_ca_file << "\nnetwork_netns=" << c.network_netns
      << "\nnetwork_full_subnet=" << c.network_full_subnet.ToString() << "\nnetwork_dns=";
  for (const auto& a : c.network_dns) out << a.ToString() << ",";
  out << "\nimages_max_size=" << c.images.max_size << "\nimages_max_layers=" << c.images.max_layers
      << "\nimages_skopeo=" << c.images.skopeo << "\nimages_registries=";
  for (const auto& r : c.images.registries) {
    out << r.host << "/" << r.insecure << "/" << r.username << "/" << r.password_file << ",";
  }
  const WebhooksConfig& w = c.webhooks;
  out << "\nwebhooks=" << w.secret_file << "/" << w.ca_file << "/" << w.timeout_s << "/" << w.retry_min_s << "/"
      << w.retry_max_s << "/" << w.max_age_s << "/" << w.keep_s << "/";
  for (const auto& url : w.urls) out << url << ",";
  for (WebhookEventType type : w.events) out << WebhookEventName(type) << ",";
  const PortsConfig& p = c.ports;
  out << "\nports=" << p.domain << "/" << p.max_connections_per_port << "/" << p.max_ttl_s << "/" << p.idle_timeout_s;
  out << "\nrelay_prices=";
  for (const auto& [model, price] : c.relay.prices.entries()) {
    out << model << ":" << price.input << "/" << price.output << "/" << price.cache_write << "/" << price.cache_read
        << ",";
  }
  out << "\n";
  out << "\nstore_postgresql=" << c.store_postgresql << "\nstore_url=" << c.store_url
      << "\nstore_url_file=" << c.store_url_file << "\nnode_id=" << c.node_id << "\nnode_address=" << c.node_address
      << "\nnode_heartbeat_s=" << c.node_heartbeat_s << "\nnode_dead_after_s=" << c.node_dead_after_s
      << "\nnode_cluster_secret_file=" << c.node_cluster_secret_file;
  return out.str();
}

// The error message of a config that must not parse.
std::string ErrorOf(const std::string& text) {
  auto parsed = ParseConfig(text, "corrald.toml");
  EXPECT_FALSE(parsed.ok()) << "parsed:\n" << text;
  return parsed.ok() ? "" : parsed.status().message();
}

std::string DistConfigPath() {
  std::string file = __FILE__;
  const std::string suffix = "tests/unit/config_test.cc";
  return file.substr(0, file.size() - suffix.size()) + "dist/corrald.toml";
}

TEST(ConfigTest, EmptyTextGivesDefaults) {
  auto parsed = ParseConfig("");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(Dump(*parsed), Dump(DaemonConfig{}));
  // Comments and empty sections change nothing either.
  parsed = ParseConfig("# nothing\n[daemon]\n[api]\n[sandbox]\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(Dump(*parsed), Dump(DaemonConfig{}));
}

TEST(ConfigTest, EveryKeyParses) {
  auto parsed = ParseConfig(R"(
[daemon]
state_dir = "/srv/corral"
run_dir = "/run/c2"
admin_socket = "/run/c2/admin.sock"
cgroup_mount = "/mnt/cg"
cgroup_parent = "system.slice/corral"
init_path = "/opt/corral/corral-init"

[api]
listen = "0.0.0.0:9000"
allowed_origins = ["https://app.example.com", "http://localhost:3000"]
max_message = "2M"
max_body = 1000
max_connections = 100
max_connections_per_user = 5
handshake_timeout = 3
idle_timeout = 60
ws_queue_hard_limit = "8M"

[auth]
max_clock_skew = 0
max_token_lifetime = 3600

[sandbox]
default_memory = "256M"
max_memory = "2G"
default_cpu_millicores = 500
max_cpu_millicores = 2000
default_pids = 64
max_pids = 128
default_disk = "1G"
max_disk = "5G"
default_idle_timeout = 60
max_idle_timeout = 120
max_sandboxes_per_user = 2
max_sandboxes = 20
max_snapshots_per_user = 3
max_commands_per_sandbox = 8
stop_grace = 0
disk_quota = "project"

[streams]
replay_buffer = "64K"
max_file = "10M"

[store]
synchronous = "full"
)");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const DaemonConfig& c = *parsed;
  EXPECT_EQ(c.state_dir, "/srv/corral");
  EXPECT_EQ(c.run_dir, "/run/c2");
  EXPECT_EQ(c.admin_socket, "/run/c2/admin.sock");
  EXPECT_EQ(c.cgroup_mount, "/mnt/cg");
  EXPECT_EQ(c.cgroup_parent, "system.slice/corral");
  EXPECT_EQ(c.init_path, "/opt/corral/corral-init");
  EXPECT_EQ(c.listen_address, "0.0.0.0");
  EXPECT_EQ(c.listen_port, 9000);
  EXPECT_EQ(c.server_limits.allowed_origins,
            (std::vector<std::string>{"https://app.example.com", "http://localhost:3000"}));
  EXPECT_EQ(c.server_limits.max_ws_message_bytes, 2u << 20);
  EXPECT_EQ(c.server_limits.max_body_bytes, 1000u);
  EXPECT_EQ(c.server_limits.max_connections, 100u);
  EXPECT_EQ(c.server_limits.max_ws_connections_per_user, 5u);
  EXPECT_EQ(c.server_limits.handshake_timeout_s, 3u);
  EXPECT_EQ(c.server_limits.idle_timeout_s, 60u);
  EXPECT_EQ(c.server_limits.ws_queue_hard_limit, 8u << 20);
  EXPECT_EQ(c.max_clock_skew_s, 0u);
  EXPECT_EQ(c.max_token_lifetime_s, 3600u);
  EXPECT_EQ(c.default_memory_bytes, 256u << 20);
  EXPECT_EQ(c.max_memory_bytes, 2ull << 30);
  EXPECT_EQ(c.default_cpu_millicores, 500u);
  EXPECT_EQ(c.max_cpu_millicores, 2000u);
  EXPECT_EQ(c.default_pids, 64u);
  EXPECT_EQ(c.max_pids, 128u);
  EXPECT_EQ(c.default_disk_bytes, 1ull << 30);
  EXPECT_EQ(c.max_disk_bytes, 5ull << 30);
  EXPECT_EQ(c.default_idle_timeout_s, 60u);
  EXPECT_EQ(c.max_idle_timeout_s, 120u);
  EXPECT_EQ(c.max_sandboxes_per_user, 2u);
  EXPECT_EQ(c.max_sandboxes, 20u);
  EXPECT_EQ(c.max_snapshots_per_user, 3u);
  EXPECT_EQ(c.max_commands_per_sandbox, 8u);
  EXPECT_EQ(c.stop_grace_s, 0u);
  EXPECT_EQ(c.disk_quota, DiskQuotaMode::kProject);
  EXPECT_EQ(c.replay_buffer_bytes, 64u << 10);
  EXPECT_EQ(c.max_file_bytes, 10u << 20);
  EXPECT_TRUE(c.store_synchronous_full);
}

TEST(ConfigTest, SizesTakeIntegersAndSuffixes) {
  struct Case {
    const char* value;
    uint64_t bytes;
  } cases[] = {{"4096", 4096},
               {"\"4096\"", 4096},
               {"\"512M\"", 512ull << 20},
               {"\"512m\"", 512ull << 20},
               {"\"64K\"", 64 << 10},
               {"\"2G\"", 2ull << 30},
               {"\"1T\"", 1ull << 40},
               {"\"1.5G\"", 3ull << 29},
               {"\"64MiB\"", 64ull << 20}};
  for (const auto& c : cases) {
    auto parsed = ParseConfig(std::string("[api]\nmax_body_memory = \"2T\"\n[streams]\nmax_file = ") + c.value + "\n");
    ASSERT_TRUE(parsed.ok()) << c.value << ": " << parsed.status().ToString();
    EXPECT_EQ(parsed->max_file_bytes, c.bytes) << c.value;
  }
  for (const char* bad : {"\"8X\"", "\"\"", "-1", "\"-1G\"", "1.5", "true", "[1]"}) {
    EXPECT_EQ(ErrorOf(std::string("[sandbox]\nmax_memory = ") + bad + "\n"),
              "corrald.toml:2: sandbox.max_memory: expected a size like \"8G\"")
        << bad;
  }
}

TEST(ConfigTest, Listen) {
  auto v4 = ParseConfig("api.listen = \"10.0.0.1:80\"");
  ASSERT_TRUE(v4.ok()) << v4.status().ToString();
  EXPECT_EQ(v4->listen_address, "10.0.0.1");
  EXPECT_EQ(v4->listen_port, 80);
  auto v6 = ParseConfig("[api]\nlisten = \"[::1]:7879\"\n");
  ASSERT_TRUE(v6.ok()) << v6.status().ToString();
  EXPECT_EQ(v6->listen_address, "::1");
  EXPECT_EQ(v6->listen_port, 7879);
  // Port 0: the kernel picks a free one (tests; the daemon logs the port it got).
  auto any_port = ParseConfig("api.listen = \"127.0.0.1:0\"");
  ASSERT_TRUE(any_port.ok()) << any_port.status().ToString();
  EXPECT_EQ(any_port->listen_port, 0);
  for (const char* bad : {"\"localhost:7878\"", "\"127.0.0.1\"", "\"127.0.0.1:\"", "\"127.0.0.1:65536\"",
                          "\"::1:7878\"", "\"[::1]\"", "\"[nope]:1\"", "\"1.2.3:4\"", "7878"}) {
    std::string error = ErrorOf(std::string("[api]\nlisten = ") + bad + "\n");
    EXPECT_NE(error.find("corrald.toml:2: api.listen: expected \"ADDRESS:PORT\""), std::string::npos)
        << bad << ": " << error;
  }
}

TEST(ConfigTest, OriginsAndPaths) {
  EXPECT_NE(ErrorOf("[api]\nallowed_origins = [\"https://a.example/\"]\n").find("api.allowed_origins"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[api]\nallowed_origins = \"https://a.example\"\n").find("api.allowed_origins"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[api]\nallowed_origins = [\"*\"]\n").find("api.allowed_origins"), std::string::npos);
  EXPECT_TRUE(ParseConfig("[api]\nallowed_origins = [\"https://a.example:8443\"]\n").ok());

  EXPECT_EQ(ErrorOf("[daemon]\nstate_dir = \"var/lib\"\n"),
            "corrald.toml:2: daemon.state_dir: expected an absolute path");
  EXPECT_NE(ErrorOf("[daemon]\ncgroup_parent = \"../escape\"\n").find("daemon.cgroup_parent"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[daemon]\ncgroup_parent = \"/corral\"\n").find("daemon.cgroup_parent"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[daemon]\ncgroup_parent = \"corral/\"\n").find("daemon.cgroup_parent"),
            std::string::npos);
  // "" is the default written out (systemd's place, else corral), not an error.
  EXPECT_EQ(ParseConfig("[daemon]\ncgroup_parent = \"\"\n").value().cgroup_parent, "");
  EXPECT_EQ(ParseConfig("[daemon]\ncgroup_parent = \"corral\"\n").value().cgroup_parent, "corral");
  EXPECT_NE(ErrorOf("[daemon]\nadmin_socket = \"/" + std::string(120, 'a') + "\"\n").find("longer than 107"),
            std::string::npos);
  EXPECT_EQ(ParseConfig("").value().admin_group, "corral");
  for (const char* group : {"\"\"", "\"docker\"", "\"_admins\"", "\"ops-1\"", "\"machine$\""}) {
    auto parsed = ParseConfig(std::string("[daemon]\nadmin_group = ") + group + "\n");
    ASSERT_TRUE(parsed.ok()) << group << ": " << parsed.status().ToString();
    EXPECT_EQ("\"" + parsed->admin_group + "\"", group);
  }
  for (const char* group : {"\"Root\"", "\"-x\"", "\"a b\"", "\"a$b\"", "\"../x\"", "0", "[\"x\"]"}) {
    EXPECT_NE(ErrorOf(std::string("[daemon]\nadmin_group = ") + group + "\n").find("daemon.admin_group: expected a group"),
              std::string::npos)
        << group;
  }
  auto empty_init = ParseConfig("[daemon]\ninit_path = \"\"\n");
  ASSERT_TRUE(empty_init.ok());
  EXPECT_EQ(empty_init->init_path, "");
}

TEST(ConfigTest, PoolSizesByImage) {
  EXPECT_TRUE(ParseConfig("").value().pool_sizes.empty());  // no pool unless asked
  auto parsed = ParseConfig("[pool]\nsizes = { host = 8, \"python:3.12\" = 2, unused = 0 }\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->pool_sizes, (std::map<std::string, uint64_t>{{"host", 8}, {"python:3.12", 2}}));
  for (const char* bad : {"sizes = 8", "sizes = { host = -1 }", "sizes = { host = \"8\" }",
                          "sizes = { host = 100001 }", "sizes = [\"host\"]"}) {
    auto refused = ParseConfig(std::string("[pool]\n") + bad + "\n");
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().ToString().find("pool.sizes"), std::string::npos) << refused.status().ToString();
  }
  // The pool counts against the daemon's maximum of sandboxes.
  auto over = ParseConfig("[sandbox]\nmax_sandboxes = 10\n[pool]\nsizes = { host = 8, other = 3 }\n");
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().ToString().find("more than sandbox.max_sandboxes"), std::string::npos);
  EXPECT_TRUE(ParseConfig("[sandbox]\nmax_sandboxes = 11\n[pool]\nsizes = { host = 8, other = 3 }\n").ok());
}

TEST(ConfigTest, ReloadTakesNewPoolSizes) {
  DaemonConfig live = ParseConfig("").value();
  auto fresh = ParseConfig("[pool]\nsizes = { host = 3 }\n");
  ASSERT_TRUE(fresh.ok());
  std::vector<std::string> restart = ApplyReload(live, *fresh);
  EXPECT_TRUE(restart.empty());
  EXPECT_EQ(live.pool_sizes.at("host"), 3u);
}

TEST(ConfigTest, UnknownKeyNamesKeyAndLine) {
  EXPECT_EQ(ErrorOf("[sandbox]\nmax_memory = \"1G\"\nmax_memroy = \"2G\"\n"),
            "corrald.toml:3: sandbox.max_memroy: unknown key");
  EXPECT_EQ(ErrorOf("\n\n[sandbx]\nmax_memory = 1\n"), "corrald.toml:3: sandbx: unknown section");
  EXPECT_EQ(ErrorOf("listen = \"127.0.0.1:1\"\n"), "corrald.toml:1: listen: unknown key");
  // The same key in its section parses.
  EXPECT_TRUE(ParseConfig("[sandbox]\nmax_memory = \"1G\"\n").ok());
}

TEST(ConfigTest, WrongTypeNamesKeyAndLine) {
  EXPECT_EQ(ErrorOf("[api]\n\nidle_timeout = \"30\"\n"),
            "corrald.toml:3: api.idle_timeout: expected a whole number of seconds like 30");
  EXPECT_EQ(ErrorOf("[api]\nmax_connections = 1.5\n"),
            "corrald.toml:2: api.max_connections: expected a non-negative integer");
  EXPECT_EQ(ErrorOf("[sandbox]\nmax_pids = -5\n"),
            "corrald.toml:2: sandbox.max_pids: expected a non-negative integer");
  EXPECT_EQ(ErrorOf("[daemon]\nstate_dir = 5\n"),
            "corrald.toml:2: daemon.state_dir: expected an absolute path");
  EXPECT_EQ(ErrorOf("[sandbox]\ndisk_quota = \"xfs\"\n"),
            "corrald.toml:2: sandbox.disk_quota: expected \"auto\", \"project\" or \"image\"");
  EXPECT_EQ(ParseConfig("[sandbox]\ndisk_quota = \"image\"\n")->disk_quota, DiskQuotaMode::kImage);
  EXPECT_EQ(ErrorOf("[store]\nsynchronous = \"off\"\n"),
            "corrald.toml:2: store.synchronous: expected \"normal\" or \"full\"");
  EXPECT_EQ(ErrorOf("api = 5\n"), "corrald.toml:1: api: expected a table ([api])");
  EXPECT_EQ(ErrorOf("[[api]]\n"), "corrald.toml:1: api: expected a table ([api])");
  // Positive control: the right types.
  auto ok =
      ParseConfig("[api]\nidle_timeout = 30\nmax_connections = 200\n[store]\nsynchronous = \"normal\"\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->server_limits.idle_timeout_s, 30u);
  EXPECT_FALSE(ok->store_synchronous_full);
}

TEST(ConfigTest, TheBodiesBudgetHoldsTheLargestUpload) {
  EXPECT_EQ(ErrorOf("[api]\nmax_body_memory = \"32M\"\n"),
            "corrald.toml:2: api.max_body (67108864) is above api.max_body_memory (33554432)");
  EXPECT_EQ(ErrorOf("[api]\nmax_body_memory = \"64M\"\n"),
            "corrald.toml:2: streams.max_file (104857600) is above api.max_body_memory (67108864)");
  // The control: room for one upload of each largest size.
  auto fits = ParseConfig("[api]\nmax_body_memory = \"100M\"\n", "corrald.toml");
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
  EXPECT_EQ(fits->server_limits.max_body_memory, 100u << 20);
}

TEST(ConfigTest, SyntaxErrorNamesLine) {
  std::string error = ErrorOf("[api]\nlisten = \n");
  EXPECT_EQ(error.rfind("corrald.toml:2: ", 0), 0u) << error;
}

TEST(ConfigTest, DefaultAboveMaximumIsAnError) {
  EXPECT_EQ(ErrorOf("[sandbox]\ndefault_memory = \"16G\"\n"),
            "corrald.toml:2: sandbox.default_memory (17179869184) is above sandbox.max_memory (8589934592)");
  // Lowering the maximum below the default names the maximum's line.
  EXPECT_EQ(ErrorOf("[sandbox]\n\nmax_pids = 10\n"),
            "corrald.toml:3: sandbox.default_pids (512) is above sandbox.max_pids (10)");
  EXPECT_NE(ErrorOf("[sandbox]\ndefault_cpu_millicores = 5000\n").find("max_cpu_millicores"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[sandbox]\ndefault_idle_timeout = 999999999\n").find("max_idle_timeout"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[sandbox]\nmax_disk = \"1G\"\n").find("default_disk"), std::string::npos);
  EXPECT_NE(ErrorOf("[sandbox]\nmax_sandboxes = 5\n").find("max_sandboxes_per_user"), std::string::npos);
  // Equal is fine, and raising both together is fine.
  EXPECT_TRUE(ParseConfig("[sandbox]\ndefault_memory = \"8G\"\n").ok());
  EXPECT_TRUE(ParseConfig("[sandbox]\ndefault_memory = \"16G\"\nmax_memory = \"32G\"\n").ok());
}

TEST(ConfigTest, ZeroWhereAPositiveValueIsNeeded) {
  EXPECT_EQ(ErrorOf("[api]\nmax_connections = 0\n"), "corrald.toml:2: api.max_connections: must be positive");
  EXPECT_EQ(ErrorOf("[api]\nidle_timeout = 0\n"), "corrald.toml:2: api.idle_timeout: must be positive");
  EXPECT_EQ(ErrorOf("[streams]\nmax_file = \"0\"\n"), "corrald.toml:2: streams.max_file: must be positive");
  // A queue's hard limit at or below its high-water mark would drop a client that only reads slowly.
  EXPECT_EQ(ErrorOf("[api]\nws_queue_hard_limit = \"1M\"\n"),
            "corrald.toml:2: api.ws_queue_hard_limit: must be above 1M (where a connection's queue is full and "
            "the daemon stops reading the output it carries)");
  EXPECT_TRUE(ParseConfig("[api]\nws_queue_hard_limit = \"2M\"\n").ok());
  // Zero is meaningful for these.
  EXPECT_TRUE(ParseConfig("[sandbox]\nstop_grace = 0\n[auth]\nmax_clock_skew = 0\n").ok());
}

TEST(ConfigTest, DistConfigGivesTheDefaults) {
  auto text = ReadFileToString(DistConfigPath());
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  auto parsed = ParseConfig(*text, "dist/corrald.toml");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(Dump(*parsed), Dump(DaemonConfig{}));
}

// The documented values are the real defaults: uncommenting every key changes nothing.
TEST(ConfigTest, DistConfigDocumentsEveryKeyWithItsDefault) {
  auto text = ReadFileToString(DistConfigPath());
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  std::regex key_line("^# ([a-z_]+ = .*)$");
  std::istringstream in(*text);
  std::string line, uncommented;
  int keys = 0;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, key_line)) {
      uncommented += m[1].str() + "\n";
      ++keys;
    } else {
      uncommented += line + "\n";
    }
  }
  EXPECT_EQ(keys, 97);  // every field of DaemonConfig but the prices, store.url(_file), node.id/address,
                        // node.cluster_secret_file and webhooks.urls/secret_file; listen sets two
  auto parsed = ParseConfig(uncommented, "uncommented");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(Dump(*parsed), Dump(DaemonConfig{}));
  // The check has teeth: a changed value is seen.
  auto changed =
      ParseConfig(std::regex_replace(uncommented, std::regex("max_pids = 4096"), "max_pids = 4095"));
  ASSERT_TRUE(changed.ok());
  EXPECT_NE(Dump(*changed), Dump(DaemonConfig{}));
}

TEST(ConfigTest, LoadConfig) {
  auto missing = LoadConfig("/nonexistent/corrald.toml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().error_number(), ENOENT);
  auto defaults = LoadConfig("/nonexistent/corrald.toml", /*missing_ok=*/true);
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(Dump(*defaults), Dump(DaemonConfig{}));

  test::TempDir dir("config-test");
  std::string path = dir.Join("c.toml");
  ASSERT_TRUE(WriteNewFile(path, "[api]\nmax_body = 7\nbogus = 1\n").ok());
  auto bad = LoadConfig(path, /*missing_ok=*/true);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), path + ":3: api.bogus: unknown key");
  ASSERT_TRUE(WriteNewFile(path, "[api]\nmax_body = 7\n").ok());
  auto good = LoadConfig(path);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->server_limits.max_body_bytes, 7u);
}

TEST(ConfigTest, RelayKeysAndPrices) {
  auto parsed = ParseConfig(R"(
[relay]
port = 9999
upstream = "http://127.0.0.1:8080"
api_key_file = "/etc/corral/anthropic.key"
ca_file = "/etc/ssl/extra.pem"
max_request = "1M"
timeout = 30
[relay.prices."claude-sonnet-5-5"]
input = 3
output = "15"
cache_write = 3.75
cache_read = 0.3
[relay.prices.default]
input = 1
output = 1
cache_write = 1
cache_read = 0.000001
)");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->relay.port, 9999u);
  EXPECT_EQ(parsed->relay.upstream, "http://127.0.0.1:8080");
  EXPECT_EQ(parsed->relay.api_key_file, "/etc/corral/anthropic.key");
  EXPECT_EQ(parsed->relay.max_request_bytes, 1u << 20);
  auto sonnet = parsed->relay.prices.Find("claude-sonnet-5-5-20261101");
  ASSERT_TRUE(sonnet.has_value());
  EXPECT_EQ(sonnet->input, 3000000);
  EXPECT_EQ(sonnet->output, 15000000);
  EXPECT_EQ(sonnet->cache_write, 3750000);
  EXPECT_EQ(sonnet->cache_read, 300000);  // 0.3 as a float, rounded to the micro-dollar
  EXPECT_EQ(parsed->relay.prices.Find("claude-opus-5-5")->cache_read, 1);

  EXPECT_EQ(ErrorOf("[relay]\nupstream = \"http://api.anthropic.com\"\n"),
            "corrald.toml:2: relay.upstream: plain http only to a loopback host (a test upstream); use https");
  EXPECT_NE(ErrorOf("[relay]\nupstream = \"https://host/v1\"\n").find("without a path"), std::string::npos);
  EXPECT_NE(ErrorOf("[relay]\nport = 0\n").find("relay.port: expected a port"), std::string::npos);
  EXPECT_NE(ErrorOf("[relay]\nport = 70000\n").find("relay.port"), std::string::npos);
  EXPECT_NE(ErrorOf("[relay.prices.m]\ninput = 1\noutput = 1\ncache_write = 1\n").find("m: cache_read is missing"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[relay.prices.m]\ninput = -1\noutput = 1\ncache_write = 1\ncache_read = 1\n")
                .find("m.input: expected USD per million tokens"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[relay.prices.m]\nin = 1\n").find("m.in: unknown key"), std::string::npos);
  EXPECT_NE(ErrorOf("[relay.prices.m]\ninput = \"1.0000001\"\noutput = 1\ncache_write = 1\ncache_read = 1\n")
                .find("m.input"),
            std::string::npos);
}

TEST(ConfigTest, SessionFileScanKeys) {
  auto defaults = ParseConfig("");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->file_scan_entries, 20000u);
  EXPECT_EQ(defaults->file_scan_interval_s, 2u);
  auto parsed = ParseConfig("[sessions]\nfile_scan_entries = 500\nfile_scan_interval = 0\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->file_scan_entries, 500u);
  EXPECT_EQ(parsed->file_scan_interval_s, 0u);  // only at the end of each turn
  auto none = ParseConfig("[sessions]\nfile_scan_entries = 0\n");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("sessions.file_scan_entries: must be positive"), std::string::npos)
      << none.status().message();
}

TEST(ConfigTest, ExecuteKeys) {
  auto defaults = ParseConfig("");
  ASSERT_TRUE(defaults.ok());
  // Nothing is allowed unless the operator lists it.
  EXPECT_TRUE(defaults->execute_allowed_repo_paths.empty());
  EXPECT_EQ(defaults->execute_timeout_s, 3600u);
  EXPECT_EQ(defaults->execute_max_diff_bytes, 4u << 20);
  EXPECT_EQ(defaults->execute_max_bundle_bytes, 64u << 20);

  auto parsed = ParseConfig(R"(
[execute]
allowed_repo_paths = ["/srv/repos/app", "/"]
timeout = 600
max_diff = "64K"
max_bundle = "1M"
)");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->execute_allowed_repo_paths, (std::vector<std::string>{"/srv/repos/app", "/"}));
  EXPECT_EQ(parsed->execute_timeout_s, 600u);
  EXPECT_EQ(parsed->execute_max_diff_bytes, 64u << 10);
  EXPECT_EQ(parsed->execute_max_bundle_bytes, 1u << 20);

  const std::string expected =
      "corrald.toml:2: execute.allowed_repo_paths: expected an array of absolute paths like [\"/srv/repos/app\"]";
  for (const char* bad : {"\"/srv/repos\"", "[\"srv/repos\"]", "[\"\"]", "[\"/srv/repos/\"]", "[\"/srv/../etc\"]",
                          "[\"/srv/./x\"]", "[\"/srv//x\"]", "[\"/srv/..\"]", "[1]"}) {
    EXPECT_EQ(ErrorOf(std::string("[execute]\nallowed_repo_paths = ") + bad + "\n"), expected) << bad;
  }
  EXPECT_EQ(ErrorOf("[execute]\ntimeout = 0\n"), "corrald.toml:2: execute.timeout: must be positive");
  EXPECT_EQ(ErrorOf("[execute]\nmax_bundle = 0\n"), "corrald.toml:2: execute.max_bundle: must be positive");
  EXPECT_EQ(ErrorOf("[execute]\nbogus = 1\n"), "corrald.toml:2: execute.bogus: unknown key");
}

TEST(ConfigTest, SecretsKeys) {
  auto defaults = ParseConfig("");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->secrets_key_file, "");  // no secrets unless the operator gives a key
  EXPECT_EQ(defaults->secrets_ca_file, "");
  auto parsed = ParseConfig("[secrets]\nkey_file = \"/etc/corral/secrets.key\"\nca_file = \"/etc/corral/ca.pem\"\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->secrets_key_file, "/etc/corral/secrets.key");
  EXPECT_EQ(parsed->secrets_ca_file, "/etc/corral/ca.pem");
  EXPECT_NE(ErrorOf("[secrets]\nkey_file = \"relative.key\"\n").find("secrets.key_file"), std::string::npos);
  EXPECT_NE(ErrorOf("[secrets]\nkey = \"x\"\n").find("secrets.key"), std::string::npos);
}

TEST(ConfigTest, EgressKeys) {
  auto defaults = ParseConfig("");
  ASSERT_TRUE(defaults.ok());
  // No hidden allowlist: a sandbox that names no rules reaches no domain.
  EXPECT_FALSE(defaults->egress_enabled);  // off unless the operator turns it on
  EXPECT_TRUE(defaults->egress_defaults.domains.empty());
  EXPECT_TRUE(defaults->egress_defaults.cidrs.empty());
  EXPECT_EQ(defaults->egress_allowed.domains, (std::vector<std::string>{"*"}));
  EXPECT_EQ(defaults->egress_port, 7882u);

  auto parsed = ParseConfig(R"(
[egress]
enabled = true
port = 7990
domains = ["registry.npmjs.org", "*.github.com"]
ports = [443]
cidrs = ["10.1.0.0/16"]
allowed_domains = ["*.npmjs.org", "*.github.com"]
allowed_ports = [443, 8443]
allowed_cidrs = ["10.0.0.0/8"]
netns = "/run/netns/egress"
resolver = "[::1]:5353"
max_connections = 8
bandwidth = "10M"
connect_timeout = 3
idle_timeout = 30
)");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(parsed->egress_enabled);
  EXPECT_EQ(parsed->egress_port, 7990u);
  EXPECT_EQ(parsed->egress_defaults.domains, (std::vector<std::string>{"registry.npmjs.org", "*.github.com"}));
  EXPECT_EQ(parsed->egress_defaults.ports, (std::vector<uint16_t>{443}));
  ASSERT_EQ(parsed->egress_defaults.cidrs.size(), 1u);
  EXPECT_EQ(parsed->egress_defaults.cidrs[0].ToString(), "10.1.0.0/16");
  EXPECT_EQ(parsed->egress_allowed.ports, (std::vector<uint16_t>{443, 8443}));
  EXPECT_EQ(parsed->egress_netns, "/run/netns/egress");
  EXPECT_EQ(parsed->egress_resolver, "[::1]:5353");
  EXPECT_EQ(parsed->egress_max_connections, 8u);
  EXPECT_EQ(parsed->egress_bandwidth, 10u << 20);
  EXPECT_EQ(parsed->egress_connect_timeout_s, 3u);
  EXPECT_EQ(parsed->egress_idle_timeout_s, 30u);

  // Defaults must lie within what is allowed; the error names the rule.
  const std::string outside = ErrorOf("[egress]\ndomains = [\"evil.test\"]\nallowed_domains = [\"*.example.com\"]\n");
  EXPECT_NE(outside.find("a default rule outside the allowed ones"), std::string::npos) << outside;
  EXPECT_NE(outside.find("evil.test"), std::string::npos) << outside;
  EXPECT_NE(ErrorOf("[egress]\nports = [22]\n").find("22"), std::string::npos);
  // Positive control: inside the caps parses.
  EXPECT_TRUE(ParseConfig("[egress]\ndomains = [\"a.example.com\"]\nallowed_domains = [\"*.example.com\"]\n").ok());

  EXPECT_NE(ErrorOf("[egress]\ndomains = \"example.com\"\n").find("egress.domains: expected an array of domains"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[egress]\ndomains = [\"exa mple.com\"]\n").find("egress.domains"), std::string::npos);
  EXPECT_NE(ErrorOf("[egress]\nports = [0]\n").find("egress.ports"), std::string::npos);
  EXPECT_NE(ErrorOf("[egress]\ncidrs = [\"10.0.0.0/33\"]\n").find("egress.cidrs"), std::string::npos);
  EXPECT_NE(ErrorOf("[egress]\nenabled = 1\n").find("egress.enabled: expected true or false"), std::string::npos);
  EXPECT_NE(ErrorOf("[egress]\nnetns = \"egress\"\n").find("egress.netns: expected the path"), std::string::npos);
  EXPECT_NE(ErrorOf("[egress]\nresolver = \"dns.example\"\n").find("egress.resolver: expected an IP address"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[egress]\nport = 7880\n").find("egress.port: taken"), std::string::npos);
  EXPECT_NE(ErrorOf("[egress]\nport = 7881\n").find("egress.port: taken"), std::string::npos);
  EXPECT_EQ(ErrorOf("[egress]\nmax_connections = 0\n"), "corrald.toml:2: egress.max_connections: must be positive");
}

TEST(ConfigTest, NetworkKeys) {
  auto parsed = ParseConfig(
      "[network]\nnetns = \"/run/netns/uplink\"\nfull_subnet = \"10.9.8.0/24\"\ndns = [\"192.0.2.53\", \"10.0.0.2\"]\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->network_netns, "/run/netns/uplink");
  EXPECT_EQ(parsed->network_full_subnet.ToString(), "10.9.8.0/24");
  ASSERT_EQ(parsed->network_dns.size(), 2u);
  EXPECT_EQ(parsed->network_dns[1].ToString(), "10.0.0.2");
  // The defaults: corrald's own namespace, 10.231.0.0/16, no nameservers.
  DaemonConfig defaults;
  EXPECT_EQ(defaults.network_netns, "");
  EXPECT_EQ(defaults.network_full_subnet.ToString(), "10.231.0.0/16");
  EXPECT_TRUE(defaults.network_dns.empty());

  EXPECT_NE(ErrorOf("[network]\nnetns = \"uplink\"\n").find("network.netns: expected the path"), std::string::npos);
  for (const char* subnet : {"10.0.0.0/31", "10.0.0.0/7", "fd00::/64", "10.0.0.1/24", "ten"}) {
    EXPECT_NE(ErrorOf(std::string("[network]\nfull_subnet = \"") + subnet + "\"\n").find("network.full_subnet: expected"),
              std::string::npos)
        << subnet;
  }
  EXPECT_NE(ErrorOf("[network]\ndns = [\"::1\"]\n").find("network.dns: expected an array of IPv4"), std::string::npos);
  EXPECT_NE(ErrorOf("[network]\ndns = \"192.0.2.53\"\n").find("network.dns: expected"), std::string::npos);
  EXPECT_NE(ErrorOf("[network]\ndns = [\"192.0.2.1\", \"192.0.2.2\", \"192.0.2.3\", \"192.0.2.4\"]\n").find("at most 3"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[network]\nmode = \"full\"\n").find("network.mode"), std::string::npos);
}

TEST(ConfigTest, ImagesKeys) {
  auto parsed = ParseConfig(R"([images]
max_size = "2G"
max_layers = 32
skopeo = "/usr/local/bin/skopeo"

[[images.registry]]
host = "127.0.0.1:5000"
insecure = true
username = "corral"
password_file = "/etc/corral/registry-password"

[[images.registry]]
host = "registry.example.com"
)");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->images.max_size, 2ull << 30);
  EXPECT_EQ(parsed->images.max_layers, 32u);
  EXPECT_EQ(parsed->images.skopeo, "/usr/local/bin/skopeo");
  ASSERT_EQ(parsed->images.registries.size(), 2u);
  EXPECT_EQ(parsed->images.registries[0].host, "127.0.0.1:5000");
  EXPECT_TRUE(parsed->images.registries[0].insecure);
  EXPECT_EQ(parsed->images.registries[0].username, "corral");
  EXPECT_EQ(parsed->images.registries[0].password_file, "/etc/corral/registry-password");
  EXPECT_EQ(parsed->images.registries[1].host, "registry.example.com");
  EXPECT_FALSE(parsed->images.registries[1].insecure);
  EXPECT_EQ(parsed->images.registries[1].username, "");
  // The defaults: 16 GiB, 128 layers, skopeo from PATH, no registries.
  DaemonConfig defaults;
  EXPECT_EQ(defaults.images.max_size, 16ull << 30);
  EXPECT_EQ(defaults.images.max_layers, 128u);
  EXPECT_EQ(defaults.images.skopeo, "skopeo");
  EXPECT_TRUE(defaults.images.registries.empty());
  // The bounds pass: one layer, 128 layers, a program name.
  EXPECT_TRUE(ParseConfig("[images]\nmax_layers = 1\n").ok());
  EXPECT_TRUE(ParseConfig("[images]\nmax_layers = 128\nskopeo = \"skopeo\"\n").ok());
}

TEST(ConfigTest, BadImagesKeysNameKeyAndLine) {
  EXPECT_EQ(ErrorOf("[images]\nmax_layers = 0\n"), "corrald.toml:2: images.max_layers: must be positive");
  EXPECT_EQ(ErrorOf("[images]\n\nmax_layers = 129\n"),
            "corrald.toml:3: images.max_layers: at most 128 (an overlay's lower layers)");
  EXPECT_EQ(ErrorOf("[images]\nmax_layers = -1\n"), "corrald.toml:2: images.max_layers: expected a non-negative integer");
  EXPECT_EQ(ErrorOf("[images]\nmax_size = 0\n"), "corrald.toml:2: images.max_size: must be positive");
  EXPECT_EQ(ErrorOf("[images]\nmax_size = \"lots\"\n"), "corrald.toml:2: images.max_size: expected a size like \"8G\"");
  for (const char* skopeo : {"", "bin/skopeo", "./skopeo"}) {
    EXPECT_EQ(ErrorOf(std::string("[images]\nskopeo = \"") + skopeo + "\"\n"),
              "corrald.toml:2: images.skopeo: expected an absolute path or a program name like \"skopeo\"")
        << skopeo;
  }
  EXPECT_EQ(ErrorOf("[images]\nmaxsize = \"1G\"\n"), "corrald.toml:2: images.maxsize: unknown key");
  EXPECT_NE(ErrorOf("[images]\nregistry = \"127.0.0.1:5000\"\n").find("images.registry: expected tables"),
            std::string::npos);
}

TEST(ConfigTest, BadRegistriesNameTheTableKeyAndLine) {
  const std::string good = "[[images.registry]]\nhost = \"127.0.0.1:5000\"\n";
  ASSERT_TRUE(ParseConfig(good).ok());
  auto error = [&](const std::string& second) { return ErrorOf(good + "\n[[images.registry]]\n" + second); };
  EXPECT_NE(error("host = \"r.example\"\nhots = 1\n").find("[2].hots (line 6): unknown key"), std::string::npos);
  EXPECT_NE(error("insecure = true\n").find("[2] (line 4): host is missing"), std::string::npos);
  EXPECT_NE(error("host = \"127.0.0.1:5000\"\n").find("is named twice"), std::string::npos);
  for (const char* host : {"https://r.example", "r.example/acme", "", "-r"}) {
    EXPECT_NE(error(std::string("host = \"") + host + "\"\n").find("[2].host (line 5): expected a registry"),
              std::string::npos)
        << host;
  }
  EXPECT_NE(error("host = \"r.example\"\ninsecure = \"yes\"\n").find("[2].insecure (line 6): expected true or false"),
            std::string::npos);
  const std::string host = "host = \"r.example\"\n";
  EXPECT_NE(error(host + "username = \"a:b\"\npassword_file = \"/p\"\n").find("[2].username (line 6)"),
            std::string::npos);
  EXPECT_NE(error(host + "username = \"a\"\npassword_file = \"p\"\n").find("[2].password_file (line 7): expected an absolute path"),
            std::string::npos);
  EXPECT_NE(error(host + "username = \"a\"\n").find("username and password_file go together"), std::string::npos);
  EXPECT_NE(error(host + "password_file = \"/p\"\n").find("username and password_file go together"), std::string::npos);
  // The positive control of each: a second registry with every key right.
  EXPECT_TRUE(ParseConfig(good + "\n[[images.registry]]\n" + host + "insecure = false\nusername = \"a\"\n"
                          "password_file = \"/p\"\n").ok());
  // The password file is read at pull time, not here: a missing one loads.
  EXPECT_TRUE(ParseConfig(good + "username = \"a\"\npassword_file = \"/nonexistent/corral-password\"\n").ok());
}

}  // namespace
}  // namespace corral::supervisor

namespace corral::supervisor {
namespace {

// A reload copies what may change while corrald runs and names what needs a restart.
TEST(ConfigReloadTest, AppliesTheReloadableKeysAndNamesTheOthers) {
  auto live = ParseConfig("[sandbox]\nmax_memory = \"2G\"\n[api]\nlisten = \"127.0.0.1:7878\"\n");
  auto fresh = ParseConfig(
      "[sandbox]\nmax_memory = \"4G\"\nmax_sandboxes_per_user = 3\n"
      "[api]\nlisten = \"127.0.0.1:9999\"\nallowed_origins = [\"https://a.example\"]\nrequests_per_minute = 5\n"
      "[relay]\nrequests_per_minute = 7\n[relay.prices.default]\ninput = 1\noutput = 2\ncache_write = 1\ncache_read = 0.1\n"
      "[egress]\ndomains = [\"x.example\"]\n");
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  std::vector<std::string> restart = ApplyReload(*live, *fresh);
  EXPECT_EQ(live->max_memory_bytes, 4ull << 30);
  EXPECT_EQ(live->max_sandboxes_per_user, 3u);
  EXPECT_EQ(live->server_limits.allowed_origins, std::vector<std::string>{"https://a.example"});
  EXPECT_EQ(live->requests_per_minute, 5u);
  EXPECT_EQ(live->relay.requests_per_minute, 7u);
  EXPECT_TRUE(live->relay.prices.Find("claude-any").has_value());
  EXPECT_EQ(live->egress_defaults.domains, std::vector<std::string>{"x.example"});
  // Not applied: the listener stays where it is, and is named.
  EXPECT_EQ(live->listen_port, 7878);
  EXPECT_EQ(restart, std::vector<std::string>{"api.listen"});
  // Control: the same config again changes nothing and needs nothing.
  EXPECT_EQ(ApplyReload(*live, *live), std::vector<std::string>{});
}

// [images] is the image service's, fixed at its start: a change is named, not applied.
TEST(ConfigReloadTest, ImagesNeedARestart) {
  auto live = ParseConfig("[[images.registry]]\nhost = \"127.0.0.1:5000\"\n");
  auto fresh = ParseConfig("[[images.registry]]\nhost = \"127.0.0.1:5000\"\ninsecure = true\n");
  ASSERT_TRUE(live.ok() && fresh.ok());
  EXPECT_EQ(ApplyReload(*live, *live), std::vector<std::string>{});
  EXPECT_EQ(ApplyReload(*live, *fresh), std::vector<std::string>{"images"});
  EXPECT_FALSE(live->images.registries[0].insecure);
  auto bigger = ParseConfig("[images]\nmax_size = \"32G\"\n[[images.registry]]\nhost = \"127.0.0.1:5000\"\n");
  ASSERT_TRUE(bigger.ok());
  EXPECT_EQ(ApplyReload(*live, *bigger), std::vector<std::string>{"images"});
}

}  // namespace
}  // namespace corral::supervisor
