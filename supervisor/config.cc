#include "supervisor/config.h"

#include <arpa/inet.h>
#include <sys/un.h>

#include <cerrno>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <string_view>
#include <type_traits>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "common/file_util.h"
#include "common/parse.h"
#include "rootfs/mount_plan.h"
#include "supervisor/config_fleet.h"
#include "supervisor/config_images.h"
#include "supervisor/config_webhooks.h"
#include "supervisor/loopback_ports.h"
#include "supervisor/relay/price_config.h"
#include "supervisor/relay/upstream_url.h"

namespace corral::supervisor {
namespace {

// Applies one value to the config. Returns "" on success, else what was expected
// ("expected a size like \"8G\""): the caller prefixes file, line and key.
using Apply = std::function<std::string(const toml::node&, DaemonConfig&)>;

struct KeySpec {
  std::string_view section;
  std::string_view name;
  Apply apply;
};

// An integer >= 0, or nullopt (wrong type or negative).
std::optional<uint64_t> NonNegative(const toml::node& node) {
  const auto* integer = node.as_integer();
  if (integer == nullptr || integer->get() < 0) return std::nullopt;
  return static_cast<uint64_t>(integer->get());
}

// The elements of an array, each converted by `element` (nullopt: not valid); nullopt when `node`
// is not an array or an element is not valid.
template <typename T>
std::optional<std::vector<T>> ArrayOf(const toml::node& node,
                                      const std::function<std::optional<T>(const toml::node&)>& element) {
  const auto* array = node.as_array();
  if (array == nullptr) return std::nullopt;
  std::vector<T> out;
  for (const toml::node& item : *array) {
    std::optional<T> value = element(item);
    if (!value) return std::nullopt;
    out.push_back(std::move(*value));
  }
  return out;
}

// The part of the config that holds `Part`'s fields: the config itself or one of its sub-configs,
// so that a key names its field by a member pointer of its own struct (&RelayConfig::timeout_s).
template <typename Part, typename Config>
auto& PartOf(Config& config) {
  if constexpr (std::is_same_v<Part, RelayConfig>) {
    return config.relay;
  } else if constexpr (std::is_same_v<Part, ServerLimits>) {
    return config.server_limits;
  } else if constexpr (std::is_same_v<Part, ImagesConfig>) {
    return config.images;
  } else {
    static_assert(std::is_same_v<Part, DaemonConfig>);
    return config;
  }
}

// A uint64_t of the config or of one of its parts, named by its member pointer (for the checks).
class Field {
 public:
  Field() = default;
  template <typename Part>
  Field(uint64_t Part::*member)  // implicit: the checks' rules name fields as member pointers
      : get_([member](const DaemonConfig& config) { return PartOf<Part>(config).*member; }) {}
  explicit operator bool() const { return static_cast<bool>(get_); }
  uint64_t operator()(const DaemonConfig& config) const { return get_(config); }

