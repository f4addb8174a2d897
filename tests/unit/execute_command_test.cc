// `corral execute`'s pure parts: the base64 it sends and what it prints for people.
#include "tools/corral/execute_command.h"

#include <gtest/gtest.h>

namespace corral::cli {
namespace {

TEST(ExecuteCommandTest, Base64) {
  EXPECT_EQ(EncodeBase64(""), "");
  EXPECT_EQ(EncodeBase64("f"), "Zg==");
  EXPECT_EQ(EncodeBase64("fo"), "Zm8=");
  EXPECT_EQ(EncodeBase64("foo"), "Zm9v");
  EXPECT_EQ(EncodeBase64(std::string("\xff\xfe\x00", 3)), "//4A");
}

TEST(ExecuteCommandTest, FormatsAnExecutionForPeople) {
  auto record = nlohmann::json::parse(R"({
    "id": "exe_abc", "state": "completed", "outcome": "completed", "summary": "Fixed it.",
    "files_changed": [{"path": "a.c", "status": "modified"}, {"path": "b.c", "status": "renamed", "from": "old.c"}],
    "cost_usd": "0.012460", "usage": {"calls": 2}, "base": "8a59dee6b0ec2b4e753e", "head": "76e477164e4deafa4533",
    "truncated": false, "keep_sandbox": false, "sandbox": "sb_x"})");
  const std::string text = FormatExecution(record, "out", true);
  EXPECT_NE(text.find("execution exe_abc: completed (agent: completed)"), std::string::npos) << text;
  EXPECT_NE(text.find("Fixed it."), std::string::npos) << text;
  EXPECT_NE(text.find("files changed: 2"), std::string::npos) << text;
  EXPECT_NE(text.find("  modified    a.c\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  renamed     b.c (from old.c)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("cost: USD 0.012460 (2 model calls)"), std::string::npos) << text;
  EXPECT_NE(text.find("git fetch out/changes.bundle"), std::string::npos) << text;
  EXPECT_EQ(text.find("error:"), std::string::npos) << text;
  EXPECT_EQ(text.find("sandbox:"), std::string::npos) << text;

  record["state"] = "failed";
  record["error"] = "the agent did not finish";
  record["keep_sandbox"] = true;
  record["truncated"] = true;
  const std::string failed = FormatExecution(record, "out", false);
  EXPECT_NE(failed.find("error: the agent did not finish"), std::string::npos) << failed;
  EXPECT_NE(failed.find("changes: none to fetch"), std::string::npos) << failed;
  EXPECT_EQ(failed.find("git fetch"), std::string::npos) << failed;
  EXPECT_NE(failed.find("(the diff in result.json is truncated)"), std::string::npos) << failed;
  EXPECT_NE(failed.find("sandbox: sb_x (kept"), std::string::npos) << failed;
}

}  // namespace
}  // namespace corral::cli
