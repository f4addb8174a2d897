// What a program in a `corral run` sandbox sees of itself, on the real kernel: its own stdio,
// reopenable by path (issue 16 §5); its own cgroup at /sys/fs/cgroup, read-only, and nothing
// else of the hierarchy; and CPUs that follow its CPU limit (nproc, os.cpu_count(), Node).
// The daemon's commands: tests/root/sandbox_host_test.cc.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>

#include "cgroups/cgroup_backend.h"
#include "common/file_util.h"
#include "isolation/cpu_affinity.h"
#include "tests/root/root_test_util.h"

namespace corral::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class SandboxViewTest : public SandboxTest {
 protected:
  void SetUp() override {
    SandboxTest::SetUp();
    if (IsSkipped()) return;
    auto backend = cgroups::DetectBackend();
    ASSERT_TRUE(backend.ok());
    v2_ = (*backend)->version() == cgroups::CgroupVersion::kV2;
    auto cpus = isolation::AllowedCpus();
    ASSERT_TRUE(cpus.ok());
    host_cpus_ = cpus->size();
  }
  // The file a limit is read from inside, as runc lays out each cgroup version.
  std::string MemoryMax() const { return v2_ ? "/sys/fs/cgroup/memory.max" : "/sys/fs/cgroup/memory/memory.limit_in_bytes"; }
  std::string PidsMax() const { return v2_ ? "/sys/fs/cgroup/pids.max" : "/sys/fs/cgroup/pids/pids.max"; }
  std::string CpuQuota() const { return v2_ ? "/sys/fs/cgroup/cpu.max" : "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"; }

  bool v2_ = false;
  size_t host_cpus_ = 0;
};

// Every way a program names its own stdio: /dev/std*, /dev/fd/N, /proc/self/fd/N; sh, tee and
// Python's open(). RunCorral's stdout and stderr are pipes the test (host root) made.
constexpr char kReopen[] =
    "echo out >/dev/stdout && echo err >/dev/stderr && echo fd1 >/proc/self/fd/1 && "
    "echo fd2 >/dev/fd/2 && echo tee | tee /dev/stderr && "
    "python3 -c 'open(\"/dev/stdout\", \"w\").write(\"py\\n\")' && stat -L -c owner=%u /dev/stdout";

TEST_F(SandboxViewTest, TheCommandReopensItsStdioPipesByPathAsAgentAndAsRoot) {
  for (const char* user : {"agent", "root"}) {
    CorralResult r = RunCorral({"run", "--user", user, "--", "sh", "-c", kReopen});
    EXPECT_EQ(r.exit_code, 0) << user << ": " << r.err;
    EXPECT_EQ(r.out, std::string("out\nfd1\ntee\npy\nowner=") + (std::string(user) == "root" ? "0" : "1000") + "\n")
        << user;
    EXPECT_EQ(r.err, "err\nfd2\ntee\n") << user;
  }
}