 private:
  std::function<uint64_t(const DaemonConfig&)> get_;
};

// A string that passes `valid`, or nullopt.
std::optional<std::string> StringIf(const toml::node& node, const std::function<bool(const std::string&)>& valid) {
  const auto* s = node.as_string();
  if (s == nullptr || !valid(s->get())) return std::nullopt;
  return s->get();
}

template <typename Part>
Apply AbsolutePathKey(std::string Part::*field, bool empty_ok = false) {
  return [field, empty_ok](const toml::node& node, DaemonConfig& config) -> std::string {
    const auto* s = node.as_string();
    const std::string expected = empty_ok ? "expected an absolute path or \"\"" : "expected an absolute path";
    if (s == nullptr) return expected;
    const std::string& path = s->get();
    if (path.empty() ? !empty_ok : path[0] != '/') return expected;
    if (path.find('\0') != std::string::npos) return expected;
    PartOf<Part>(config).*field = path;
    return "";
  };
}

template <typename Part>
Apply SizeKey(uint64_t Part::*field) {
  return [field](const toml::node& node, DaemonConfig& config) -> std::string {
    const std::string expected = "expected a size like \"8G\"";
    if (node.is_integer()) {
      auto v = NonNegative(node);
      if (!v) return expected;
      PartOf<Part>(config).*field = *v;
      return "";
    }
    const auto* s = node.as_string();
    if (s == nullptr) return expected;
    auto parsed = ParseSize(s->get());
    if (!parsed.ok()) return expected;
    PartOf<Part>(config).*field = *parsed;
    return "";
  };
}

// An integer >= 0; `expected` says what kind ("expected a non-negative integer").
template <typename Part>
Apply NonNegativeKey(uint64_t Part::*field, const char* expected) {
  return [field, expected](const toml::node& node, DaemonConfig& config) -> std::string {
    auto v = NonNegative(node);
    if (!v) return expected;
    PartOf<Part>(config).*field = *v;
    return "";
  };
}

template <typename Part>
Apply CountKey(uint64_t Part::*field) { return NonNegativeKey(field, "expected a non-negative integer"); }

template <typename Part>
Apply SecondsKey(uint64_t Part::*field) {
  return NonNegativeKey(field, "expected a whole number of seconds like 30");
}

// "127.0.0.1:7878" or "[::1]:7878". Host names are not resolved: the daemon binds an address.
std::string ApplyListen(const toml::node& node, DaemonConfig& config) {
  const std::string expected = "expected \"ADDRESS:PORT\" like \"127.0.0.1:7878\" or \"[::1]:7878\"";
  const auto* s = node.as_string();
  if (s == nullptr) return expected;
  std::string_view text = s->get();
  std::string host;
  std::string_view port;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find("]:");
    if (close == std::string_view::npos) return expected;
    host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
    in6_addr addr6;
    if (inet_pton(AF_INET6, host.c_str(), &addr6) != 1) return expected;
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return expected;
    host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
    in_addr addr4;
    if (inet_pton(AF_INET, host.c_str(), &addr4) != 1) return expected;
  }
  auto port_value = ParseUint(port);
  // Port 0 picks a free port (the daemon logs the one it got): for tests and side-by-side runs.
  if (!port_value.ok() || *port_value > 65535) return expected;
  config.listen_address = host;
  config.listen_port = static_cast<uint16_t>(*port_value);
  return "";
}

// Browser origins as browsers send them: "scheme://host[:port]", no path, no trailing slash.
bool IsOrigin(std::string_view origin) {
  size_t scheme_end = origin.find("://");
  if (scheme_end == std::string_view::npos) return false;
  std::string_view scheme = origin.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") return false;
  std::string_view authority = origin.substr(scheme_end + 3);
  if (authority.empty()) return false;
  for (char c : authority) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == ':' ||
              c == '[' || c == ']';
    if (!ok) return false;  // upper case too: browsers send the host lower-cased
  }
  return true;
}

std::string ApplyOrigins(const toml::node& node, DaemonConfig& config) {
  auto origins = ArrayOf<std::string>(node, [](const toml::node& element) { return StringIf(element, IsOrigin); });
  if (!origins) return "expected an array of origins like [\"https://app.example.com\"]";
  config.server_limits.allowed_origins = std::move(*origins);
  return "";
}

Apply BoolKey(bool DaemonConfig::*field) {
  return [field](const toml::node& node, DaemonConfig& config) -> std::string {
    const auto* b = node.as_boolean();
    if (b == nullptr) return "expected true or false";
    config.*field = b->get();
    return "";
  };
}

// egress.domains = ["*.example.com"], egress.ports = [443], egress.cidrs = ["10.1.0.0/16"] (and
// the allowed_ ones): parsed as a rule set's one field, with the rule checks of the API.
Apply EgressListKey(EgressRules DaemonConfig::*rules, const char* field) {
  return [rules, field](const toml::node& node, DaemonConfig& config) -> std::string {
    const auto* array = node.as_array();
    const bool ports = std::string_view(field) == "ports";
    const std::string expected = ports ? "expected an array of ports like [443, 80]"
                                       : std::string_view(field) == "cidrs" ? "expected an array of ranges like [\"10.1.0.0/16\"]"
                                                                            : "expected an array of domains like [\"*.example.com\"]";
    if (array == nullptr) return expected;
    nlohmann::json list = nlohmann::json::array();
    for (const toml::node& element : *array) {
      if (ports) {
        const auto* integer = element.as_integer();
        if (integer == nullptr) return expected;
        list.push_back(integer->get());
      } else {
        const auto* s = element.as_string();
        if (s == nullptr) return expected;
        list.push_back(s->get());
      }
    }
    auto parsed = ParseEgressRules(nlohmann::json{{field, list}}, "", config.*rules);
    if (!parsed.ok()) {
      std::string message(parsed.status().message());
      return message.rfind(": ", 0) == 0 ? message.substr(2) : message;
    }
    config.*rules = *parsed;
    return "";
  };
}

Apply NetnsKey(std::string DaemonConfig::*field) {
  return [field](const toml::node& node, DaemonConfig& config) -> std::string {
    const auto* s = node.as_string();
    if (s == nullptr || (!s->get().empty() && s->get()[0] != '/')) {
      return "expected the path of a network namespace like \"/run/netns/uplink\", or \"\"";
    }
    config.*field = s->get();
    return "";
  };
}

