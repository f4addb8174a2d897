// The session runner's client tools and permission requests (session_runner.h): calls from
// corral-mcp through the tool bridge, held until the client answers or the timeout.
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "supervisor/sessions/session_events.h"
#include "supervisor/sessions/session_runner.h"

namespace corral::supervisor {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Client tools

void SessionRunner::EnableTools(boost::asio::io_context& io, ToolBridge& bridge, bool mcp_in_sandboxes) {
  io_ = &io;
  bridge_ = &bridge;
  mcp_in_sandboxes_ = mcp_in_sandboxes;
}

std::optional<ToolSessionInfo> SessionRunner::FindToolKey(std::string_view sandbox_id, std::string_view key) {
  auto it = tool_keys_.find(ToolKeyDigest(key));
  if (it == tool_keys_.end() || it->second.sandbox_id != sandbox_id || !live_.count(it->second.session_id)) {
    return std::nullopt;
  }
  return ToolSessionInfo{it->second.session_id, it->second.tools};
}

void SessionRunner::OnToolCall(const std::string& session_id, const std::string& call_id, const std::string& name,
                               json arguments, std::function<void(json result)> reply) {
  auto it = live_.find(session_id);
  if (it == live_.end() || it->second->ended_) {
    return reply(ToolResultText("the session is not running", true));
  }
  AgentSession& session = *it->second;
  AgentSession::PendingCall pending;
  pending.permission = name == kPermissionTool;
  pending.reply = std::move(reply);
  if (io_ != nullptr) {
    pending.timer = std::make_unique<boost::asio::steady_timer>(*io_, std::chrono::seconds(config_.tool_call_timeout_s));
    pending.timer->async_wait([this, session_id, call_id](boost::system::error_code ec) {
      if (!ec) ToolCallTimedOut(session_id, call_id);
    });
  }
  const bool permission = pending.permission;
  const std::string asking = permission ? JsonString(arguments, "tool_name") : name;
  if (permission) {
    session.Emit({{"kind", "permission_request"},
                  {"call", call_id},
                  {"tool_name", asking},
                  {"input", arguments.is_object() && arguments.contains("input") ? arguments["input"] : json::object()}});
  } else {
    session.Emit({{"kind", "tool_call"}, {"call", call_id}, {"name", name}, {"input", std::move(arguments)}});
  }
  session.calls_[call_id] = std::move(pending);
  session.Emit(AwaitingInputEvent(permission, call_id, asking));  // the derived event a UI follows
  session.SetState("waiting_tool");
}

Status SessionRunner::Answer(AgentSession& session, const std::string& call, json result, bool permission) {
  auto it = session.calls_.find(call);
  if (it == session.calls_.end() || it->second.permission != permission) {
    return Status::Error(std::string(permission ? "permission request " : "tool call ") + call +
                             " is not waiting in session " + session.id(),
                         ENOENT);
  }
  AgentSession::PendingCall pending = std::move(it->second);
  session.calls_.erase(it);
  if (pending.timer) pending.timer->cancel();
  const bool is_error = result.value("isError", false);
  pending.reply(std::move(result));
  session.Emit({{"kind", permission ? "permission_answer" : "tool_result"}, {"call", call}, {"is_error", is_error}});
  if (session.calls_.empty() && !session.ended_) session.SetState(session.pending_turns_ > 0 ? "processing" : "ready");
  return Status();
}

Status SessionRunner::AnswerTool(const Caller& caller, const std::string& id, const std::string& call, json result) {
  ASSIGN_OR_RETURN(std::shared_ptr<AgentSession> session, Live(caller, id));
  if (!result.is_object() || !result.contains("content") || !result["content"].is_array()) {
    return Status::Error("content: expected MCP content, e.g. [{\"type\": \"text\", \"text\": \"...\"}]", EINVAL);
  }
  if (result.contains("isError") && !result["isError"].is_boolean()) {
    return Status::Error("is_error: expected true or false", EINVAL);
  }
  return Answer(*session, call, std::move(result), /*permission=*/false);
}

Status SessionRunner::AnswerPermission(const Caller& caller, const std::string& id, const std::string& call,
                                       bool allow, const std::string& message, const json& updated_input) {
  ASSIGN_OR_RETURN(std::shared_ptr<AgentSession> session, Live(caller, id));
  // Claude Code's permission prompt tool answers with one text: a JSON decision.
  json decision;
  if (allow) {
    decision = {{"behavior", "allow"}, {"updatedInput", updated_input.is_object() ? updated_input : json::object()}};
  } else {
    decision = {{"behavior", "deny"}, {"message", message.empty() ? "the user denied this" : message}};
  }
  return Answer(*session, call, ToolResultText(decision.dump(), false), /*permission=*/true);
}

void SessionRunner::ToolCallTimedOut(const std::string& session_id, const std::string& call) {
  auto it = live_.find(session_id);
  if (it == live_.end()) return;
  AgentSession& session = *it->second;
  auto pending = session.calls_.find(call);
  if (pending == session.calls_.end()) return;
  const bool permission = pending->second.permission;
  LogInfo("session", "tool call timed out", {{"session", session_id}, {"call", call}});
  json result = permission ? ToolResultText(json{{"behavior", "deny"}, {"message", "nobody answered the permission "
                                                                                  "request in time"}}
                                                .dump(),
                                            false)
                           : ToolResultText("the client did not answer this tool call within " +
                                                std::to_string(config_.tool_call_timeout_s) + " s",
                                            true);
  (void)Answer(session, call, std::move(result), permission);
}

}  // namespace corral::supervisor
