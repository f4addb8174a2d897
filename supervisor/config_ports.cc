#include "supervisor/config_ports.h"

namespace corral::supervisor {

namespace {

std::string Positive(const toml::node& node, uint64_t& out) {
  const auto* integer = node.as_integer();
  if (integer == nullptr || integer->get() <= 0) return "expected a positive integer";
  out = static_cast<uint64_t>(integer->get());
  return "";
}

bool IsDomain(std::string_view name) {
  if (name.empty() || name.size() > 200 || name.front() == '.' || name.back() == '.' || name.front() == '-') return false;
  char previous = 0;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
    if (!ok || (c == '.' && previous == '.')) return false;
    previous = c;
  }
  return true;
}

}  // namespace

std::string ParsePortsKey(std::string_view key, const toml::node& node, PortsConfig& config) {
  if (key == "domain") {
    const auto* s = node.as_string();
    if (s == nullptr || (!s->get().empty() && !IsDomain(s->get()))) {
      return "expected a DNS name in lower case (preview.example.com), or \"\"";
    }
    config.domain = s->get();
    return "";
  }
  if (key == "max_connections_per_port") return Positive(node, config.max_connections_per_port);
  if (key == "max_ttl") return Positive(node, config.max_ttl_s);
  if (key == "idle_timeout") return Positive(node, config.idle_timeout_s);
  return "unknown key";
}

}  // namespace corral::supervisor