// network.full_subnet = "10.231.0.0/16": IPv4, room for at least one /30.
std::string ApplyFullSubnet(const toml::node& node, DaemonConfig& config) {
  const std::string expected = "expected an IPv4 range from /8 to /30, like \"10.231.0.0/16\"";
  const auto* s = node.as_string();
  if (s == nullptr) return expected;
  auto cidr = Cidr::Parse(s->get());
  if (!cidr.ok() || !cidr->base.v4 || cidr->prefix < 8 || cidr->prefix > 30) return expected;
  config.network_full_subnet = *cidr;
  return "";
}

// network.dns = ["192.0.2.53"]: IPv4 addresses.
std::string ApplyNetworkDns(const toml::node& node, DaemonConfig& config) {
  auto servers = ArrayOf<IpAddress>(node, [](const toml::node& element) -> std::optional<IpAddress> {
    const auto* s = element.as_string();
    if (s == nullptr) return std::nullopt;
    auto address = IpAddress::Parse(s->get());
    if (!address || !address->v4) return std::nullopt;
    return address;
  });
  if (!servers) return "expected an array of IPv4 addresses like [\"192.0.2.53\"]";
  if (servers->size() > 3) return "at most 3 nameservers (the resolver reads no more)";
  config.network_dns = std::move(*servers);
  return "";
}

Apply ResolverKey() {
  return [](const toml::node& node, DaemonConfig& config) -> std::string {
    const std::string expected = "expected an IP address with an optional port, like \"127.0.0.53\" or \"[::1]:53\", or \"\"";
    const auto* s = node.as_string();
    if (s == nullptr) return expected;
    if (!s->get().empty() && !ParseResolverAddress(s->get())) return expected;
    config.egress_resolver = s->get();
    return "";
  };
}

// Absolute host paths without "." or ".." components and without a trailing '/' (except "/"):
// [execute] allowed_repo_paths, compared with the real path of what a request names.
bool IsRepoPath(const std::string& path) {
  if (path.empty() || path[0] != '/' || path.find('\0') != std::string::npos) return false;
  if (path.size() > 1 && path.back() == '/') return false;
  return path.find("/./") == std::string::npos && path.find("/../") == std::string::npos &&
         !path.ends_with("/.") && !path.ends_with("/..") && path.find("//") == std::string::npos;
}

std::string ApplyRepoPaths(const toml::node& node, DaemonConfig& config) {
  auto paths = ArrayOf<std::string>(node, [](const toml::node& element) { return StringIf(element, IsRepoPath); });
  if (!paths) return "expected an array of absolute paths like [\"/srv/repos/app\"]";
  config.execute_allowed_repo_paths = std::move(*paths);
  return "";
}

// [pool] sizes = { host = 8, "python:3.12" = 2 }: how many warm sandboxes of each image.
std::string ApplyPoolSizes(const toml::node& node, DaemonConfig& config) {
  const std::string expected = "expected a table of image names and counts, like { host = 8, \"python:3.12\" = 2 }";
  const auto* table = node.as_table();
  if (table == nullptr) return expected;
  std::map<std::string, uint64_t> sizes;
  for (const auto& [key, value] : *table) {
    const std::string image(key.str());
    const auto* count = value.as_integer();
    if (image.empty() || image.size() > 256) return expected;
    if (count == nullptr || count->get() < 0 || count->get() > 100000) {
      return image + ": expected a count of sandboxes, 0 to 100000";
    }
    if (count->get() > 0) sizes[image] = static_cast<uint64_t>(count->get());
  }
  config.pool_sizes = std::move(sizes);
  return "";
}

// A group name as useradd(8) accepts it, or "" (root only).
std::string ApplyAdminGroup(const toml::node& node, DaemonConfig& config) {
  const std::string expected = "expected a group name like \"corral\", or \"\" for root only";
  const auto* s = node.as_string();
  if (s == nullptr) return expected;
  const std::string& name = s->get();
  if (name.size() > 32) return expected;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || c == '_' ||
                    (i > 0 && ((c >= '0' && c <= '9') || c == '-' || (c == '$' && i + 1 == name.size())));
    if (!ok) return expected;
  }
  config.admin_group = name;
  return "";
}

std::string ApplyCgroupParent(const toml::node& node, DaemonConfig& config) {
  const std::string expected = "expected a relative cgroup path like \"corral\", or \"\" (the default)";
  const auto* s = node.as_string();
  if (s == nullptr) return expected;
  std::string_view path = s->get();
  if (path.empty()) {
    config.cgroup_parent.clear();
    return "";
  }
  if (path.front() == '/' || path.back() == '/') return expected;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == ".." || part.find('\0') != std::string_view::npos)
      return expected;
    start = end + 1;
  }
  config.cgroup_parent = std::string(path);
  return "";
}

