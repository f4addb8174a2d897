// corrald's configuration: a TOML file that operators edit by hand (default
// /etc/corral/corrald.toml; `corrald --config FILE`). Every key is optional and documented, with
// its default, in dist/corrald.toml; the defaults below are the same values.
//
// Sizes are integers (bytes) or strings with a K/M/G/T suffix ("512M"); durations are integers
// in seconds. Unknown keys and wrongly typed values are errors that name the key and line
// ("corrald.toml:12: sandbox.max_memory: expected a size like \"8G\""), so a typo never passes
// silently. Values are checked for sanity (a default above its maximum is an error).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/server_limits.h"
#include "common/status.h"
#include "supervisor/relay/budget.h"
#include "supervisor/egress/egress_policy.h"
#include "supervisor/images/images_config.h"
#include "supervisor/loopback_ports.h"
#include "supervisor/relay/relay_config.h"
#include "supervisor/sandboxes/layer_kind.h"
#include "supervisor/config_ports.h"
#include "supervisor/webhooks/webhooks_config.h"

namespace corral::supervisor {

struct DaemonConfig {
  // [daemon]
  std::string state_dir = "/var/lib/corral";      // store, sandboxes' layers, snapshots
  std::string run_dir = "/run/corral";            // control sockets, per-run scratch
  std::string admin_socket = "/run/corral/admin.sock";
  // The group that may use the admin socket (mode 0660, root:group), like docker.sock and the
  // docker group; the package creates it. "" or a group this host does not have: root only (0600).
  std::string admin_group = "corral";
  std::string cgroup_mount = "/sys/fs/cgroup";
  // Sandboxes live in <mount>/<parent>/<id>. "" (the default): under systemd the unit's delegated
  // cgroup, <unit>/sandboxes; elsewhere "corral" (cgroup_placement.h).
  std::string cgroup_parent;
  std::string init_path;                          // corral-init; "" = beside corrald, then /usr/libexec/corral

  // [api]
  std::string listen_address = "127.0.0.1";       // api.listen = "127.0.0.1:7878"
  uint16_t listen_port = 7878;
  bool web = true;                                // serve the web page (terminal, sessions) at /
  std::string web_dir;                            // its files; "" = web/ beside corrald, then /usr/share/corral/web
  uint64_t requests_per_minute = 600;             // per user: HTTP requests and WebSocket ops; 0 = no limit
  // The server's limits and allowed_origins: max_message, max_body, max_body_memory, body_min_rate
  // (0: none), max_connections, max_connections_per_user, handshake_timeout, idle_timeout and
  // ws_queue_hard_limit (a WebSocket this far behind, in bytes queued, is closed with 1008).
  ServerLimits server_limits;

  // [auth]
  uint64_t max_clock_skew_s = 60;
  uint64_t max_token_lifetime_s = 24 * 3600;

  // [sandbox]: defaults for what a create request leaves out, and the daemon's own maxima
  // (a token's limits can lower them, never raise them).
  uint64_t default_memory_bytes = 1ull << 30;
  uint64_t max_memory_bytes = 8ull << 30;
  uint64_t default_cpu_millicores = 1000;
  uint64_t max_cpu_millicores = 4000;
  uint64_t default_pids = 512;
  uint64_t max_pids = 4096;
  uint64_t default_disk_bytes = 10ull << 30;
  uint64_t max_disk_bytes = 100ull << 30;
  // How the disk cap is made: "auto" (project quotas where the state dir's file system enforces
  // them, else an ext4 image per sandbox), "project" or "image" (sandboxes/writable_layer.h).
  DiskQuotaMode disk_quota = DiskQuotaMode::kAuto;
  uint64_t default_idle_timeout_s = 1800;
  uint64_t max_idle_timeout_s = 7 * 24 * 3600;
  uint64_t max_sandboxes_per_user = 10;
  uint64_t max_sandboxes = 1000;
  uint64_t max_snapshots_per_user = 10;           // 0: no snapshots
  uint64_t max_commands_per_sandbox = 64;
  uint64_t max_sandboxes_per_issuer = 0;          // 0: no cap beyond max_sandboxes
  uint64_t max_sessions_per_user = 4;             // agent sessions running at once
  uint64_t max_sessions_per_issuer = 0;           // 0: no cap
  uint64_t stop_grace_s = 5;                      // SIGTERM, then SIGKILL after this long

  // [pool]: warm sandboxes (supervisor/sandboxes/warm_pool.h) by image ("host", or an image's
  // name), made ahead with the [sandbox] defaults and claimed by creates of that shape; `sizes = {
  // host = 8 }`. Empty (the default): no pool. A reload fills or drains to the new sizes.
  std::map<std::string, uint64_t> pool_sizes;

  // [streams]
  uint64_t replay_buffer_bytes = 1024 * 1024;     // per command: what a reconnecting client can replay
  uint64_t max_file_bytes = 100ull << 20;         // file API reads and writes

  // [store]
  bool store_synchronous_full = false;            // store.synchronous = "normal" | "full" (SQLite)
  bool store_postgresql = false;                  // store.backend = "sqlite" (default) | "postgresql"
  std::string store_url;                          // store.url: PostgreSQL's connection string
  std::string store_url_file;                     // store.url_file: a file holding it (with a password)

