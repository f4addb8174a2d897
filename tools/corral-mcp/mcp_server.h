// McpServer: the Model Context Protocol side of corral-mcp (JSON-RPC 2.0, one message a line).
//
// Serves `initialize`, `ping`, `tools/list` (the tools the bridge's hello listed) and
// `tools/call` (forwarded to the bridge; its answer becomes the CallToolResult), and takes the
// notifications `notifications/initialized` and `notifications/cancelled`. Other methods get
// -32601, lines that are not JSON -32700, lines longer than kMaxLine -32700, other malformed
// messages -32600; notifications never get an answer.
//
// A tool call that cannot reach the bridge is answered with a result whose isError is true and
// whose text says why: the agent reads it, where a JSON-RPC error would only reach the CLI.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tools/corral-mcp/bridge_client.h"

namespace corral::mcp {

inline constexpr char kLatestProtocolVersion[] = "2025-06-18";
// How long (re)opening the bridge may take, the hello included.
inline constexpr int kBridgeOpenTimeoutMs = 5000;

class McpServer {
 public:
  // `write` sends one message to the MCP client (a line on stdout).
  using Writer = std::function<void(const nlohmann::json& message)>;

  McpServer(BridgeClient& bridge, Writer write, std::string version);

  // One line from the client.
  void OnLine(std::string_view line);
  // A line longer than kMaxLine (dropped unread).
  void OnOverlongLine();
  // One message from the bridge.
  void OnBridgeMessage(const nlohmann::json& message);
  // The bridge connection is gone: every call still waiting is answered with isError.
  void OnBridgeLost(const std::string& why);

  size_t outstanding() const { return pending_.size(); }

 private:
  void OnRequest(const nlohmann::json& id, const std::string& method, const nlohmann::json& params);
  void OnNotification(const std::string& method, const nlohmann::json& params);
  void Initialize(const nlohmann::json& id, const nlohmann::json& params);
  void ListTools(const nlohmann::json& id);
  void CallTool(const nlohmann::json& id, const nlohmann::json& params);
  // Opens the bridge if it is not open: one attempt. "" or why it failed.
  std::string EnsureBridge();

  void Result(const nlohmann::json& id, nlohmann::json result);
  void Error(const nlohmann::json& id, int code, const std::string& message);
  void ToolError(const nlohmann::json& id, const std::string& text);

  BridgeClient& bridge_;
  Writer write_;
  const std::string version_;
  int64_t next_call_ = 1;
  std::map<int64_t, nlohmann::json> pending_;  // bridge call id -> the client's request id
};

}  // namespace corral::mcp
