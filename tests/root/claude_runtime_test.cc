// Claude Code's runtime (supervisor/sandboxes/claude_runtime.h) in a real sandbox of a
// busybox-only image (no glibc, no /lib64), with the two read-only binds corrald gives image
// sandboxes (SandboxHost::ClaudeBinds): the staged loader runs the host's binary there, the
// binary run directly does not, and nothing inside can write to the runtime.
#include "supervisor/sandboxes/claude_runtime.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/file_util.h"
#include "tests/root/root_test_util.h"

namespace corral::test {
namespace {

using ::testing::HasSubstr;
using supervisor::ClaudeLoaderArgv;
using supervisor::kClaudeBinaryInSandbox;
using supervisor::kClaudeRuntimeInSandbox;

class ClaudeRuntimeTest : public SandboxTest {
 protected:
  void SetUp() override {
    SandboxTest::SetUp();
    if (IsSkipped()) return;
    dir_ = TestStateDir() + "/claude-runtime-" + std::to_string(getpid());
    layer_ = dir_ + "/layer";
    runtime_ = dir_ + "/runtime";
    // The image: busybox and its sh, nothing else.
    ASSERT_TRUE(MakeDirs(layer_ + "/bin").ok());
    ASSERT_EQ(system(("cp /bin/busybox " + layer_ + "/bin/busybox").c_str()), 0);
    ASSERT_EQ(symlink("busybox", (layer_ + "/bin/sh").c_str()), 0);
    ASSERT_EQ(symlink("busybox", (layer_ + "/bin/id").c_str()), 0);
    ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
    echo_ = FindExecutable("echo", "/bin");  // its real path: binds take no symlink
    ASSERT_FALSE(echo_.empty());
  }
  void TearDown() override {
    if (!dir_.empty()) (void)RemoveTree(dir_);
    SandboxTest::TearDown();
  }

  // `corral run` of the image with the runtime's binds and `binary` at kClaudeBinaryInSandbox.
  CorralResult Run(const std::string& binary, const std::vector<std::string>& argv) {
    std::vector<std::string> args = {"run", "--layer", layer_,
                                     "--bind", runtime_ + ":" + kClaudeRuntimeInSandbox + ":ro",
                                     "--bind", binary + ":" + kClaudeBinaryInSandbox + ":ro", "--"};
    args.insert(args.end(), argv.begin(), argv.end());
    return RunCorral(args, 120);
  }
  std::vector<std::string> Loader(const std::vector<std::string>& args) {
    std::vector<std::string> argv = ClaudeLoaderArgv();
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  std::string dir_, layer_, runtime_, echo_;
};

TEST_F(ClaudeRuntimeTest, TheLoaderRunsAHostBinaryInABusyboxImageAndTheBinaryAloneDoesNot) {
  ASSERT_TRUE(supervisor::StageClaudeRuntime(echo_, runtime_).ok());
  CorralResult r = Run(echo_, Loader({"from-the-runtime"}));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.outcome.dump();
  EXPECT_EQ(r.out, "from-the-runtime\n");
  // Denial beside it: the image has no /lib64/ld-linux*, so the binary alone cannot start.
  CorralResult direct = Run(echo_, {kClaudeBinaryInSandbox, "direct"});
  EXPECT_NE(direct.exit_code, 0);
  EXPECT_EQ(direct.out, "");
  CorralResult bare = Run(echo_, {"/bin/sh", "-c", "ls /lib64 /usr 2>&1; echo done"});
  EXPECT_THAT(bare.out, HasSubstr("No such file"));
}

TEST_F(ClaudeRuntimeTest, TheRuntimeIsReadOnlyInside) {
  ASSERT_TRUE(supervisor::StageClaudeRuntime(echo_, runtime_).ok());
  const std::string script = std::string("touch /run/corral/claude/x 2>&1; echo \"a $?\"; ") +
                             "echo y > /run/corral/claude/lib/libc.so.6 2>&1; echo \"b $?\"; " +
                             "echo y > " + kClaudeBinaryInSandbox + " 2>&1; echo \"c $?\"; " +
                             "touch /tmp/x; echo \"control $?\"";
  CorralResult r = Run(echo_, {"/bin/sh", "-c", script});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.outcome.dump();
  EXPECT_THAT(r.out, HasSubstr("Read-only file system"));
  EXPECT_THAT(r.out, HasSubstr("a 1\n"));
  EXPECT_THAT(r.out, HasSubstr("b 1\n"));  // ash: a failed redirection is status 1
  EXPECT_THAT(r.out, HasSubstr("c 1\n"));
  EXPECT_THAT(r.out, HasSubstr("control 0\n"));
  EXPECT_EQ(access((runtime_ + "/x").c_str(), F_OK), -1);
}

TEST_F(ClaudeRuntimeTest, TheRuntimesStaticBashRunsInABusyboxImage) {
  auto runtime = supervisor::StageClaudeRuntime(echo_, runtime_);
  ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();
  if (!runtime->has_bash) GTEST_SKIP() << supervisor::kHostStaticBash << " is not installed (dist/install-deps.sh)";
  // Bash syntax that busybox's ash refuses (Claude Code's shell snapshot has arrays like it).
  const std::string script = "local_probe() { local -a a=(x y); echo \"${#a[@]} ${BASH_VERSION%%.*}\"; }; local_probe; id -u";
  CorralResult r = Run(echo_, {supervisor::kClaudeFallbackShell, "-c", "-l", script});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << r.outcome.dump();
  EXPECT_THAT(r.out, HasSubstr("2 5\n"));
  EXPECT_THAT(r.out, HasSubstr("1000\n"));  // busybox's id, the image's own tools
  // Control: the image's own sh is ash, which refuses it.
  CorralResult ash = Run(echo_, {"/bin/sh", "-c", script});
  EXPECT_NE(ash.exit_code, 0) << ash.out;
}

TEST_F(ClaudeRuntimeTest, ClaudeCodeRunsInABusyboxImageThroughTheLoader) {
  const char* path = getenv("PATH");
  const std::string claude = FindExecutable("claude", path ? path : "");
  if (claude.empty()) GTEST_SKIP() << "Claude Code is not installed (dist/install-deps.sh installs it)";
  ASSERT_TRUE(supervisor::StageClaudeRuntime(claude, runtime_).ok());
  CorralResult r = Run(claude, Loader({"--version"}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << r.outcome.dump();
  EXPECT_THAT(r.out, HasSubstr("(Claude Code)"));
}

}  // namespace
}  // namespace corral::test
