// Claude Code's runtime for image sandboxes (supervisor/sandboxes/claude_runtime.h): the ELF
// reading, the staged directory, and the staged loader running real host binaries from it.
#include "common/file_util.h"
#include "supervisor/sandboxes/claude_runtime.h"

#include <fcntl.h>

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include <gtest/gtest.h>

#include "common/unique_fd.h"
#include "supervisor/sessions/image_agent.h"
#include "tests/testing/temp_dir.h"

namespace corral::supervisor {
namespace {

// Runs `command` (sh -c) and returns its stdout, with its exit status in `status`.
std::string Output(const std::string& command, int* status) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  *status = pclose(pipe);
  return out;
}

std::string StagedCommand(const std::string& dir, const std::string& binary, const std::string& args) {
  return dir + "/ld.so --inhibit-cache --library-path " + dir + "/lib " + binary + " " + args + " 2>&1";
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 ? st.st_mode : 0;
}

TEST(ClaudeRuntime, ReadsTheInterpreterAndNeededLibrariesOfAHostExecutable) {
  auto needs = ReadElfNeeds("/bin/true");
  ASSERT_TRUE(needs.ok()) << needs.status().ToString();
  EXPECT_EQ(needs->interpreter[0], '/');
  EXPECT_EQ(access(needs->interpreter.c_str(), X_OK), 0) << needs->interpreter;
  EXPECT_NE(std::find(needs->needed.begin(), needs->needed.end(), "libc.so.6"), needs->needed.end());
}

TEST(ClaudeRuntime, RefusesWhatIsNotA64BitElfFile) {
  test::TempDir tmp("claude-runtime");
  tmp.Put("text", "#!/bin/sh\necho not elf\n");
  auto text = ReadElfNeeds(tmp.Join("text"));
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().error_number(), EINVAL);
  // The first 100 bytes of a real one: the program headers are cut off.
  int status = 0;
  Output("head -c 100 /bin/true > " + tmp.Join("cut"), &status);
  auto cut = ReadElfNeeds(tmp.Join("cut"));
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("truncated"), std::string::npos) << cut.status().ToString();
  EXPECT_FALSE(ReadElfNeeds(tmp.Join("missing")).ok());
}

TEST(ClaudeRuntime, StagesTheLoaderAndLibrariesThatRunAHostBinary) {
  test::TempDir tmp("claude-runtime");
  const std::string dir = tmp.Join("runtime");
  auto runtime = StageClaudeRuntime("/bin/echo", dir);
  ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();
  EXPECT_EQ(runtime->dir, dir);
  EXPECT_EQ(runtime->binary, "/bin/echo");
  EXPECT_EQ(ModeOf(dir) & 07777, 0755u);
  EXPECT_EQ(ModeOf(dir + "/lib") & 07777, 0755u);
  EXPECT_EQ(ModeOf(dir + "/ld.so") & 07777, 0755u);
  EXPECT_EQ(ModeOf(dir + "/lib/libc.so.6") & 07777, 0644u);
  EXPECT_EQ(runtime->has_bash, access(kHostStaticBash, X_OK) == 0);
  // The binary itself is not copied.
  EXPECT_NE(access((dir + "/echo").c_str(), F_OK), 0);
  int status = -1;
  EXPECT_EQ(Output(StagedCommand(dir, "/bin/echo", "staged-ok"), &status), "staged-ok\n");
  EXPECT_EQ(status, 0);
  // Staged again over itself (a daemon restart): the same, still runs.
  ASSERT_TRUE(StageClaudeRuntime("/bin/echo", dir).ok());
  EXPECT_EQ(Output(StagedCommand(dir, "/bin/echo", "again"), &status), "again\n");
  EXPECT_EQ(access((dir + "/ld.so.new").c_str(), F_OK), -1);
}

TEST(ClaudeRuntime, ALibraryNotFoundStagesNothing) {
  test::TempDir tmp("claude-runtime");
  ASSERT_EQ(mkdir(tmp.Join("nolibs").c_str(), 0755), 0);
  auto runtime = StageClaudeRuntime("/bin/echo", tmp.Join("runtime"), "", {tmp.Join("nolibs")});
  ASSERT_FALSE(runtime.ok());
  EXPECT_EQ(runtime.status().error_number(), ENOENT);
  EXPECT_NE(runtime.status().message().find("libc.so.6"), std::string::npos) << runtime.status().ToString();
  EXPECT_NE(access(tmp.Join("runtime").c_str(), F_OK), 0);
  // Positive control: the host's directories have it.
  EXPECT_TRUE(StageClaudeRuntime("/bin/echo", tmp.Join("runtime")).ok());
}

