// The tool bridge: client-declared tools as an agent inside a sandbox calls them.
//
// The client that creates a session declares tools (name, description, JSON schema). Claude Code
// in the sandbox gets `corral-mcp` (tools/corral-mcp) as an MCP server on stdio; corral-mcp
// turns each MCP tools/call into a call over TCP to this bridge, which listens on the sandbox's
// own 127.0.0.1 (LoopbackServices, like the model relay) and hands the call to the session
// (ToolAuthority), whose answer goes back the same way.
//
// Wire protocol (one TCP connection per corral-mcp; UTF-8 JSON objects, one per line, each
// ending in "\n"; a line is at most kToolBridgeMaxLine bytes, the newline excluded):
//
//   1. corral-mcp -> bridge, first line:
//        {"op":"hello","key":"<CORRAL_TOOL_KEY>"}
//      bridge -> corral-mcp:
//        {"ok":true,"tools":[{"name":"...","description":"...","inputSchema":{...}}, ...]}
//      or, when the key belongs to no session of this sandbox:
//        {"ok":false,"error":"unknown key"}
//      ({"ok":false,"error":"expected a hello"} when the first line is something else) and the
//      bridge closes the connection: one key per connection. The hello must come within
//      kToolBridgeHelloTimeoutSeconds, or the connection is closed.
//
//   2. corral-mcp -> bridge, any number of times, without waiting for answers:
//        {"op":"call","id":N,"name":"<tool>","arguments":{...}}
//      N is corral-mcp's own id (a number or a string), unique among its outstanding calls;
//      "arguments" may be left out ({}). bridge -> corral-mcp, exactly once per call, in any
//      order:
//        {"id":N,"content":[{"type":"text","text":"..."}, ...],"isError":false|true}
//      `content` is MCP content (CallToolResult.content) as the session answered it. The bridge
//      itself answers with isError true (and a text saying why) a call for a tool the session
//      did not declare, a call beyond kMaxOutstandingToolCalls, a malformed call that has an id,
//      and an answer from the session that is malformed or longer than kToolBridgeMaxLine.
//
//   3. Anything else after the hello (a line that is not JSON, an object without a known "op",
//      a call without a usable id) gets {"ok":false,"error":"..."} and the connection stays up,
//      except a line longer than kToolBridgeMaxLine, which closes it.
//
// Bounds: a sandbox has at most kMaxToolConnectionsPerSandbox connections (more are closed as
// they are accepted); a connection whose unread answers reach 8 MiB is no longer read from, and
// one whose unread answers reach 64 MiB is closed. The tools a connection may call are those the
// hello listed.
//
// A connection belongs to the sandbox whose listener accepted it: a key of another sandbox's
// session is refused. Calls that are outstanding when a connection closes are not cancelled at
// the session; their answers, when they come, are dropped. corral-mcp reconnects (with a new
// hello) when it next needs the bridge; calls that were outstanding on the lost connection are
// answered by corral-mcp itself with isError true (they may or may not have run).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "common/unique_fd.h"
#include "supervisor/loopback_ports.h"
#include "supervisor/loopback_services.h"

namespace corral::supervisor {

inline constexpr size_t kToolBridgeMaxLine = 8u << 20;       // 8 MiB, either direction
inline constexpr size_t kMaxOutstandingToolCalls = 64;       // per connection
inline constexpr size_t kMaxToolConnectionsPerSandbox = 32;  // each is a file descriptor of the daemon
inline constexpr int kToolBridgeHelloTimeoutSeconds = 10;

// A new session key for corral-mcp (CORRAL_TOOL_KEY): "ctk-" and 43 characters of base64url
// (32 random bytes).
std::string NewToolKey();
// What an authority keeps instead of the key (SHA-256, raw bytes): a map keyed by digests holds
// nothing a sandbox could replay, and a lookup leaks no timing about the key's characters.
std::string ToolKeyDigest(std::string_view key);

// The session a key belongs to.
struct ToolSessionInfo {
  std::string session_id;
  nlohmann::json tools = nlohmann::json::array();  // [{name, description, inputSchema}, ...]
};

// What the bridge asks of the sessions (SessionRunner), and hands them. Called on the io_context.
class ToolAuthority {
 public:
  virtual ~ToolAuthority() = default;
  // The session that `key` belongs to, if it is a session of `sandbox_id`, with its declared tools
  // (the bridge keeps this list for the connection: corral-mcp's tools/list, and the names a call
  // may use).
  virtual std::optional<ToolSessionInfo> FindToolKey(std::string_view sandbox_id, std::string_view key) = 0;
  // A call from the agent. `call_id` is the bridge's own ("tc_..."), unique for the daemon's
  // lifetime and beyond. `reply` takes the result {"content":[...],"isError":bool} and must be
  // called at most once, on the io_context (it may be called before OnToolCall returns). When
  // every copy of `reply` is destroyed without a call, the agent gets isError "the tool call was
  // abandoned". Replies after the agent's connection closed are dropped.
  virtual void OnToolCall(const std::string& session_id, const std::string& call_id, const std::string& name,
                          nlohmann::json arguments, std::function<void(nlohmann::json result)> reply) = 0;
};

class ToolBridge : public LoopbackServices {
 public:
  // `port` is where corral-mcp finds the bridge on each sandbox's 127.0.0.1 (CORRAL_TOOL_BRIDGE).
  ToolBridge(boost::asio::io_context& io, ToolAuthority& authority, uint16_t port = kToolBridgePort);
  ~ToolBridge() override;
  ToolBridge(const ToolBridge&) = delete;
  ToolBridge& operator=(const ToolBridge&) = delete;

  std::vector<uint16_t> Ports() const override { return {port_}; }
  // Accepts on listeners[0] for `sandbox_id` (any further listeners are closed).
  void Serve(const std::string& sandbox_id, std::vector<UniqueFd> listeners) override;
  // Closes the sandbox's listener and connections.
  void Forget(const std::string& sandbox_id) override;
  // Closes the connections that said hello as this session (it ended, its key is revoked).
  void DropSession(const std::string& session_id);

  // For metrics and tests.
  size_t open_connections() const;
  uint64_t calls() const;

  struct Impl;

 private:
  uint16_t port_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace corral::supervisor
