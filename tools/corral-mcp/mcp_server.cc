#include "tools/corral-mcp/mcp_server.h"

#include <cstdio>
#include <utility>

namespace corral::mcp {

using nlohmann::json;

namespace {

// JSON-RPC 2.0 error codes.
constexpr int kParseError = -32700;
constexpr int kInvalidRequest = -32600;
constexpr int kMethodNotFound = -32601;
constexpr int kInvalidParams = -32602;
constexpr int kInternalError = -32603;

constexpr const char* kKnownProtocolVersions[] = {"2024-11-05", "2025-03-26", "2025-06-18"};

void LogLine(const std::string& text) { fprintf(stderr, "corral-mcp: %s\n", text.c_str()); }

// A tool as MCP lists it: the daemon's entry, with an object schema even when none was given
// (clients refuse a tool without one).
json ListedTool(const json& tool) {
  json out = tool;
  if (!out.contains("inputSchema") || !out["inputSchema"].is_object()) out["inputSchema"] = {{"type", "object"}};
  return out;
}

}  // namespace

McpServer::McpServer(BridgeClient& bridge, Writer write, std::string version)
    : bridge_(bridge), write_(std::move(write)), version_(std::move(version)) {}

void McpServer::OnLine(std::string_view line) {
  if (line.find_first_not_of(" \t") == std::string_view::npos) return;
  json message = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (message.is_discarded()) {
    Error(nullptr, kParseError, "Parse error: the line is not JSON");
    return;
  }
  if (message.is_array()) {  // batches were dropped from MCP in 2025-06-18
    Error(nullptr, kInvalidRequest, "Invalid Request: batches are not supported");
    return;
  }
  if (!message.is_object()) {
    Error(nullptr, kInvalidRequest, "Invalid Request: expected a JSON object");
    return;
  }
  const bool has_id = message.contains("id");
  const json id = has_id ? message["id"] : json();
  if (has_id && !id.is_string() && !id.is_number_integer()) {
    Error(nullptr, kInvalidRequest, "Invalid Request: the id must be a string or an integer");
    return;
  }
  if (!message.contains("method")) {
    // A response (we send no requests) or nonsense; only the latter, with an id, is answered.
    if (has_id && !message.contains("result") && !message.contains("error")) {
      Error(id, kInvalidRequest, "Invalid Request: no method");
    }
    return;
  }
  if (message.value("jsonrpc", json()) != "2.0" || !message["method"].is_string()) {
    if (has_id) Error(id, kInvalidRequest, "Invalid Request: expected jsonrpc \"2.0\" and a method name");
    return;
  }
  const std::string method = message["method"];
  const json params = message.contains("params") ? message["params"] : json::object();
  if (has_id) {
    OnRequest(id, method, params);
  } else {
    OnNotification(method, params);
  }
}

void McpServer::OnOverlongLine() {
  Error(nullptr, kParseError, "Parse error: the message is longer than " + std::to_string(kMaxLine >> 20) + " MiB");
}

void McpServer::OnRequest(const json& id, const std::string& method, const json& params) {
  if (method == "initialize") {
    Initialize(id, params);
  } else if (method == "ping") {
    Result(id, json::object());
  } else if (method == "tools/list") {
    ListTools(id);
  } else if (method == "tools/call") {
    CallTool(id, params);
  } else {
    Error(id, kMethodNotFound, "Method not found: " + method);
  }
}

void McpServer::OnNotification(const std::string& method, const json& params) {
  if (method != "notifications/cancelled" || !params.is_object() || !params.contains("requestId")) return;
  // The client gave up on a call: its answer, when it comes, is dropped (the tool still runs).
  const json& request = params["requestId"];
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (it->second == request) {
      pending_.erase(it);
      return;
    }
  }
}