std::string ApplyDiskQuota(const toml::node& node, DaemonConfig& config) {
  const auto* s = node.as_string();
  if (s == nullptr) return "expected \"auto\", \"project\" or \"image\"";
  if (s->get() == "auto") config.disk_quota = DiskQuotaMode::kAuto;
  else if (s->get() == "project") config.disk_quota = DiskQuotaMode::kProject;
  else if (s->get() == "image") config.disk_quota = DiskQuotaMode::kImage;
  else return "expected \"auto\", \"project\" or \"image\"";
  return "";
}

std::string ApplySynchronous(const toml::node& node, DaemonConfig& config) {
  const auto* s = node.as_string();
  if (s == nullptr || (s->get() != "normal" && s->get() != "full")) return "expected \"normal\" or \"full\"";
  config.store_synchronous_full = s->get() == "full";
  return "";
}

std::string ApplyNodeId(const toml::node& node, DaemonConfig& config) { return ParseNodeId(node, config.node_id); }
std::string ApplyNodeAddress(const toml::node& node, DaemonConfig& config) {
  return ParseNodeAddress(node, config.node_address);
}
std::string ApplyStoreBackend(const toml::node& node, DaemonConfig& config) {
  return ParseStoreBackend(node, config.store_postgresql);
}
std::string ApplyStoreUrl(const toml::node& node, DaemonConfig& config) { return ParseStoreUrl(node, config.store_url); }

template <typename Part>
Apply UrlKey(std::string Part::*field) {
  return [field](const toml::node& node, DaemonConfig& config) -> std::string {
    const auto* s = node.as_string();
    if (s == nullptr) return "expected a URL like \"https://api.anthropic.com\"";
    auto parsed = ParseUpstream(s->get());
    if (!parsed.ok()) {
      std::string message = parsed.status().message();
      const std::string prefix = "relay.upstream: ";  // the caller names the key
      return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
    }
    PartOf<Part>(config).*field = s->get();
    return "";
  };
}

// The table with [webhooks]' and [ports]' keys, which config_webhooks.h and config_ports.h parse.
std::vector<KeySpec> WithWebhooksKeys(std::vector<KeySpec> table) {
  for (std::string_view name : kWebhooksKeys) {
    table.push_back({"webhooks", name, [name](const toml::node& n, DaemonConfig& c) { return ParseWebhooksKey(name, n, c.webhooks); }});
  }
  for (std::string_view name : kPortsKeys) {
    table.push_back({"ports", name, [name](const toml::node& n, DaemonConfig& c) { return ParsePortsKey(name, n, c.ports); }});
  }
  return table;
}