TEST(ClaudeRuntime, CarriesTheHostsStaticBashOnlyWhenThereIsOne) {
  test::TempDir tmp("claude-runtime");
  auto none = StageClaudeRuntime("/bin/echo", tmp.Join("none"), "");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_bash);
  EXPECT_NE(access(tmp.Join("none/bash").c_str(), F_OK), 0);
  // A dynamic executable is not what images without libraries can run.
  auto dynamic = StageClaudeRuntime("/bin/echo", tmp.Join("dynamic"), "/bin/echo");
  ASSERT_FALSE(dynamic.ok());
  EXPECT_EQ(dynamic.status().error_number(), EINVAL);
  if (access(kHostStaticBash, X_OK) != 0) GTEST_SKIP() << kHostStaticBash << " is not installed (dist/install-deps.sh)";
  auto with = StageClaudeRuntime("/bin/echo", tmp.Join("with"));
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  EXPECT_TRUE(with->has_bash);
  EXPECT_EQ(ModeOf(tmp.Join("with/bash")) & 07777, 0755u);
  int status = -1;
  EXPECT_EQ(Output(tmp.Join("with/bash") + " -c 'echo ${BASH_VERSION%%.*}'", &status).empty(), false);
  EXPECT_EQ(status, 0);
  // Staged again without it (the host's was removed): the old copy goes.
  ASSERT_TRUE(StageClaudeRuntime("/bin/echo", tmp.Join("with"), "").ok());
  EXPECT_NE(access(tmp.Join("with/bash").c_str(), F_OK), 0);
}

TEST(ClaudeRuntime, StagesCorralClaudeAsClaudeAndAsTheAgentsShellOnlyWhenStatic) {
  test::TempDir tmp("claude-runtime");
  ASSERT_TRUE(StageClaudeRuntime("/bin/echo", tmp.Join("runtime"), "").ok());
  // A dynamic executable could not run in an image without the host's libraries: refused, and
  // nothing is placed.
  Status dynamic = StageClaudeExec(tmp.Join("runtime"), "/bin/echo");
  ASSERT_FALSE(dynamic.ok());
  EXPECT_EQ(dynamic.error_number(), EINVAL);
  EXPECT_NE(access(tmp.Join("runtime/claude").c_str(), F_OK), 0);
  EXPECT_NE(access(tmp.Join("runtime/shell/bash").c_str(), F_OK), 0);
  // The control: the real corral-claude, twice, 0755 (read and run by the sandbox's users).
  Status staged = StageClaudeExec(tmp.Join("runtime"), CORRAL_CLAUDE_EXEC_PATH);
  ASSERT_TRUE(staged.ok()) << staged.ToString();
  auto original = ReadFileToString(CORRAL_CLAUDE_EXEC_PATH);
  ASSERT_TRUE(original.ok());
  for (const char* name : {"runtime/claude", "runtime/shell/bash"}) {
    EXPECT_EQ(ModeOf(tmp.Join(name)) & 07777, 0755u) << name;
    auto copy = ReadFileToString(tmp.Join(name));
    ASSERT_TRUE(copy.ok()) << name;
    EXPECT_TRUE(*copy == *original) << name;
  }
  EXPECT_EQ(ModeOf(tmp.Join("runtime/shell")) & 07777, 0755u);
  // Outside a sandbox there is no /run/corral/claude/ld.so: it says so and fails as a shell
  // fails to find a program (127), rather than running anything else.
  if (access(kClaudeLoaderInSandbox, F_OK) == 0) GTEST_SKIP() << kClaudeLoaderInSandbox << " exists on this host";
  int status = -1;
  const std::string said = Output(tmp.Join("runtime/claude") + " --version 2>&1", &status);
  EXPECT_EQ(WEXITSTATUS(status), 127) << said;
  EXPECT_NE(said.find(std::string("corral-claude: ") + kClaudeLoaderInSandbox), std::string::npos) << said;
}

