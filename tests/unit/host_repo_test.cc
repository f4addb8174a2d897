// Host repositories for headless executions: which paths are allowed (resolved, symlinks
// followed), and the bundle the host's git makes of one, as the directory's owner.
#include "supervisor/sessions/host_repo.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "common/file_util.h"
#include "tests/testing/temp_dir.h"

namespace corral::supervisor {
namespace {

class HostRepoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    allowed_ = dir_ + "/allowed";
    ASSERT_TRUE(MakeDirs(allowed_ + "/app", 0755).ok());
    ASSERT_TRUE(MakeDirs(dir_ + "/allowed-not", 0755).ok());
    ASSERT_TRUE(MakeDirs(dir_ + "/elsewhere", 0755).ok());
  }

  // Runs a shell line in `cwd` with a private git identity and configuration.
  static int Sh(const std::string& cwd, const std::string& line) {
    const std::string command = "cd '" + cwd + "' && GIT_CONFIG_NOSYSTEM=1 HOME='" + cwd +
                                "' GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t "
                                "GIT_COMMITTER_EMAIL=t@t sh -c '" + line + "' >/dev/null 2>&1";
    return system(command.c_str());
  }

  test::TempDir tmp_{"host-repo-test"};
  const std::string dir_ = tmp_.path();
  std::string allowed_;
};

TEST_F(HostRepoTest, OnlyAllowedDirectoriesAndWhatIsUnderThem) {
  // Allowed: the directory itself and a directory under it, as resolved paths.
  auto itself = ResolveAllowedRepo(allowed_, {allowed_});
  ASSERT_TRUE(itself.ok()) << itself.status().ToString();
  EXPECT_EQ(*itself, allowed_);
  auto under = ResolveAllowedRepo(allowed_ + "/./app/", {allowed_});
  ASSERT_TRUE(under.ok()) << under.status().ToString();
  EXPECT_EQ(*under, allowed_ + "/app");
  // Refused: nothing allowed; outside; a sibling whose name starts the same; `..` out of it.
  EXPECT_EQ(ResolveAllowedRepo(allowed_, {}).status().error_number(), EPERM);
  EXPECT_EQ(ResolveAllowedRepo(dir_ + "/elsewhere", {allowed_}).status().error_number(), EPERM);
  EXPECT_EQ(ResolveAllowedRepo(dir_ + "/allowed-not", {allowed_}).status().error_number(), EPERM);
  EXPECT_EQ(ResolveAllowedRepo(allowed_ + "/../elsewhere", {allowed_}).status().error_number(), EPERM);
  // A symlink inside that leads outside is judged by where it leads.
  ASSERT_EQ(symlink((dir_ + "/elsewhere").c_str(), (allowed_ + "/escape").c_str()), 0);
  EXPECT_EQ(ResolveAllowedRepo(allowed_ + "/escape", {allowed_}).status().error_number(), EPERM);
  // ... and an allowed path that is a symlink allows where it leads.
  ASSERT_EQ(symlink(allowed_.c_str(), (dir_ + "/link-to-allowed").c_str()), 0);
  auto through = ResolveAllowedRepo(allowed_ + "/app", {dir_ + "/link-to-allowed"});
  ASSERT_TRUE(through.ok()) << through.status().ToString();
  EXPECT_EQ(*through, allowed_ + "/app");
  // Missing under an allowed directory: said so; missing elsewhere: refused like the rest.
  EXPECT_EQ(ResolveAllowedRepo(allowed_ + "/nope", {allowed_}).status().error_number(), EINVAL);
  EXPECT_EQ(ResolveAllowedRepo(dir_ + "/nope", {allowed_}).status().error_number(), EPERM);
  // Not a directory; not absolute.
  ASSERT_TRUE(WriteNewFile(allowed_ + "/file", "x").ok());
  EXPECT_EQ(ResolveAllowedRepo(allowed_ + "/file", {allowed_}).status().error_number(), EINVAL);
  EXPECT_EQ(ResolveAllowedRepo("allowed", {allowed_}).status().error_number(), EINVAL);
}

TEST_F(HostRepoTest, BundlesEveryRefThatGitCloneTakes) {
  if (system("git --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "git is not installed";
  const std::string repo = allowed_ + "/app";
  ASSERT_EQ(Sh(repo, "git init -q -b main && echo hi > a && git add a && git commit -qm one"), 0);
  auto bundle = BundleHostRepo(repo, 1 << 20, std::chrono::seconds(30));
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  EXPECT_EQ(bundle->rfind("# v2 git bundle\n", 0), 0u);
  ASSERT_TRUE(WriteNewFile(dir_ + "/app.bundle", *bundle).ok());
  ASSERT_EQ(Sh(dir_, "git clone -q app.bundle clone && test \"$(cat clone/a)\" = hi"), 0);

  // Above the cap: refused, git killed.
  auto big = BundleHostRepo(repo, 16, std::chrono::seconds(30));
  EXPECT_EQ(big.status().error_number(), EFBIG);
  // Not a repository, and a repository without commits: git's message.
  auto none = BundleHostRepo(dir_ + "/elsewhere", 1 << 20, std::chrono::seconds(30));
  EXPECT_EQ(none.status().error_number(), EINVAL);
  EXPECT_NE(none.status().message().find("repository"), std::string::npos) << none.status().message();
  ASSERT_EQ(Sh(dir_ + "/allowed-not", "git init -q"), 0);
  EXPECT_EQ(BundleHostRepo(dir_ + "/allowed-not", 1 << 20, std::chrono::seconds(30)).status().error_number(), EINVAL);
}

// As root, git runs as the owner of the directory: an object only root may read stops it.
TEST_F(HostRepoTest, GitRunsAsTheDirectorysOwner) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (to give the repository to another user)";
  if (system("git --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "git is not installed";
  const std::string repo = allowed_ + "/app";
  ASSERT_EQ(Sh(repo, "git init -q -b main && echo hi > a && git add a && git commit -qm one"), 0);
  constexpr uid_t kNobody = 65534;
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  ASSERT_EQ(system(("chown -R 65534:65534 '" + repo + "'").c_str()), 0);
  // Control: owned by nobody, readable by nobody: it works.
  auto bundle = BundleHostRepo(repo, 1 << 20, std::chrono::seconds(30));
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  // One object given back to root, mode 0600: root could read it, its owner cannot.
  ASSERT_EQ(system(("f=$(find '" + repo + "/.git/objects' -type f | head -1) && chown 0:0 \"$f\" && chmod 600 \"$f\"")
                       .c_str()),
            0);
  auto refused = BundleHostRepo(repo, 1 << 20, std::chrono::seconds(30));
  EXPECT_FALSE(refused.ok());
  (void)kNobody;
}

}  // namespace
}  // namespace corral::supervisor