const std::vector<KeySpec>& Keys() {
  static const std::vector<KeySpec> keys = WithWebhooksKeys({
      {"daemon", "state_dir", AbsolutePathKey(&DaemonConfig::state_dir)},
      {"daemon", "run_dir", AbsolutePathKey(&DaemonConfig::run_dir)},
      {"daemon", "admin_socket", AbsolutePathKey(&DaemonConfig::admin_socket)},
      {"daemon", "admin_group", ApplyAdminGroup},
      {"daemon", "cgroup_mount", AbsolutePathKey(&DaemonConfig::cgroup_mount)},
      {"daemon", "cgroup_parent", ApplyCgroupParent},
      {"daemon", "init_path", AbsolutePathKey(&DaemonConfig::init_path, /*empty_ok=*/true)},
      {"api", "listen", ApplyListen},
      {"api", "allowed_origins", ApplyOrigins},
      {"api", "web", BoolKey(&DaemonConfig::web)},
      {"api", "web_dir", AbsolutePathKey(&DaemonConfig::web_dir, /*empty_ok=*/true)},
      {"api", "max_message", SizeKey(&ServerLimits::max_ws_message_bytes)},
      {"api", "max_body", SizeKey(&ServerLimits::max_body_bytes)},
      {"api", "max_body_memory", SizeKey(&ServerLimits::max_body_memory)},
      {"api", "body_min_rate", SizeKey(&ServerLimits::body_min_rate)},
      {"api", "max_connections", CountKey(&ServerLimits::max_connections)},
      {"api", "max_connections_per_user", CountKey(&ServerLimits::max_ws_connections_per_user)},
      {"api", "handshake_timeout", SecondsKey(&ServerLimits::handshake_timeout_s)},
      {"api", "idle_timeout", SecondsKey(&ServerLimits::idle_timeout_s)},
      {"api", "requests_per_minute", CountKey(&DaemonConfig::requests_per_minute)},
      {"api", "ws_queue_hard_limit", SizeKey(&ServerLimits::ws_queue_hard_limit)},
      {"auth", "max_clock_skew", SecondsKey(&DaemonConfig::max_clock_skew_s)},
      {"auth", "max_token_lifetime", SecondsKey(&DaemonConfig::max_token_lifetime_s)},
      {"sandbox", "default_memory", SizeKey(&DaemonConfig::default_memory_bytes)},
      {"sandbox", "max_memory", SizeKey(&DaemonConfig::max_memory_bytes)},
      {"sandbox", "default_cpu_millicores", CountKey(&DaemonConfig::default_cpu_millicores)},
      {"sandbox", "max_cpu_millicores", CountKey(&DaemonConfig::max_cpu_millicores)},
      {"sandbox", "default_pids", CountKey(&DaemonConfig::default_pids)},
      {"sandbox", "max_pids", CountKey(&DaemonConfig::max_pids)},
      {"sandbox", "default_disk", SizeKey(&DaemonConfig::default_disk_bytes)},
      {"sandbox", "max_disk", SizeKey(&DaemonConfig::max_disk_bytes)},
      {"sandbox", "disk_quota", ApplyDiskQuota},
      {"sandbox", "default_idle_timeout", SecondsKey(&DaemonConfig::default_idle_timeout_s)},
      {"sandbox", "max_idle_timeout", SecondsKey(&DaemonConfig::max_idle_timeout_s)},
      {"sandbox", "max_sandboxes_per_user", CountKey(&DaemonConfig::max_sandboxes_per_user)},
      {"sandbox", "max_sandboxes", CountKey(&DaemonConfig::max_sandboxes)},
      {"sandbox", "max_snapshots_per_user", CountKey(&DaemonConfig::max_snapshots_per_user)},
      {"sandbox", "max_commands_per_sandbox", CountKey(&DaemonConfig::max_commands_per_sandbox)},
      {"sandbox", "max_sandboxes_per_issuer", CountKey(&DaemonConfig::max_sandboxes_per_issuer)},
      {"sandbox", "max_sessions_per_user", CountKey(&DaemonConfig::max_sessions_per_user)},
      {"sandbox", "max_sessions_per_issuer", CountKey(&DaemonConfig::max_sessions_per_issuer)},
      {"sandbox", "stop_grace", SecondsKey(&DaemonConfig::stop_grace_s)},
      {"pool", "sizes", ApplyPoolSizes},
      {"streams", "replay_buffer", SizeKey(&DaemonConfig::replay_buffer_bytes)},
      {"streams", "max_file", SizeKey(&DaemonConfig::max_file_bytes)},
      {"store", "synchronous", ApplySynchronous},
      {"store", "backend", ApplyStoreBackend},
      {"store", "url", ApplyStoreUrl},
      {"store", "url_file", AbsolutePathKey(&DaemonConfig::store_url_file)},
      {"node", "id", ApplyNodeId},
      {"node", "address", ApplyNodeAddress},
      {"node", "heartbeat", SecondsKey(&DaemonConfig::node_heartbeat_s)},
      {"node", "dead_after", SecondsKey(&DaemonConfig::node_dead_after_s)},
      {"node", "cluster_secret_file", AbsolutePathKey(&DaemonConfig::node_cluster_secret_file)},
      {"sessions", "tool_call_timeout", SecondsKey(&DaemonConfig::tool_call_timeout_s)},
      {"sessions", "agent_silence_timeout", SecondsKey(&DaemonConfig::agent_silence_timeout_s)},
      {"sessions", "file_scan_entries", CountKey(&DaemonConfig::file_scan_entries)},
      {"sessions", "file_scan_interval", SecondsKey(&DaemonConfig::file_scan_interval_s)},
      {"relay", "port", CountKey(&RelayConfig::port)},
      {"relay", "upstream", UrlKey(&RelayConfig::upstream)},
      {"relay", "api_key_file", AbsolutePathKey(&RelayConfig::api_key_file, /*empty_ok=*/true)},
      {"relay", "ca_file", AbsolutePathKey(&RelayConfig::ca_file, /*empty_ok=*/true)},
      {"relay", "max_request", SizeKey(&RelayConfig::max_request_bytes)},
      {"relay", "timeout", SecondsKey(&RelayConfig::timeout_s)},
      {"relay", "requests_per_minute", CountKey(&RelayConfig::requests_per_minute)},
      {"relay", "prices", [](const toml::node& n, DaemonConfig& c) { return ParsePrices(n, c.relay.prices); }},
      {"execute", "allowed_repo_paths", ApplyRepoPaths},
      {"execute", "timeout", SecondsKey(&DaemonConfig::execute_timeout_s)},
      {"execute", "max_diff", SizeKey(&DaemonConfig::execute_max_diff_bytes)},
      {"execute", "max_bundle", SizeKey(&DaemonConfig::execute_max_bundle_bytes)},
      {"egress", "enabled", BoolKey(&DaemonConfig::egress_enabled)},
      {"egress", "port", CountKey(&DaemonConfig::egress_port)},
      {"egress", "domains", EgressListKey(&DaemonConfig::egress_defaults, "domains")},
      {"egress", "ports", EgressListKey(&DaemonConfig::egress_defaults, "ports")},
      {"egress", "cidrs", EgressListKey(&DaemonConfig::egress_defaults, "cidrs")},
      {"egress", "allowed_domains", EgressListKey(&DaemonConfig::egress_allowed, "domains")},
      {"egress", "allowed_ports", EgressListKey(&DaemonConfig::egress_allowed, "ports")},
      {"egress", "allowed_cidrs", EgressListKey(&DaemonConfig::egress_allowed, "cidrs")},
      {"egress", "netns", NetnsKey(&DaemonConfig::egress_netns)},
      {"egress", "resolver", ResolverKey()},
      {"egress", "max_connections", CountKey(&DaemonConfig::egress_max_connections)},
      {"egress", "bandwidth", SizeKey(&DaemonConfig::egress_bandwidth)},
      {"egress", "connect_timeout", SecondsKey(&DaemonConfig::egress_connect_timeout_s)},
      {"egress", "idle_timeout", SecondsKey(&DaemonConfig::egress_idle_timeout_s)},
      {"secrets", "key_file", AbsolutePathKey(&DaemonConfig::secrets_key_file, /*empty_ok=*/true)},
      {"secrets", "ca_file", AbsolutePathKey(&DaemonConfig::secrets_ca_file, /*empty_ok=*/true)},
      {"network", "netns", NetnsKey(&DaemonConfig::network_netns)},
      {"network", "full_subnet", ApplyFullSubnet},
      {"network", "dns", ApplyNetworkDns},
      {"images", "max_size", SizeKey(&ImagesConfig::max_size)},
      {"images", "max_layers", CountKey(&ImagesConfig::max_layers)},
      {"images", "skopeo", [](const toml::node& n, DaemonConfig& c) { return ParseSkopeoPath(n, c.images.skopeo); }},
      {"images", "registry", [](const toml::node& n, DaemonConfig& c) { return ParseRegistries(n, c.images.registries); }},
  });
  return keys;
}

