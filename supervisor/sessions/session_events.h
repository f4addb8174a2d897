// Derived session events: what a UI follows without parsing the agent's text. Beside the
// numbered `agent` events (Claude Code's stream-json lines as it printed them), the session
// emits (docs/PROTOCOL.md "Agent sessions"):
//   todo            {"todos": [{"content", "status", "active_form"}]}: the agent's todo list,
//                   whole, each time its TodoWrite tool sets it (the main agent's, not a
//                   subagent's); at most kMaxTodos items of at most kMaxTodoText bytes each
//   file_change     {"path", "change": create|modify|delete, "type": file|dir|symlink|other,
//                   "size"}: seen in the workspace itself (workspace_watch.h), whoever changed it
//   awaiting_input  {"reason": permission|tool, "call", "name"}: the agent waits for the client
//   result          {"turn", "is_error", "subtype", "text", "files": [{"path", "change", "type",
//                   "size"}], "diff": {"files", "created", "modified", "deleted", "truncated",
//                   "observed"}}: the end of a turn, after its last file_change
// This file turns the values into those events, and reads the todo list out of an agent line.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "supervisor/sessions/workspace_watch.h"

namespace corral::supervisor {

inline constexpr size_t kMaxTodos = 100;
inline constexpr size_t kMaxTodoText = 1000;

// A string member of a JSON object that the sandbox made (the agent's output, its tool calls):
// "" when it is absent or of another type, never an exception.
std::string JsonString(const nlohmann::json& j, const char* key);

// MCP content of one text block: a tool's answer to the agent.
nlohmann::json ToolResultText(const std::string& text, bool is_error);

struct TodoItem {
  std::string content;
  std::string status;  // pending, in_progress, completed
  std::string active_form;
};

// The todo list an agent line sets: the input of the last TodoWrite tool use in an `assistant`
// line of the main agent. nullopt for any other line. Items with another status or no content
// are left out; text is cut at kMaxTodoText bytes, the list at kMaxTodos items.
std::optional<std::vector<TodoItem>> TodosOf(const nlohmann::json& line);

nlohmann::json TodoEvent(const std::vector<TodoItem>& todos);

// `dir` is the scanned directory (absolute inside the sandbox): paths in events are absolute.
nlohmann::json FileChangeEvent(const std::string& dir, const FileChange& change);

// The end of a turn: the agent's `result` line and the files the turn changed.
nlohmann::json TurnResultEvent(const std::string& dir, int64_t turn, const nlohmann::json& agent_result,
                               const TurnFiles& files);

// `permission`: a permission request (name: the tool asking); else a client tool call (name:
// the declared tool).
nlohmann::json AwaitingInputEvent(bool permission, const std::string& call, const std::string& name);

}  // namespace corral::supervisor