TEST(ClaudeRuntime, TheStagedLoaderRunsTheHostsClaudeCode) {
  const char* path = getenv("PATH");
  const std::string claude = FindExecutable("claude", path ? path : "");
  if (claude.empty()) GTEST_SKIP() << "Claude Code is not installed (dist/install-deps.sh installs it)";
  EXPECT_EQ(claude[0], '/');
  char* real = realpath(claude.c_str(), nullptr);
  ASSERT_NE(real, nullptr);
  EXPECT_EQ(claude, real);  // a real path: binds go through no symlink
  free(real);
  test::TempDir tmp("claude-runtime");
  auto runtime = StageClaudeRuntime(claude, tmp.Join("runtime"));
  ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();
  int status = -1;
  const std::string version = Output(StagedCommand(runtime->dir, claude, "--version"), &status);
  EXPECT_EQ(status, 0) << version;
  EXPECT_NE(version.find("(Claude Code)"), std::string::npos) << version;
}

TEST(ClaudeRuntime, FindsExecutablesInAPathList) {
  char* sh = realpath("/bin/sh", nullptr);
  ASSERT_NE(sh, nullptr);
  EXPECT_EQ(FindExecutable("sh", "relative/dir::/nonexistent:/bin"), sh);
  EXPECT_EQ(FindExecutable("/bin/sh", ""), sh);
  free(sh);
  EXPECT_EQ(FindExecutable("corral-no-such-program", "/bin:/usr/bin"), "");
  EXPECT_EQ(FindExecutable("sh", "relative/bin"), "");
  EXPECT_EQ(FindExecutable("", "/bin"), "");
}

TEST(ClaudeRuntime, TellsWhereClaudeCodesArgumentsStart) {
  EXPECT_EQ(ClaudeArgsStart({"claude", "-p", "--input-format"}), 1u);
  std::vector<std::string> image = ClaudeLoaderArgv();
  ASSERT_EQ(image.back(), kClaudeBinaryInSandbox);
  EXPECT_EQ(image.front(), std::string(kClaudeRuntimeInSandbox) + "/ld.so");
  image.insert(image.end(), {"-p", "--input-format"});
  EXPECT_EQ(ClaudeArgsStart(image), ClaudeLoaderArgv().size());
  EXPECT_EQ(ClaudeArgsStart({"bash", "-c", "claude"}), 0u);
  EXPECT_EQ(ClaudeArgsStart({std::string(kClaudeRuntimeInSandbox) + "/ld.so", "/bin/sh"}), 0u);
  EXPECT_EQ(ClaudeArgsStart({}), 0u);
}

// Whether an image sandbox needs the runtime's bash: its root is looked at, never the host's.
TEST(ClaudeRuntime, FindsABashOrZshInsideTheSandboxsRootOnly) {
  test::TempDir tmp("claude-runtime");
  auto has = [&](const std::string& root) {
    UniqueFd fd(open(tmp.Join(root).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    return fd && HasAgentShell(fd.get());
  };
  // Debian's merged /usr: bin -> usr/bin, a real usr/bin/bash.
  tmp.Put("debian/usr/bin/bash", "");
  ASSERT_EQ(chmod(tmp.Join("debian/usr/bin/bash").c_str(), 0755), 0);
  ASSERT_EQ(symlink("usr/bin", tmp.Join("debian/bin").c_str()), 0);
  EXPECT_TRUE(has("debian"));
  tmp.Put("zsh/usr/local/bin/zsh", "");
  ASSERT_EQ(chmod(tmp.Join("zsh/usr/local/bin/zsh").c_str(), 0755), 0);
  EXPECT_TRUE(has("zsh"));
  // busybox: only sh.
  tmp.Put("busybox/bin/busybox", "");
  ASSERT_EQ(symlink("busybox", tmp.Join("busybox/bin/sh").c_str()), 0);
  EXPECT_FALSE(has("busybox"));
  // Not executable: no shell.
  tmp.Put("noexec/bin/bash", "");
  EXPECT_FALSE(has("noexec"));
  // An absolute link resolves inside the root, where /usr/bin/bash is not: the host's is not seen.
  ASSERT_EQ(access("/usr/bin/bash", X_OK), 0);
  ASSERT_EQ(mkdir(tmp.Join("escape").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(tmp.Join("escape/bin").c_str(), 0755), 0);
  ASSERT_EQ(symlink("/usr/bin/bash", tmp.Join("escape/bin/bash").c_str()), 0);
  EXPECT_FALSE(has("escape"));
}

}  // namespace
}  // namespace corral::supervisor