const KeySpec* FindKey(std::string_view section, std::string_view name) {
  for (const KeySpec& spec : Keys()) {
    if (spec.section == section && spec.name == name) return &spec;
  }
  return nullptr;
}

bool IsSection(std::string_view section) {
  for (const KeySpec& spec : Keys()) {
    if (spec.section == section) return true;
  }
  return false;
}

// Where each key was set, for the sanity checks' messages.
using Lines = std::map<std::string, uint32_t, std::less<>>;

class Checker {
 public:
  Checker(const std::string& origin, const Lines& lines) : origin_(origin), lines_(lines) {}

  // "origin:LINE: " of the first of `keys` that the file set, or "origin: " for defaults.
  std::string Where(std::initializer_list<std::string_view> keys) const {
    for (std::string_view key : keys) {
      auto it = lines_.find(key);
      if (it != lines_.end()) return origin_ + ":" + std::to_string(it->second) + ": ";
    }
    return origin_ + ": ";
  }

  // `key` must be positive; with a `max_key`, also at most that key's value.
  struct Rule {
    std::string_view key;
    Field field;
    std::string_view max_key = {};
    Field max = {};
  };
  // The first rule (in order) that `c` breaks, as an error.
  Status Check(const DaemonConfig& c, std::initializer_list<Rule> rules) const {
    for (const Rule& r : rules) {
      const uint64_t value = r.field(c);
      if (!r.max) {
        if (value == 0) return Status::Error(Where({r.key}) + std::string(r.key) + ": must be positive");
      } else if (value > r.max(c)) {
        return Status::Error(Where({r.key, r.max_key}) + std::string(r.key) + " (" + std::to_string(value) +
                             ") is above " + std::string(r.max_key) + " (" + std::to_string(r.max(c)) + ")");
      }
    }
    return Status();
  }

 private:
  const std::string& origin_;
  const Lines& lines_;
};

