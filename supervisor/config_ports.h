// [ports] of corrald.toml (supervisor/config.cc hands each key here): preview URLs for the ports
// a sandbox shows (api/port_proxy.h). ParsePortsKey returns "" or what was expected, which the
// caller prefixes with the file, the line and the key. All of them apply at the next start.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "common/status.h"

namespace corral::supervisor {

struct PortsConfig {
  // Host routing: requests whose Host is PORT-SANDBOX.<domain> go to that port ("" = off; the
  // path form /v1/sandboxes/{id}/ports/{port}/ works either way).
  std::string domain;
  uint64_t max_connections_per_port = 64;  // open connections to one port at once
  uint64_t max_ttl_s = 86400;              // the longest a signed URL may live
  uint64_t idle_timeout_s = 300;           // a connection with no byte either way for this long ends
};

// The keys of [ports].
inline constexpr std::string_view kPortsKeys[] = {"domain", "max_connections_per_port", "max_ttl", "idle_timeout"};

// domain: a DNS name (lower-case letters, digits, '-' and '.'), or ""; the rest positive integers
// (max_ttl and idle_timeout in seconds).
std::string ParsePortsKey(std::string_view key, const toml::node& node, PortsConfig& config);

}  // namespace corral::supervisor
