// The model relay's settings ([relay] in corrald.toml, supervisor/relay/model_relay.h): the config
// holds one, and the relay takes it as it is once the daemon has read the operator's key.
#pragma once

#include <cstdint>
#include <string>

#include "supervisor/relay/budget.h"
#include "supervisor/loopback_ports.h"

namespace corral::supervisor {

struct RelayConfig {
  // On each sandbox's 127.0.0.1 (ANTHROPIC_BASE_URL=http://127.0.0.1:<port> inside); the config
  // checks that it is 1 to 65535.
  uint64_t port = kModelRelayPort;
  // https://host[:port] (any host) or http://host[:port] (loopback hosts only).
  std::string upstream = "https://api.anthropic.com";
  std::string api_key_file;  // the operator's key (root's alone); "" = no model calls
  std::string api_key;   // that file's key, sent upstream as x-api-key; "" refuses every call
  std::string ca_file;   // extra trusted CA certificates (PEM) for the upstream; "" = the system's
  PriceTable prices;     // [relay.prices."MODEL"] input/output/cache_write/cache_read
  uint64_t max_request_bytes = 32ull << 20;
  uint64_t timeout_s = 600;  // for each read or write on either side
  // The longest a model call lasts, from its admission to its answer's last byte, however slowly
  // either side reads: past it the call is cut short (what was used is paid for). Not in
  // corrald.toml: budget holds lapse after it (model_relay.h), so every node must agree on it.
  // An hour: six times relay.timeout's default; a call that streams for longer is rare enough to
  // be cut (the agent sees an answer cut short, and retries). Tests shorten it.
  uint64_t max_call_s = 3600;
  uint64_t requests_per_minute = 0;  // model calls per user (over all their sessions); 0 = no limit
};

}  // namespace corral::supervisor
