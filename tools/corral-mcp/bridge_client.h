// BridgeClient: corral-mcp's connection to the daemon's tool bridge on the sandbox's loopback.
//
// The protocol is documented in supervisor/sessions/tool_bridge.h: a hello with the session's key, whose
// answer lists the session's tools, then calls and their answers, one JSON object per line.
// Open() is blocking (bounded by a timeout); afterwards the socket is non-blocking and driven by
// corral-mcp's poll loop through Flush() and Receive().
#pragma once

#include <netinet/in.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "common/unique_fd.h"
#include "tools/corral-mcp/line_reader.h"

namespace corral::mcp {

// Either direction; the bridge's limit (kToolBridgeMaxLine).
inline constexpr size_t kMaxLine = 8u << 20;

// "127.0.0.1:7881" (an IPv4 address and a port; no names: nothing resolves inside a sandbox).
StatusOr<sockaddr_in> ParseBridgeAddress(std::string_view text);

class BridgeClient {
 public:
  BridgeClient(sockaddr_in address, std::string key);

  // Connects and says hello, waiting at most `timeout_ms` in all. On success tools() holds the
  // session's tools; on failure the connection is closed and the error says why ("the bridge
  // refused the key: unknown key", "connect 127.0.0.1:7881: ECONNREFUSED").
  Status Open(int timeout_ms);
  void Close();

  bool connected() const { return fd_.valid(); }
  int fd() const { return fd_.get(); }
  const nlohmann::json& tools() const { return tools_; }
  // Bytes are waiting to be sent: poll for POLLOUT.
  bool wants_write() const { return !output_.empty(); }

  // Queues one message; Flush() sends it.
  void Send(const nlohmann::json& message);
  // Sends what the socket takes now. An error means the connection is lost (and closed).
  Status Flush();
  // Reads what has arrived; complete messages are appended to `messages`. An error means the
  // connection is lost (and closed); messages read before it are still appended.
  Status Receive(std::vector<nlohmann::json>* messages);

 private:
  std::string Where() const;

  const sockaddr_in address_;
  const std::string key_;
  UniqueFd fd_;
  LineReader input_{kMaxLine};
  std::string output_;
  nlohmann::json tools_ = nlohmann::json::array();
};

}  // namespace corral::mcp