// [store]: PostgreSQL needs its connection string, given once; SQLite takes none. [node]: a node
// is called dead after at least two heartbeats it missed.
Status ValidateStore(const DaemonConfig& c, const Checker& check) {
  if (c.node_heartbeat_s == 0 || c.node_dead_after_s < 2 * c.node_heartbeat_s) {
    return Status::Error(check.Where({"node.heartbeat", "node.dead_after"}) +
                         "node.dead_after must be at least twice node.heartbeat (which must be positive)");
  }
  if (c.store_postgresql && c.store_url.empty() == c.store_url_file.empty()) {
    return Status::Error(check.Where({"store.backend", "store.url", "store.url_file"}) +
                         "store.backend = \"postgresql\" needs one of store.url and store.url_file (the connection "
                         "string, or a file holding it)");
  }
  if (!c.store_postgresql && (!c.store_url.empty() || !c.store_url_file.empty())) {
    return Status::Error(check.Where({"store.url", "store.url_file"}) +
                         "store.url and store.url_file are for store.backend = \"postgresql\"");
  }
  return Status();
}

Status Validate(const DaemonConfig& c, const std::string& origin, const Lines& lines) {
  Checker check(origin, lines);
  RETURN_IF_ERROR(check.Check(c, {
      {"api.max_message", &ServerLimits::max_ws_message_bytes},
      {"api.max_body", &ServerLimits::max_body_bytes},
      {"api.max_body_memory", &ServerLimits::max_body_memory},
      // One upload of the largest size must fit in the bodies' budget, or it could never succeed.
      {"api.max_body", &ServerLimits::max_body_bytes, "api.max_body_memory", &ServerLimits::max_body_memory},
      {"streams.max_file", &DaemonConfig::max_file_bytes, "api.max_body_memory", &ServerLimits::max_body_memory},
      {"api.max_connections", &ServerLimits::max_connections},
      {"api.max_connections_per_user", &ServerLimits::max_ws_connections_per_user},
      {"api.handshake_timeout", &ServerLimits::handshake_timeout_s},
      {"api.idle_timeout", &ServerLimits::idle_timeout_s},
  }));
  if (c.server_limits.ws_queue_hard_limit <= kWsQueueHighWater) {
    return Status::Error(check.Where({"api.ws_queue_hard_limit"}) +
                         "api.ws_queue_hard_limit: must be above 1M (where a connection's queue is full and the "
                         "daemon stops reading the output it carries)");
  }
  RETURN_IF_ERROR(check.Check(c, {
      {"auth.max_token_lifetime", &DaemonConfig::max_token_lifetime_s},
      {"sandbox.default_memory", &DaemonConfig::default_memory_bytes},
      {"sandbox.default_cpu_millicores", &DaemonConfig::default_cpu_millicores},
      {"sandbox.default_pids", &DaemonConfig::default_pids},
      {"sandbox.default_disk", &DaemonConfig::default_disk_bytes},
      {"sandbox.default_idle_timeout", &DaemonConfig::default_idle_timeout_s},
      {"sandbox.max_sandboxes_per_user", &DaemonConfig::max_sandboxes_per_user},
      {"sandbox.max_commands_per_sandbox", &DaemonConfig::max_commands_per_sandbox},
      {"streams.replay_buffer", &DaemonConfig::replay_buffer_bytes},
      {"streams.max_file", &DaemonConfig::max_file_bytes},
      {"api.max_connections_per_user", &ServerLimits::max_ws_connections_per_user,
       "api.max_connections", &ServerLimits::max_connections},
      {"sandbox.default_memory", &DaemonConfig::default_memory_bytes,
       "sandbox.max_memory", &DaemonConfig::max_memory_bytes},
      {"sandbox.default_cpu_millicores", &DaemonConfig::default_cpu_millicores,
       "sandbox.max_cpu_millicores", &DaemonConfig::max_cpu_millicores},
      {"sandbox.default_pids", &DaemonConfig::default_pids, "sandbox.max_pids", &DaemonConfig::max_pids},
      {"sandbox.default_disk", &DaemonConfig::default_disk_bytes, "sandbox.max_disk", &DaemonConfig::max_disk_bytes},
      {"sandbox.default_idle_timeout", &DaemonConfig::default_idle_timeout_s,
       "sandbox.max_idle_timeout", &DaemonConfig::max_idle_timeout_s},
      {"sandbox.max_sandboxes_per_user", &DaemonConfig::max_sandboxes_per_user,
       "sandbox.max_sandboxes", &DaemonConfig::max_sandboxes},
  }));

  uint64_t pooled = 0;
  for (const auto& [image, count] : c.pool_sizes) pooled += count;
  if (pooled > c.max_sandboxes) {
    return Status::Error(check.Where({"pool.sizes", "sandbox.max_sandboxes"}) + "pool.sizes: " +
                         std::to_string(pooled) + " warm sandboxes are more than sandbox.max_sandboxes (" +
                         std::to_string(c.max_sandboxes) + ")");
  }

  if (c.relay.port == 0 || c.relay.port > 65535) {
    return Status::Error(check.Where({"relay.port"}) + "relay.port: expected a port, 1 to 65535");
  }
  if (c.egress_port == 0 || c.egress_port > 65535) {
    return Status::Error(check.Where({"egress.port"}) + "egress.port: expected a port, 1 to 65535");
  }
  if (c.egress_port == c.relay.port || c.egress_port == kToolBridgePort) {
    return Status::Error(check.Where({"egress.port"}) + "egress.port: taken by the model relay (relay.port) or the tool bridge (" +
                         std::to_string(kToolBridgePort) + ")");
  }
  RETURN_IF_ERROR(check.Check(c, {
      {"egress.max_connections", &DaemonConfig::egress_max_connections},
      {"egress.connect_timeout", &DaemonConfig::egress_connect_timeout_s},
      {"egress.idle_timeout", &DaemonConfig::egress_idle_timeout_s},
  }));
  if (Status within = CheckWithinCaps(c.egress_defaults, c.egress_allowed, "egress.allowed_*"); !within.ok()) {
    return Status::Error(check.Where({"egress.domains", "egress.ports", "egress.cidrs"}) +
                         "egress.domains/ports/cidrs: a default rule outside the allowed ones: " +
                         std::string(within.message()));
  }
  RETURN_IF_ERROR(check.Check(c, {
      {"relay.max_request", &RelayConfig::max_request_bytes},
      {"relay.timeout", &RelayConfig::timeout_s},
      {"execute.timeout", &DaemonConfig::execute_timeout_s},
      {"execute.max_diff", &DaemonConfig::execute_max_diff_bytes},
      {"execute.max_bundle", &DaemonConfig::execute_max_bundle_bytes},
      {"sessions.tool_call_timeout", &DaemonConfig::tool_call_timeout_s},
      {"sessions.agent_silence_timeout", &DaemonConfig::agent_silence_timeout_s},
      {"sessions.file_scan_entries", &DaemonConfig::file_scan_entries},
  }));

  RETURN_IF_ERROR(check.Check(c, {{"images.max_size", &ImagesConfig::max_size},
                                  {"images.max_layers", &ImagesConfig::max_layers}}));
  if (c.images.max_layers > rootfs::kMaxImageLayers) {
    return Status::Error(check.Where({"images.max_layers"}) + "images.max_layers: at most " +
                         std::to_string(rootfs::kMaxImageLayers) + " (an overlay's lower layers)");
  }
  RETURN_IF_ERROR(ValidateStore(c, check));
  RETURN_IF_ERROR(ValidateWebhooks(c.webhooks, [&check](std::string_view key) { return check.Where({key}); }));
  // sockaddr_un.sun_path holds 107 characters and the terminating NUL.
  if (c.admin_socket.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return Status::Error(check.Where({"daemon.admin_socket"}) + "daemon.admin_socket: longer than " +
                         std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) + " characters");
  }
  return Status();
}

