// The pure half of SandboxGit: reading what the diff script prints (HEAD's line, then
// `git diff --patch-with-raw -z`), checked against the real output of the host's git.
#include "supervisor/sandboxes/sandbox_git.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <string>

#include "common/file_util.h"
#include "tests/testing/temp_dir.h"

namespace corral::supervisor {
namespace {

std::string Raw(const std::string& meta, std::initializer_list<std::string> paths) {
  std::string out = meta;
  out += '\0';
  for (const auto& path : paths) {
    out += path;
    out += '\0';
  }
  return out;
}

TEST(GitStatusNameTest, Letters) {
  EXPECT_EQ(GitStatusName("A"), "added");
  EXPECT_EQ(GitStatusName("M"), "modified");
  EXPECT_EQ(GitStatusName("D"), "deleted");
  EXPECT_EQ(GitStatusName("R087"), "renamed");
  EXPECT_EQ(GitStatusName("C100"), "copied");
  EXPECT_EQ(GitStatusName("T"), "type_changed");
  EXPECT_EQ(GitStatusName("U"), "unmerged");
  EXPECT_EQ(GitStatusName("X"), "unknown");
  EXPECT_EQ(GitStatusName(""), "unknown");
}

TEST(ParseDiffOutputTest, RecordsThenPatch) {
  const std::string head = "8a59dee6b0ec2b4e753ebb806791a626a42c9f9f";
  std::string output = head + "\n";
  output += Raw(":100644 100644 7898192 9ad2ebb M", {"a"});
  output += Raw(":000000 100644 0000000 b680253 A", {"dir/new file"});  // spaces, unquoted
  output += Raw(":100644 100644 1111111 1111111 R100", {"old name", "new name"});
  output += Raw(":100644 000000 6178079 0000000 D", {"gone\nwith a newline"});
  output += '\0';
  const std::string patch = "diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1 +1,2 @@\n a\n+a2\n";
  output += patch;
  auto diff = ParseDiffOutput(output, 1 << 20, false);
  ASSERT_TRUE(diff.ok()) << diff.status().ToString();
  EXPECT_EQ(diff->head, head);
  ASSERT_EQ(diff->files.size(), 4u);
  EXPECT_EQ(diff->files[0].path, "a");
  EXPECT_EQ(diff->files[0].status, "modified");
  EXPECT_EQ(diff->files[1].path, "dir/new file");
  EXPECT_EQ(diff->files[1].status, "added");
  EXPECT_EQ(diff->files[2].path, "new name");
  EXPECT_EQ(diff->files[2].from, "old name");
  EXPECT_EQ(diff->files[2].status, "renamed");
  EXPECT_EQ(diff->files[3].path, "gone\nwith a newline");
  EXPECT_EQ(diff->files[3].status, "deleted");
  EXPECT_EQ(diff->diff, patch);
  EXPECT_FALSE(diff->truncated);
}

TEST(ParseDiffOutputTest, NothingChangedAndNoCommits) {
  auto clean = ParseDiffOutput("8a59dee6b0ec2b4e753ebb806791a626a42c9f9f\n", 100, false);
  ASSERT_TRUE(clean.ok()) << clean.status().ToString();
  EXPECT_TRUE(clean->files.empty());
  EXPECT_EQ(clean->diff, "");
  // A repository without commits: HEAD's line is empty.
  auto unborn = ParseDiffOutput("\n" + Raw(":000000 100644 0000000 b680253 A", {"f"}) + std::string(1, '\0') + "p",
                                100, false);
  ASSERT_TRUE(unborn.ok()) << unborn.status().ToString();
  EXPECT_EQ(unborn->head, "");
  ASSERT_EQ(unborn->files.size(), 1u);
  EXPECT_EQ(unborn->diff, "p");
}

TEST(ParseDiffOutputTest, CutsThePatchAtTheCapAndToleratesACutRecord) {
  std::string output = "abc123\n" + Raw(":100644 100644 1 2 M", {"a"}) + std::string(1, '\0') + std::string(100, 'x');
  auto cut = ParseDiffOutput(output, 10, false);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->diff, std::string(10, 'x'));
  EXPECT_TRUE(cut->truncated);
  // Control: at the cap exactly, nothing is cut.
  auto whole = ParseDiffOutput(output, 100, false);
  ASSERT_TRUE(whole.ok());
  EXPECT_FALSE(whole->truncated);
  // The output itself was cut inside the records (by the command's cap): what is whole counts.
  std::string records = "abc123\n" + Raw(":100644 100644 1 2 M", {"a"}) + ":100644 100644 1 2 M";
  records += '\0';
  records += "b-without-its-end";
  auto partial = ParseDiffOutput(records, 100, true);
  ASSERT_TRUE(partial.ok()) << partial.status().ToString();
  ASSERT_EQ(partial->files.size(), 1u);
  EXPECT_TRUE(partial->truncated);
  // ... which, when the output was not cut, is an error.
  EXPECT_FALSE(ParseDiffOutput(records, 100, false).ok());
  // No HEAD line, or a HEAD that is not a commit id.
  EXPECT_FALSE(ParseDiffOutput("", 100, false).ok());
  EXPECT_FALSE(ParseDiffOutput("fatal: nope\n", 100, false).ok());
}

// The format is git's: run the host's git the way the script does and read its output.
TEST(ParseDiffOutputTest, ReadsRealGitOutput) {
  if (system("git --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "git is not installed";
  test::TempDir tmp("sandbox-git-test");
  const std::string dir = tmp.path();
  const std::string env = "cd " + dir +
                          " && export GIT_CONFIG_NOSYSTEM=1 HOME=" + dir +
                          " GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t && ";
  ASSERT_EQ(system((env + "git init -q && printf 'one\\n' > a && printf 'x\\n' > b && git add a b && "
                          "git commit -qm one && printf 'two\\n' >> a && git rm -q b && printf 'new\\n' > 'c d' && "
                          "idx=$(mktemp) && cp .git/index $idx && GIT_INDEX_FILE=$idx git add -A && "
                          "{ git rev-parse HEAD; GIT_INDEX_FILE=$idx git diff --cached --patch-with-raw -z HEAD --; } "
                          "> ../out.$$ && mv ../out.$$ out.bin && rm -f $idx")
                       .c_str()),
            0);
  auto output = ReadFileToString(dir + "/out.bin");
  ASSERT_TRUE(output.ok());
  auto diff = ParseDiffOutput(*output, 1 << 20, false);
  ASSERT_TRUE(diff.ok()) << diff.status().ToString();
  EXPECT_EQ(diff->head.size(), 40u);
  ASSERT_EQ(diff->files.size(), 3u);
  EXPECT_EQ(diff->files[0].path, "a");
  EXPECT_EQ(diff->files[0].status, "modified");
  EXPECT_EQ(diff->files[1].path, "b");
  EXPECT_EQ(diff->files[1].status, "deleted");
  EXPECT_EQ(diff->files[2].path, "c d");
  EXPECT_EQ(diff->files[2].status, "added");
  EXPECT_EQ(diff->diff.rfind("diff --git a/a b/a\n", 0), 0u) << diff->diff;
  EXPECT_NE(diff->diff.find("+two"), std::string::npos);
  EXPECT_NE(diff->diff.find("+new"), std::string::npos);
}

}  // namespace
}  // namespace corral::supervisor
