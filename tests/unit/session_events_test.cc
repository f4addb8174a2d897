// Derived session events: the todo list read out of the agent's lines (whatever the sandbox
// prints, never an exception), and the events made of scan values.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "supervisor/sessions/session_events.h"

namespace corral::supervisor {
namespace {

using nlohmann::json;

// A JSON array of these values (a braced list of one json value is that value to some compilers).
json Array(std::initializer_list<json> items) {
  json array = json::array();
  for (const json& item : items) array.push_back(item);
  return array;
}

json Todo(const std::string& content, const std::string& status) {
  return json::object({{"content", content}, {"status", status}});
}

json AssistantWith(json content, json parent = nullptr) {
  return {{"type", "assistant"},
          {"message", {{"role", "assistant"}, {"content", std::move(content)}}},
          {"parent_tool_use_id", std::move(parent)}};
}

json TodoWrite(json todos) {
  return {{"type", "tool_use"}, {"id", "toolu_1"}, {"name", "TodoWrite"}, {"input", {{"todos", std::move(todos)}}}};
}

TEST(TodosOfTest, ReadsTheListOfTheMainAgentsTodoWrite) {
  json first = Todo("Write hello.py", "completed");
  first["activeForm"] = "Writing";
  json second = Todo("Run it", "in_progress");
  second["activeForm"] = "Running it";
  json line = AssistantWith(Array({json::object({{"type", "text"}, {"text", "planning"}}), TodoWrite(Array({first, second}))}));
  auto todos = TodosOf(line);
  ASSERT_TRUE(todos.has_value());
  ASSERT_EQ(todos->size(), 2u);
  EXPECT_EQ((*todos)[1].content, "Run it");
  EXPECT_EQ((*todos)[1].status, "in_progress");
  EXPECT_EQ((*todos)[1].active_form, "Running it");
  json event = TodoEvent(*todos);
  EXPECT_EQ(event["kind"], "todo");
  EXPECT_EQ(event["todos"][0],
            json::object({{"content", "Write hello.py"}, {"status", "completed"}, {"active_form", "Writing"}}));
  // An empty list is a list (all done and cleared).
  auto cleared = TodosOf(AssistantWith(Array({TodoWrite(json::array())})));
  ASSERT_TRUE(cleared.has_value());
  EXPECT_TRUE(cleared->empty());
}

TEST(TodosOfTest, IgnoresOtherLinesSubagentsAndMalformedInput) {
  json valid = Array({Todo("x", "pending")});
  EXPECT_TRUE(TodosOf(AssistantWith(Array({TodoWrite(valid)}))).has_value());  // control
  EXPECT_FALSE(TodosOf(AssistantWith(Array({TodoWrite(valid)}), "toolu_parent")).has_value());  // a subagent's list
  json user = {{"type", "user"}, {"message", {{"content", Array({TodoWrite(valid)})}}}};
  EXPECT_FALSE(TodosOf(user).has_value());
  json bash = TodoWrite(valid);
  bash["name"] = "Bash";
  EXPECT_FALSE(TodosOf(AssistantWith(Array({bash}))).has_value());
  for (const json& bad : {json(nullptr), json("todos"), Array({1, 2}), json::object({{"todos", "x"}})}) {
    json use = TodoWrite(valid);
    use["input"] = bad;
    EXPECT_FALSE(TodosOf(AssistantWith(Array({use}))).has_value()) << bad;
  }
  EXPECT_FALSE(TodosOf(json::array()).has_value());
  EXPECT_FALSE(TodosOf(AssistantWith("just text")).has_value());
  // Items of another shape are left out, the rest kept.
  json kept = Todo("kept", "pending");
  kept["activeForm"] = 3;
  json numeric = Todo("", "pending");
  numeric["content"] = 5;
  auto todos = TodosOf(AssistantWith(Array({TodoWrite(Array({numeric, Todo("ok", "done?"), kept, "not an object"}))})));
  ASSERT_TRUE(todos.has_value());
  ASSERT_EQ(todos->size(), 1u);
  EXPECT_EQ((*todos)[0].content, "kept");
  EXPECT_EQ((*todos)[0].active_form, "");
}

TEST(TodosOfTest, BoundsTheListAndItsText) {
  json many = json::array();
  for (int i = 0; i < 500; ++i) many.push_back(Todo(std::string(5000, 'a') + "\xc3\xa9", "pending"));
  auto todos = TodosOf(AssistantWith(Array({TodoWrite(many)})));
  ASSERT_TRUE(todos.has_value());
  EXPECT_EQ(todos->size(), kMaxTodos);
  EXPECT_EQ((*todos)[0].content.size(), kMaxTodoText);
  // A cut never splits a UTF-8 character.
  auto accented = TodosOf(AssistantWith(Array({TodoWrite(Array({Todo(std::string(999, 'a') + "\xc3\xa9", "pending")}))})));
  ASSERT_TRUE(accented.has_value());
  EXPECT_EQ((*accented)[0].content, std::string(999, 'a'));
}

TEST(SessionEventsTest, FileEventsNameAbsolutePathsInTheSandbox) {
  FileChange change{"src/main.py", ChangeKind::kCreate, EntryType::kFile, 12};
  EXPECT_EQ(FileChangeEvent("/home/agent", change),
            (json{{"kind", "file_change"}, {"path", "/home/agent/src/main.py"}, {"change", "create"}, {"type", "file"},
                  {"size", 12}}));
  EXPECT_EQ(FileChangeEvent("/", change)["path"], "/src/main.py");
  TurnFiles files;
  files.files = {change, FileChange{"old", ChangeKind::kDelete, EntryType::kDir, 0}};
  files.created = 1;
  files.deleted = 3;  // counts include changes beyond `files`
  files.truncated = true;
  json event = TurnResultEvent("/home/agent", 2, {{"is_error", false}, {"subtype", "success"}, {"result", "done"}}, files);
  EXPECT_EQ(event["kind"], "result");
  EXPECT_EQ(event["turn"], 2);
  EXPECT_EQ(event["text"], "done");
  EXPECT_EQ(event["is_error"], false);
  EXPECT_EQ(event["files"][1], (json{{"path", "/home/agent/old"}, {"change", "delete"}, {"type", "dir"}, {"size", 0}}));
  EXPECT_EQ(event["diff"], (json{{"files", 4}, {"created", 1}, {"modified", 0}, {"deleted", 3}, {"truncated", true},
                                 {"observed", true}}));
  // What the agent printed of other types is not taken.
  json odd = TurnResultEvent("/w", 1, {{"is_error", "yes"}, {"result", 7}}, TurnFiles{});
  EXPECT_EQ(odd["is_error"], false);
  EXPECT_EQ(odd["text"], "");
}

TEST(SessionEventsTest, AwaitingInputSaysWhy) {
  EXPECT_EQ(AwaitingInputEvent(true, "c1", "Bash"),
            (json{{"kind", "awaiting_input"}, {"reason", "permission"}, {"call", "c1"}, {"name", "Bash"}}));
  EXPECT_EQ(AwaitingInputEvent(false, "c2", "lookup")["reason"], "tool");
}

}  // namespace
}  // namespace corral::supervisor