std::string Line(const toml::source_region& where) { return std::to_string(where.begin.line); }

StatusOr<DaemonConfig> Parse(const std::string& text, const std::string& origin) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    return Status::Error(origin + ":" + Line(e.source()) + ": " + std::string(e.description()));
  }

  DaemonConfig config;
  Lines lines;
  for (const auto& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    const std::string where = origin + ":" + Line(section_key.source()) + ": " + section;
    if (!IsSection(section)) {
      return Status::Error(where + (section_node.is_table() ? ": unknown section" : ": unknown key"));
    }
    const toml::table* table = section_node.as_table();
    if (table == nullptr) return Status::Error(where + ": expected a table ([" + section + "])");
    for (const auto& [key, node] : *table) {
      const std::string name = section + "." + std::string(key.str());
      const std::string key_where = origin + ":" + Line(key.source()) + ": " + name;
      const KeySpec* spec = FindKey(section, key.str());
      if (spec == nullptr) return Status::Error(key_where + ": unknown key");
      std::string error = spec->apply(node, config);
      if (!error.empty()) return Status::Error(key_where + ": " + error);
      lines[name] = key.source().begin.line;
    }
  }
  RETURN_IF_ERROR(Validate(config, origin, lines));
  return config;
}

}  // namespace

StatusOr<DaemonConfig> ParseConfig(const std::string& text, const std::string& origin) {
  // Nothing may escape into the daemon's start-up: allocation failures become errors too.
  try {
    return Parse(text, origin);
  } catch (const std::exception& e) {
    return Status::Error(origin + ": " + e.what());
  }
}

StatusOr<DaemonConfig> LoadConfig(const std::string& path, bool missing_ok) {
  auto text = ReadFileToString(path);
  if (!text.ok()) {
    if (missing_ok && text.status().error_number() == ENOENT) return DaemonConfig{};
    return text.status();
  }
  return ParseConfig(*text, path);
}

}  // namespace corral::supervisor