// The pipes are lent for the run only: owner and mode come back. A file (here the command's
// stdin, a host file of root's, 0600) is not lent: it stays the caller's, and opening it by path
// inside is refused while its fd works.
TEST_F(SandboxViewTest, PipesAreLentForTheRunOnlyAndFilesNeverAre) {
  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  char path[] = "/tmp/corral-view-in-XXXXXX";
  int in = mkstemp(path);
  ASSERT_GE(in, 0);
  unlink(path);
  ASSERT_EQ(write(in, "line\n", 5), 5);
  lseek(in, 0, SEEK_SET);
  // Named here, in the test's process: they hold its pid (a child's would name dirs that the
  // suite's teardown never removes).
  const std::string run_dir = "CORRAL_RUN_DIR=" + TestRunDir(), state_dir = "CORRAL_STATE_DIR=" + TestStateDir(),
                    parent = "CORRAL_CGROUP_PARENT=" + TestCgroupParent();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in, 0);
    dup2(out[1], 1);
    dup2(out[1], 2);
    const char* env[] = {run_dir.c_str(), state_dir.c_str(), parent.c_str(), "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                         nullptr};
    execle(CorralBinary().c_str(), "corral", "run", "--", "sh", "-c",
           "read l; echo fd:$l; cat /dev/stdin || echo refused; stat -L -c %u:%a /dev/stdout; chmod 666 /dev/stdout",
           static_cast<char*>(nullptr), env);
    _exit(127);
  }
  close(out[1]);
  close(in);
  std::string text;
  char buf[512];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_THAT(text, HasSubstr("fd:line\n"));  // control: the fd itself works
  EXPECT_THAT(text, HasSubstr("Permission denied"));
  EXPECT_THAT(text, HasSubstr("refused\n"));
  EXPECT_THAT(text, HasSubstr("1000:600\n"));  // lent to agent, owner only
  // Given back: root's again, and the mode the sandbox changed is undone.
  struct stat st;
  ASSERT_EQ(fstat(out[0], &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  close(out[0]);
}

TEST_F(SandboxViewTest, TheSandboxSeesItsOwnLimitsAtSysFsCgroup) {
  CorralResult r = RunCorral({"run", "--memory", "96M", "--pids", "77", "--cpus", "0.5", "--", "sh", "-c",
                              "cat " + MemoryMax() + " " + PidsMax() + " " + CpuQuota() + "; cat /proc/self/cgroup"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr(std::to_string(96 << 20) + "\n77\n" + (v2_ ? "50000 100000\n" : "50000\n")));
  // The cgroup namespace is rooted at the sandbox's cgroup: the program is at its root, where
  // /sys/fs/cgroup shows it.
  EXPECT_THAT(r.out, HasSubstr(v2_ ? "0::/\n" : ":memory:/\n"));
  EXPECT_THAT(r.out, Not(HasSubstr(TestCgroupParent())));
  // Control: another sandbox at the same time with other limits sees its own.
  CorralResult other = RunCorral({"run", "--memory", "80M", "--", "cat", MemoryMax()});
  EXPECT_EQ(other.out, std::to_string(80 << 20) + "\n") << other.err;
}

TEST_F(SandboxViewTest, TheCgroupViewIsReadOnlyEvenForRootInside) {
  const std::string script = "for f in " + MemoryMax() + " " + PidsMax() +
                             "; do echo 1 > $f || echo refused; done; mkdir /sys/fs/cgroup/x || echo no-mkdir; "
                             "cat " + MemoryMax();
  for (const char* user : {"agent", "root"}) {
    CorralResult r = RunCorral({"run", "--user", user, "--memory", "96M", "--pids", "50", "--", "sh", "-c", script});
    EXPECT_THAT(r.err, HasSubstr("Read-only file system")) << user;
    EXPECT_THAT(r.out, HasSubstr("refused\nrefused\nno-mkdir\n")) << user;
    // Control: reading works, and the limit is what it was.
    EXPECT_THAT(r.out, HasSubstr(std::to_string(96 << 20) + "\n")) << user;
  }
}

// Only the sandbox's own subtree: no other sandbox's cgroup, no parent, no host cgroup; and the
// mount does not say where on the host it comes from.
TEST_F(SandboxViewTest, NothingAboveTheSandboxsCgroupIsInTheView) {
  pid_t neighbour = StartCorral({"run", "--memory", "80M", "--", "sleep", "30"});
  ASSERT_TRUE(WaitFor([] { return !SandboxCgroups().empty(); }, 10));
  CorralResult r = RunCorral({"run", "--", "sh", "-c",
                              "find /sys/fs/cgroup -mindepth 1 -type d | wc -l; ls /sys/fs/cgroup/..; "
                              "grep -c ' /sys/fs/cgroup' /proc/self/mountinfo; "
                              "awk '$5 ~ \"^/sys/fs/cgroup\" {print $4}' /proc/self/mountinfo | sort -u"});
  kill(neighbour, SIGTERM);
  int status;
  waitpid(neighbour, &status, 0);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("run-")));
  EXPECT_THAT(r.out, Not(HasSubstr("corral")));
  // v2: no directory below the sandbox's own (the run has no children); v1: the controllers'.
  EXPECT_THAT(r.out, ::testing::StartsWith(v2_ ? "0\n" : "5\n"));
  // /sys/fs/cgroup/.. is sysfs's /sys/fs, not the hierarchy.
  EXPECT_THAT(r.out, HasSubstr("cgroup\n"));
  // Every cgroup mount's root, as the sandbox reads it, is "/"; on v1 the room that holds the
  // controllers' mountpoints is a directory of the sandbox's own scratch tmpfs, "/cgroup" there.
  EXPECT_THAT(r.out, ::testing::EndsWith(v2_ ? "\n/\n" : "\n/\n/cgroup\n"));
}

TEST_F(SandboxViewTest, NprocAndCpuCountFollowTheCpuLimit) {
  if (host_cpus_ < 2) GTEST_SKIP() << "one CPU here: a limit cannot show below the host's count";
  const std::string count = "nproc; python3 -c 'import os; print(os.cpu_count(), len(os.sched_getaffinity(0)))'";
  CorralResult limited = RunCorral({"run", "--cpus", "0.5", "--", "sh", "-c", count});
  EXPECT_EQ(limited.out, "1\n1 1\n") << limited.err;
  CorralResult one = RunCorral({"run", "--cpus", "1", "--", "sh", "-c", count});
  EXPECT_EQ(one.out, "1\n1 1\n") << one.err;
  // Control: no limit, or one that covers every CPU, pins nothing.
  const std::string all = std::to_string(host_cpus_);
  CorralResult free = RunCorral({"run", "--", "sh", "-c", count});
  EXPECT_EQ(free.out, all + "\n" + all + " " + all + "\n") << free.err;
  CorralResult wide = RunCorral({"run", "--cpus", std::to_string(host_cpus_), "--", "sh", "-c", count});
  EXPECT_EQ(wide.out, all + "\n" + all + " " + all + "\n") << wide.err;
}

// Node sizes its heap and its thread pool from these (libuv: /proc/self/cgroup, then the files
// under /sys/fs/cgroup; sched_getaffinity).
TEST_F(SandboxViewTest, NodeReportsTheSandboxsMemoryAndCpus) {
  if (access("/usr/bin/node", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/node on this host";
  const std::string script =
      "console.log(process.constrainedMemory(), require('os').availableParallelism())";
  CorralResult r = RunCorral({"run", "--memory", "256M", "--cpus", "1", "--", "node", "-e", script});
  EXPECT_EQ(r.out, std::to_string(256 << 20) + " 1\n") << r.err;
  // Control: without limits Node sees no constraint and every CPU.
  CorralResult free = RunCorral({"run", "--", "node", "-e", script});
  EXPECT_THAT(free.out, Not(HasSubstr(std::to_string(256 << 20))));
  EXPECT_THAT(free.out, ::testing::EndsWith(" " + std::to_string(host_cpus_) + "\n")) << free.err;
}

}  // namespace
}  // namespace corral::test
