#include "supervisor/sessions/session_events.h"

namespace corral::supervisor {

using nlohmann::json;

namespace {

constexpr const char* kTodoStatuses[] = {"pending", "in_progress", "completed"};

std::string CutText(std::string text, size_t max) {
  if (text.size() <= max) return text;
  size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xc0) == 0x80) --end;  // not inside a UTF-8 character
  text.resize(end);
  return text;
}

std::optional<std::vector<TodoItem>> TodoList(const json& input) {
  if (!input.is_object()) return std::nullopt;
  auto todos = input.find("todos");
  if (todos == input.end() || !todos->is_array()) return std::nullopt;
  std::vector<TodoItem> items;
  for (const json& todo : *todos) {
    if (items.size() >= kMaxTodos) break;
    TodoItem item{CutText(JsonString(todo, "content"), kMaxTodoText), JsonString(todo, "status"),
                  CutText(JsonString(todo, "activeForm"), kMaxTodoText)};
    bool known = false;
    for (const char* status : kTodoStatuses) known = known || item.status == status;
    if (known && !item.content.empty()) items.push_back(std::move(item));
  }
  return items;
}

json FileJson(const std::string& dir, const FileChange& change) {
  return {{"path", (dir == "/" ? dir : dir + "/") + change.path},
          {"change", ChangeKindName(change.kind)},
          {"type", EntryTypeName(change.type)},
          {"size", change.size}};
}

}  // namespace

std::string JsonString(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

json ToolResultText(const std::string& text, bool is_error) {
  return {{"content", json::array({{{"type", "text"}, {"text", text}}})}, {"isError", is_error}};
}

std::optional<std::vector<TodoItem>> TodosOf(const json& line) {
  if (JsonString(line, "type") != "assistant") return std::nullopt;
  auto parent = line.find("parent_tool_use_id");
  if (parent != line.end() && !parent->is_null()) return std::nullopt;  // a subagent's
  auto message = line.find("message");
  if (message == line.end() || !message->is_object()) return std::nullopt;
  auto content = message->find("content");
  if (content == message->end() || !content->is_array()) return std::nullopt;
  std::optional<std::vector<TodoItem>> last;
  for (const json& block : *content) {
    if (JsonString(block, "type") != "tool_use" || JsonString(block, "name") != "TodoWrite") continue;
    auto input = block.find("input");
    if (input == block.end()) continue;
    if (auto todos = TodoList(*input)) last = std::move(todos);
  }
  return last;
}

json TodoEvent(const std::vector<TodoItem>& todos) {
  json list = json::array();
  for (const TodoItem& todo : todos) {
    list.push_back({{"content", todo.content}, {"status", todo.status}, {"active_form", todo.active_form}});
  }
  return {{"kind", "todo"}, {"todos", std::move(list)}};
}

json FileChangeEvent(const std::string& dir, const FileChange& change) {
  json event = FileJson(dir, change);
  event["kind"] = "file_change";
  return event;
}

json TurnResultEvent(const std::string& dir, int64_t turn, const json& agent_result, const TurnFiles& files) {
  json list = json::array();
  for (const FileChange& change : files.files) list.push_back(FileJson(dir, change));
  auto is_error = agent_result.is_object() ? agent_result.find("is_error") : agent_result.end();
  return {{"kind", "result"},
          {"turn", turn},
          {"is_error", is_error != agent_result.end() && is_error->is_boolean() && is_error->get<bool>()},
          {"subtype", JsonString(agent_result, "subtype")},
          {"text", JsonString(agent_result, "result")},
          {"files", std::move(list)},
          {"diff",
           {{"files", files.created + files.modified + files.deleted},
            {"created", files.created},
            {"modified", files.modified},
            {"deleted", files.deleted},
            {"truncated", files.truncated},
            {"observed", files.observed}}}};
}

json AwaitingInputEvent(bool permission, const std::string& call, const std::string& name) {
  return {{"kind", "awaiting_input"}, {"reason", permission ? "permission" : "tool"}, {"call", call}, {"name", name}};
}

}  // namespace corral::supervisor
