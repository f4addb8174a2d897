// The host tools of `corral prompt --allow-host-tools`, run for real in a temporary directory.
#include "tools/corral/host_tools.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/testing/temp_dir.h"

namespace corral::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class HostToolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = outside_ + "/project";
    fs::create_directories(root_ + "/src");
    root_ = fs::canonical(root_).string();
    Put(root_ + "/src/a.cc", "int a = 1;\nint b = 2;\n");
    Put(outside_ + "/secret.txt", "do not read\n");
  }

  static void Put(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
  static std::string Get(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
  }
  HostToolResult Run(const std::string& name, const json& input) { return RunHostTool(name, input, root_); }

  test::TempDir tmp_{"host-tools"};
  const std::string outside_ = tmp_.path();
  std::string root_;
};

TEST_F(HostToolsTest, DeclaresEachToolWithASchema) {
  json tools = HostToolDeclarations();
  ASSERT_EQ(tools.size(), 6u);
  for (const auto& tool : tools) {
    EXPECT_TRUE(IsHostTool(tool["name"])) << tool["name"];
    EXPECT_EQ(tool["input_schema"]["type"], "object");
    EXPECT_FALSE(tool["description"].get<std::string>().empty());
  }
  EXPECT_FALSE(IsHostTool("Bash"));
}

TEST_F(HostToolsTest, ReadWriteAndEditFilesInTheDirectory) {
  HostToolResult read = Run("HostRead", {{"path", "src/a.cc"}});
  ASSERT_FALSE(read.is_error) << read.text;
  EXPECT_NE(read.text.find("     1\tint a = 1;"), std::string::npos) << read.text;
  EXPECT_NE(read.text.find("     2\tint b = 2;"), std::string::npos);
  EXPECT_EQ(Run("HostRead", {{"path", "src/a.cc"}, {"offset", 2}}).text.find("int a"), std::string::npos);

  HostToolResult wrote = Run("HostWrite", {{"path", "new/dir/b.txt"}, {"content", "hello"}});
  ASSERT_FALSE(wrote.is_error) << wrote.text;
  EXPECT_EQ(Get(root_ + "/new/dir/b.txt"), "hello");

  HostToolResult edited = Run("HostEdit", {{"path", "src/a.cc"}, {"old_string", "int b = 2;"}, {"new_string", "int b = 3;"}});
  ASSERT_FALSE(edited.is_error) << edited.text;
  EXPECT_EQ(Get(root_ + "/src/a.cc"), "int a = 1;\nint b = 3;\n");
  // Ambiguous or missing text is refused, and the file stays as it was.
  EXPECT_TRUE(Run("HostEdit", {{"path", "src/a.cc"}, {"old_string", "int"}, {"new_string", "long"}}).is_error);
  EXPECT_TRUE(Run("HostEdit", {{"path", "src/a.cc"}, {"old_string", "nope"}, {"new_string", "x"}}).is_error);
  EXPECT_EQ(Get(root_ + "/src/a.cc"), "int a = 1;\nint b = 3;\n");
  EXPECT_FALSE(Run("HostEdit", {{"path", "src/a.cc"}, {"old_string", "int"}, {"new_string", "long"},
                                {"replace_all", true}}).is_error);
  EXPECT_EQ(Get(root_ + "/src/a.cc"), "long a = 1;\nlong b = 3;\n");
}

TEST_F(HostToolsTest, NothingOutsideTheDirectoryIsReachable) {
  // Positive control: the same file name inside is fine.
  Put(root_ + "/secret.txt", "inside\n");
  EXPECT_FALSE(Run("HostRead", {{"path", "secret.txt"}}).is_error);
  for (const std::string& path : {std::string("../secret.txt"), outside_ + "/secret.txt", std::string("/etc/passwd"),
                                  std::string("src/../../secret.txt")}) {
    HostToolResult read = Run("HostRead", {{"path", path}});
    EXPECT_TRUE(read.is_error) << path;
    EXPECT_NE(read.text.find("outside the working directory"), std::string::npos) << read.text;
    EXPECT_TRUE(Run("HostWrite", {{"path", path}, {"content", "x"}}).is_error) << path;
  }
  EXPECT_EQ(Get(outside_ + "/secret.txt"), "do not read\n");
  // A symlink inside that points outside is followed, and refused.
  fs::create_symlink(outside_, root_ + "/escape");
  EXPECT_TRUE(Run("HostRead", {{"path", "escape/secret.txt"}}).is_error);
  EXPECT_TRUE(Run("HostWrite", {{"path", "escape/new.txt"}, {"content", "x"}}).is_error);
  EXPECT_FALSE(fs::exists(outside_ + "/new.txt"));
  EXPECT_TRUE(Run("HostGlob", {{"pattern", "../*"}}).is_error);
  EXPECT_TRUE(Run("HostGrep", {{"pattern", "read"}, {"path", ".."}}).is_error);
}

TEST_F(HostToolsTest, GlobAndGrepFindWhatIsThere) {
  Put(root_ + "/src/b.h", "int b();\n");
  HostToolResult glob = Run("HostGlob", {{"pattern", "src/*.cc"}});
  ASSERT_FALSE(glob.is_error) << glob.text;
  EXPECT_EQ(glob.text, "src/a.cc\n");
  EXPECT_EQ(Run("HostGlob", {{"pattern", "*.none"}}).text, "no match");
  HostToolResult grep = Run("HostGrep", {{"pattern", "int [ab] ="}});
  ASSERT_FALSE(grep.is_error) << grep.text;
  EXPECT_EQ(grep.text, "src/a.cc:1:int a = 1;\nsrc/a.cc:2:int b = 2;\n");
  EXPECT_EQ(Run("HostGrep", {{"pattern", "int"}, {"glob", "*.h"}}).text, "src/b.h:1:int b();\n");
  EXPECT_TRUE(Run("HostGrep", {{"pattern", "("}}).is_error);
}

TEST_F(HostToolsTest, BashRunsInTheDirectoryWithItsExitCodeAndATimeout) {
  HostToolResult ok = Run("HostBash", {{"command", "pwd; echo err >&2"}});
  EXPECT_FALSE(ok.is_error) << ok.text;
  EXPECT_EQ(ok.text, "exit code 0\n" + root_ + "\nerr\n");
  HostToolResult failed = Run("HostBash", {{"command", "exit 3"}});
  EXPECT_TRUE(failed.is_error);
  EXPECT_EQ(failed.text, "exit code 3\n");
  HostToolResult slow = Run("HostBash", {{"command", "sleep 30 & sleep 30"}, {"timeout_s", 1}});
  EXPECT_TRUE(slow.is_error);
  EXPECT_NE(slow.text.find("timed out after 1 s"), std::string::npos) << slow.text;
  EXPECT_TRUE(Run("HostBash", json::object()).is_error);
}

}  // namespace
}  // namespace corral::cli