  // [node]: this corrald as a node of a fleet (supervisor/fleet/node_registry.h)
  std::string node_id;                            // node.id; "": the host's name
  std::string node_address;                       // node.address: host:port the other nodes reach it at
  uint64_t node_heartbeat_s = 5;                  // node.heartbeat: how often it says it is alive
  uint64_t node_dead_after_s = 20;                // node.dead_after: silent this long, a node is down
  std::string node_cluster_secret_file;           // node.cluster_secret_file: the fleet's shared secret

  // [sessions]: agent sessions
  uint64_t tool_call_timeout_s = 120;             // a client tool call or permission request unanswered
  uint64_t agent_silence_timeout_s = 900;         // an agent silent this long during a turn is hung
  uint64_t file_scan_entries = 20000;             // entries of a session's workspace a scan looks at
  uint64_t file_scan_interval_s = 2;              // scans during a turn; 0: only at its end

  // [relay]: the model relay on each sandbox's loopback (supervisor/relay/model_relay.h); its api_key
  // stays "" here (corrald reads the file)
  RelayConfig relay{.requests_per_minute = 60};  // model calls per user; 0 = no limit

  // [execute]: headless executions (POST /v1/execute)
  std::vector<std::string> execute_allowed_repo_paths;  // host repositories `repo.path` may name
  uint64_t execute_timeout_s = 3600;              // the longest an execution's agent works (and the default)
  uint64_t execute_max_diff_bytes = 4ull << 20;   // the diff kept in its record; longer: truncated
  uint64_t execute_max_bundle_bytes = 64ull << 20;  // a repository made from a path, and a result's bundle

  // [egress]: the HTTP/CONNECT proxy on each sandbox's loopback (supervisor/egress/egress_proxy.h)
  bool egress_enabled = false;                    // true: the proxy and its variables in every sandbox
  uint64_t egress_port = kEgressProxyPort;         // HTTP(S)_PROXY=http://127.0.0.1:<port> inside
  EgressRules egress_defaults{{}, {443, 80}, {}}; // domains/ports/cidrs: a new sandbox's rules unless it names its own
  EgressRules egress_allowed{{"*"}, {443, 80}, {}};  // allowed_domains/_ports/_cidrs: what any rule may name
  std::string egress_netns;                       // outbound connections from this network namespace; "" = corrald's
  std::string egress_resolver;                    // "IP[:port]" of the DNS server the proxy asks; "" = the system's
  uint64_t egress_max_connections = 64;           // per sandbox, at once
  uint64_t egress_bandwidth = 0;                  // bytes per second per sandbox, both ways together; 0 = no limit
  uint64_t egress_connect_timeout_s = 10;
  uint64_t egress_idle_timeout_s = 300;           // a connection with no bytes either way this long is closed

  // [secrets]: values the egress proxy adds to a sandbox's requests to the hosts they are bound to
  // (supervisor/secrets/); the sandbox holds only a placeholder
  std::string secrets_key_file;                   // base64 of 32 random bytes, root's alone; "" = no secrets
  std::string secrets_ca_file;                    // extra CAs (PEM) trusted for the bound hosts; "" = the system's only

  // [images]: imports and pulls (supervisor/images/image_service.h); images live in
  // <state_dir>/images
  ImagesConfig images;

  // [network]: full network mode (supervisor/sandboxes/full_network.h), for sandboxes created with
  // "network": "full" by a token with the scope unsafe:full_network
  std::string network_netns;                      // the host side of the veths, NAT and filter; "" = corrald's
  Cidr network_full_subnet = *Cidr::Parse("10.231.0.0/16");  // one /30 per sandbox
  std::vector<IpAddress> network_dns;             // IPv4 nameservers in such a sandbox's /etc/resolv.conf

  // [webhooks]: lifecycle events POSTed to the operator's URLs (supervisor/webhooks/)
  WebhooksConfig webhooks;

  // [ports]: preview URLs of the ports sandboxes show (api/port_proxy.h)
  PortsConfig ports;
};

// A config reload (SIGHUP; config_reload.cc): copies into `live` what can change while corrald
// runs ([sandbox]'s defaults, maxima and caps, api.allowed_origins and api.requests_per_minute,
// the relay's price table and requests_per_minute, egress defaults and allowed_*, [pool] sizes,
// webhooks.urls and webhooks.events),
// which the daemon reads on its event loop; returns the keys that differ but take effect only at
// the next start (listeners, paths, cgroups, the relay's upstream and key, ...). The components
// that keep copies of their own (the server's origins, rate limiters, the relay, the warm pool)
// are given the new values by the caller.
std::vector<std::string> ApplyReload(DaemonConfig& live, const DaemonConfig& fresh);

// Parses TOML text; `origin` names the file in error messages.
StatusOr<DaemonConfig> ParseConfig(const std::string& text, const std::string& origin = "config");
// Reads and parses a file. A missing file is an error unless `missing_ok` (then: defaults).
StatusOr<DaemonConfig> LoadConfig(const std::string& path, bool missing_ok = false);

}  // namespace corral::supervisor
