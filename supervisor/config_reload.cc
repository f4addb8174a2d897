// A config reload (config.h's ApplyReload): what changes while corrald runs, and which keys
// differ but wait for the next start.
#include <string>
#include <vector>

#include "supervisor/config.h"
#include "supervisor/config_images.h"
#include "supervisor/config_webhooks.h"

namespace corral::supervisor {

std::vector<std::string> ApplyReload(DaemonConfig& live, const DaemonConfig& fresh) {
  // [sandbox]
  for (uint64_t DaemonConfig::*field :
       {&DaemonConfig::default_memory_bytes, &DaemonConfig::max_memory_bytes, &DaemonConfig::default_cpu_millicores,
        &DaemonConfig::max_cpu_millicores, &DaemonConfig::default_pids, &DaemonConfig::max_pids,
        &DaemonConfig::default_disk_bytes, &DaemonConfig::max_disk_bytes, &DaemonConfig::default_idle_timeout_s,
        &DaemonConfig::max_idle_timeout_s, &DaemonConfig::max_sandboxes_per_user, &DaemonConfig::max_sandboxes,
        &DaemonConfig::max_snapshots_per_user, &DaemonConfig::max_commands_per_sandbox,
        &DaemonConfig::max_sandboxes_per_issuer, &DaemonConfig::max_sessions_per_user,
        &DaemonConfig::max_sessions_per_issuer, &DaemonConfig::stop_grace_s, &DaemonConfig::requests_per_minute}) {
    live.*field = fresh.*field;
  }
  live.relay.requests_per_minute = fresh.relay.requests_per_minute;
  live.server_limits.allowed_origins = fresh.server_limits.allowed_origins;
  live.relay.prices = fresh.relay.prices;
  live.egress_defaults = fresh.egress_defaults;
  live.egress_allowed = fresh.egress_allowed;
  live.pool_sizes = fresh.pool_sizes;
  // [webhooks]: the URLs and events of the events from now on (webhook_outbox.h); turning
  // webhooks on or off, and the rest, at the next start. The secret is read at the start.
  const bool webhooks_restart = WebhooksNeedRestart(live.webhooks, fresh.webhooks);
  if (!webhooks_restart) {
    live.webhooks.urls = fresh.webhooks.urls;
    live.webhooks.events = fresh.webhooks.events;
  }

  std::vector<std::string> restart;
  auto differs = [&](const char* key, bool changed) {
    if (changed) restart.push_back(key);
  };
  differs("daemon.state_dir", live.state_dir != fresh.state_dir);
  differs("daemon.run_dir", live.run_dir != fresh.run_dir);
  differs("daemon.admin_socket", live.admin_socket != fresh.admin_socket || live.admin_group != fresh.admin_group);
  differs("daemon.cgroup_mount", live.cgroup_mount != fresh.cgroup_mount);
  differs("daemon.cgroup_parent", live.cgroup_parent != fresh.cgroup_parent);
  differs("daemon.init_path", live.init_path != fresh.init_path);
  differs("api.listen", live.listen_address != fresh.listen_address || live.listen_port != fresh.listen_port);
  differs("api.web", live.web != fresh.web || live.web_dir != fresh.web_dir);
  const ServerLimits& was = live.server_limits;
  const ServerLimits& is = fresh.server_limits;
  differs("api.max_message", was.max_ws_message_bytes != is.max_ws_message_bytes);
  differs("api.max_body", was.max_body_bytes != is.max_body_bytes || was.max_body_memory != is.max_body_memory ||
                              was.body_min_rate != is.body_min_rate);
  differs("api.ws_queue_hard_limit", was.ws_queue_hard_limit != is.ws_queue_hard_limit);
  differs("api.max_connections", was.max_connections != is.max_connections ||
                                     was.max_ws_connections_per_user != is.max_ws_connections_per_user);
  differs("api timeouts", was.handshake_timeout_s != is.handshake_timeout_s || was.idle_timeout_s != is.idle_timeout_s);
  differs("auth", live.max_clock_skew_s != fresh.max_clock_skew_s ||
                      live.max_token_lifetime_s != fresh.max_token_lifetime_s);
  differs("streams", live.replay_buffer_bytes != fresh.replay_buffer_bytes ||
                         live.max_file_bytes != fresh.max_file_bytes);
  differs("store", live.store_synchronous_full != fresh.store_synchronous_full ||
                       live.store_postgresql != fresh.store_postgresql || live.store_url != fresh.store_url ||
                       live.store_url_file != fresh.store_url_file);
  differs("sandbox.disk_quota", live.disk_quota != fresh.disk_quota);
  differs("node", live.node_id != fresh.node_id || live.node_address != fresh.node_address ||
                      live.node_heartbeat_s != fresh.node_heartbeat_s ||
                      live.node_dead_after_s != fresh.node_dead_after_s ||
                      live.node_cluster_secret_file != fresh.node_cluster_secret_file);
  differs("sessions", live.tool_call_timeout_s != fresh.tool_call_timeout_s ||
                          live.agent_silence_timeout_s != fresh.agent_silence_timeout_s ||
                          live.file_scan_entries != fresh.file_scan_entries ||
                          live.file_scan_interval_s != fresh.file_scan_interval_s);
  differs("relay (port, upstream, api_key_file, ca_file, limits)",
          live.relay.port != fresh.relay.port || live.relay.upstream != fresh.relay.upstream ||
              live.relay.api_key_file != fresh.relay.api_key_file || live.relay.ca_file != fresh.relay.ca_file ||
              live.relay.max_request_bytes != fresh.relay.max_request_bytes ||
              live.relay.timeout_s != fresh.relay.timeout_s);
  differs("execute", live.execute_allowed_repo_paths != fresh.execute_allowed_repo_paths ||
                         live.execute_timeout_s != fresh.execute_timeout_s ||
                         live.execute_max_diff_bytes != fresh.execute_max_diff_bytes ||
                         live.execute_max_bundle_bytes != fresh.execute_max_bundle_bytes);
  differs("secrets", live.secrets_key_file != fresh.secrets_key_file || live.secrets_ca_file != fresh.secrets_ca_file);
  differs("egress (enabled, port, netns, resolver, limits)",
          live.egress_enabled != fresh.egress_enabled || live.egress_port != fresh.egress_port ||
              live.egress_netns != fresh.egress_netns || live.egress_resolver != fresh.egress_resolver ||
              live.egress_max_connections != fresh.egress_max_connections ||
              live.egress_bandwidth != fresh.egress_bandwidth ||
              live.egress_connect_timeout_s != fresh.egress_connect_timeout_s ||
              live.egress_idle_timeout_s != fresh.egress_idle_timeout_s);
  differs("images", !SameImagesConfig(live.images, fresh.images));
  differs("network", live.network_netns != fresh.network_netns ||
                         live.network_full_subnet.ToString() != fresh.network_full_subnet.ToString() ||
                         live.network_dns != fresh.network_dns);
  differs("webhooks (on or off, secret_file, ca_file, timeout, retries, max_age, keep)", webhooks_restart);
  differs("ports", live.ports.domain != fresh.ports.domain ||
                       live.ports.max_connections_per_port != fresh.ports.max_connections_per_port ||
                       live.ports.max_ttl_s != fresh.ports.max_ttl_s ||
                       live.ports.idle_timeout_s != fresh.ports.idle_timeout_s);
  return restart;
}

}  // namespace corral::supervisor
