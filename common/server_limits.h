// The API server's limits ([api] in corrald.toml; api/server.h enforces them): the daemon's config
// holds one and the server takes it as it is. Sizes in bytes, times in seconds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace corral {

// A WebSocket connection whose write queue holds more than this is full: the daemon stops
// reading the output it carries until it drains (ServerLimits::ws_queue_high_water).
inline constexpr uint64_t kWsQueueHighWater = 1 << 20;

struct ServerLimits {
  uint64_t max_header_bytes = 16 * 1024;
  uint64_t max_body_bytes = 64ull << 20;  // api.max_body; a route may allow more (RouteOptions)
  // api.max_body_memory: what the request bodies being read at once may hold in all (503 with
  // Retry-After above it).
  uint64_t max_body_memory = 256ull << 20;
  // api.body_min_rate: a body (and a response) must move at least this many bytes a second, after
  // a grace of the handshake timeout (408 otherwise). 0: no minimum.
  uint64_t body_min_rate = 16 << 10;
  uint64_t max_ws_message_bytes = 1 << 20;     // api.max_message
  uint64_t max_connections = 4096;             // TCP + unix, in total
  uint64_t max_ws_connections_per_user = 64;   // api.max_connections_per_user
  // A new connection's first request, every later request's headers (from its first byte), a
  // body's silence, and a WebSocket's opening or closing handshake.
  uint64_t handshake_timeout_s = 10;
  // A keep-alive connection between requests; a WebSocket without traffic (pings keep it up).
  uint64_t idle_timeout_s = 300;
  // A WebSocket connection's write queue: above high water it is "full" (see WsConnection);
  // above hard_limit the client is too slow and the connection is closed (1008 "too slow").
  uint64_t ws_queue_high_water = kWsQueueHighWater;
  uint64_t ws_queue_hard_limit = 64ull << 20;
  std::vector<std::string> allowed_origins;  // exact "scheme://host[:port]"; empty: no browser
};

}  // namespace corral
