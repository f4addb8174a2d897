// Derived session events: the todo list read out of the agent's lines (whatever the sandbox
// prints, never an exception), and the events made of scan values.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "supervisor/sessions/session_events.h"

namespace corral::supervisor {
namespace {

using nlohmann::json;

json AssistantWith(json content, json parent = nullptr) {
  return {{"type", "assistant"},
          {"message", {{"role", "assistant"}, {"content", std::move(content)}}},
          {"parent_tool_use_id", std::move(parent)}};
}

json TodoWrite(json todos) {
  return {{"type", "tool_use"}, {"id", "toolu_1"}, {"name", "TodoWrite"}, {"input", {{"todos", std::move(todos)}}}};
}

TEST(TodosOfTest, ReadsTheListOfTheMainAgentsTodoWrite) {
  json line = AssistantWith({{{"type", "text"}, {"text", "planning"}},
                             TodoWrite({{{"content", "Write hello.py"}, {"status", "completed"}, {"activeForm", "Writing"}},
                                        {{"content", "Run it"}, {"status", "in_progress"}, {"activeForm", "Running it"}}})});
  auto todos = TodosOf(line);
  ASSERT_TRUE(todos.has_value());
  ASSERT_EQ(todos->size(), 2u);
  EXPECT_EQ((*todos)[1].content, "Run it");
  EXPECT_EQ((*todos)[1].status, "in_progress");
  EXPECT_EQ((*todos)[1].active_form, "Running it");
  json event = TodoEvent(*todos);
  EXPECT_EQ(event["kind"], "todo");
  EXPECT_EQ(event["todos"][0], (json{{"content", "Write hello.py"}, {"status", "completed"}, {"active_form", "Writing"}}));
  // An empty list is a list (all done and cleared).
  auto cleared = TodosOf(AssistantWith({TodoWrite(json::array())}));
  ASSERT_TRUE(cleared.has_value());
  EXPECT_TRUE(cleared->empty());
}

TEST(TodosOfTest, IgnoresOtherLinesSubagentsAndMalformedInput) {
  json valid = {{{"content", "x"}, {"status", "pending"}}};
  EXPECT_TRUE(TodosOf(AssistantWith({TodoWrite(valid)})).has_value());  // control
  EXPECT_FALSE(TodosOf(AssistantWith({TodoWrite(valid)}, "toolu_parent")).has_value());  // a subagent's list
  EXPECT_FALSE(TodosOf({{"type", "user"}, {"message", {{"content", {TodoWrite(valid)}}}}}).has_value());
  EXPECT_FALSE(TodosOf(AssistantWith({{{"type", "tool_use"}, {"name", "Bash"}, {"input", {{"todos", valid}}}}})).has_value());
  for (const json& bad : {json(nullptr), json("todos"), json::array({1, 2}), json{{"todos", "x"}}}) {
    EXPECT_FALSE(TodosOf(AssistantWith({{{"type", "tool_use"}, {"name", "TodoWrite"}, {"input", bad}}})).has_value())
        << bad;
  }
  EXPECT_FALSE(TodosOf(json::array()).has_value());
  EXPECT_FALSE(TodosOf(AssistantWith("just text")).has_value());
  // Items of another shape are left out, the rest kept.
  auto todos = TodosOf(AssistantWith({TodoWrite({{{"content", 5}, {"status", "pending"}},
                                                 {{"content", "ok"}, {"status", "done?"}},
                                                 {{"content", "kept"}, {"status", "pending"}, {"activeForm", 3}},
                                                 "not an object"})}));
  ASSERT_TRUE(todos.has_value());
  ASSERT_EQ(todos->size(), 1u);
  EXPECT_EQ((*todos)[0].content, "kept");
  EXPECT_EQ((*todos)[0].active_form, "");
}

TEST(TodosOfTest, BoundsTheListAndItsText) {
  json many = json::array();
  for (int i = 0; i < 500; ++i) many.push_back({{"content", std::string(5000, 'a') + "\xc3\xa9"}, {"status", "pending"}});
  auto todos = TodosOf(AssistantWith({TodoWrite(many)}));
  ASSERT_TRUE(todos.has_value());
  EXPECT_EQ(todos->size(), kMaxTodos);
  EXPECT_EQ((*todos)[0].content.size(), kMaxTodoText);
  // A cut never splits a UTF-8 character.
  auto accented = TodosOf(AssistantWith({TodoWrite({{{"content", std::string(999, 'a') + "\xc3\xa9"}, {"status", "pending"}}})}));
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