void McpServer::Initialize(const json& id, const json& params) {
  std::string version = kLatestProtocolVersion;
  if (params.is_object() && params.contains("protocolVersion") && params["protocolVersion"].is_string()) {
    const std::string& asked = params["protocolVersion"].get_ref<const std::string&>();
    for (const char* known : kKnownProtocolVersions) {
      if (asked == known) version = asked;
    }
  }
  Result(id, {{"protocolVersion", version},
              {"capabilities", {{"tools", json::object()}}},
              {"serverInfo", {{"name", "corral"}, {"version", version_}}}});
}

void McpServer::ListTools(const json& id) {
  const std::string failed = EnsureBridge();
  if (!failed.empty()) {
    Error(id, kInternalError, "corral: the tool bridge is unavailable: " + failed);
    return;
  }
  json tools = json::array();
  for (const json& tool : bridge_.tools()) {
    if (tool.is_object() && tool.contains("name") && tool["name"].is_string()) tools.push_back(ListedTool(tool));
  }
  Result(id, {{"tools", std::move(tools)}});
}

void McpServer::CallTool(const json& id, const json& params) {
  if (!params.is_object() || !params.contains("name") || !params["name"].is_string()) {
    Error(id, kInvalidParams, "Invalid params: tools/call needs a tool name");
    return;
  }
  json arguments = params.contains("arguments") ? params["arguments"] : json::object();
  if (arguments.is_null()) arguments = json::object();
  if (!arguments.is_object()) {
    Error(id, kInvalidParams, "Invalid params: the arguments must be an object");
    return;
  }
  const std::string failed = EnsureBridge();
  if (!failed.empty()) {
    ToolError(id, "corral: the tool bridge is unavailable: " + failed);
    return;
  }
  const int64_t call = next_call_++;
  const json request = {{"op", "call"}, {"id", call}, {"name", params["name"]}, {"arguments", arguments}};
  if (request.dump(-1, ' ', false, json::error_handler_t::replace).size() > kMaxLine) {
    ToolError(id, "corral: the arguments are longer than " + std::to_string(kMaxLine >> 20) + " MiB");
    return;
  }
  pending_[call] = id;
  bridge_.Send(request);
  Status sent = bridge_.Flush();
  if (!sent.ok()) OnBridgeLost(sent.ToString());
}

std::string McpServer::EnsureBridge() {
  if (bridge_.connected()) return "";
  Status opened = bridge_.Open(kBridgeOpenTimeoutMs);
  if (opened.ok()) {
    LogLine("connected to the tool bridge again");
    return "";
  }
  LogLine(opened.ToString());
  return opened.ToString();
}

void McpServer::OnBridgeMessage(const json& message) {
  if (!message.is_object()) return;
  if (!message.contains("id")) {  // {"ok":false,"error":...}: something we sent was refused
    LogLine("the tool bridge says: " + message.dump());
    return;
  }
  const json& id = message["id"];
  if (!id.is_number_integer()) return;
  auto it = pending_.find(id.get<int64_t>());
  if (it == pending_.end()) return;  // cancelled by the client
  const json request = std::move(it->second);
  pending_.erase(it);
  if (!message.contains("content") || !message["content"].is_array()) {
    ToolError(request, "corral: the tool bridge's answer was malformed");
    return;
  }
  const bool is_error =
      message.contains("isError") && message["isError"].is_boolean() && message["isError"].get<bool>();
  Result(request, {{"content", message["content"]}, {"isError", is_error}});
}

void McpServer::OnBridgeLost(const std::string& why) {
  LogLine("lost the tool bridge: " + why);
  std::map<int64_t, json> lost;
  lost.swap(pending_);
  for (const auto& [call, request] : lost) {
    ToolError(request, "corral: the connection to the tool bridge was lost before the tool answered (" + why +
                           "); the tool may or may not have run");
  }
}

void McpServer::Result(const json& id, json result) {
  write_({{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}});
}

void McpServer::Error(const json& id, int code, const std::string& message) {
  write_({{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}});
}

void McpServer::ToolError(const json& id, const std::string& text) {
  Result(id, {{"content", json::array({{{"type", "text"}, {"text", text}}})}, {"isError", true}});
}

}  // namespace corral::mcp
