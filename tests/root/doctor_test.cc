// corral doctor's probes on the real kernel (supervisor/doctor.h): on this host every check
// passes; each FAIL (and WARN) path is forced for real, by running the check in a child whose
// seccomp filter makes the one syscall it tries fail as a kernel without the feature (ENOSYS) or
// a policy forbidding it (EPERM) would, with a filter on another syscall as the control; free
// space and inodes with small tmpfs mounts; cgroups with a directory that is no hierarchy.
#include "supervisor/doctor.h"

#include <gtest/gtest.h>
#include <seccomp.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <string>

namespace corral::supervisor {
namespace {

// Runs `check` in a child under a filter that answers `syscall_nr` with `error`.
CheckResult UnderFilter(int syscall_nr, int error, const std::function<CheckResult()>& check) {
  int out[2];
  if (pipe(out) != 0) return {"pipe", CheckLevel::kFail, "pipe"};
  pid_t pid = fork();
  if (pid == 0) {
    close(out[0]);
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (ctx == nullptr || seccomp_rule_add(ctx, SCMP_ACT_ERRNO(error), syscall_nr, 0) != 0 ||
        seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1) != 0 || seccomp_load(ctx) != 0) {
      _exit(120);
    }
    CheckResult result = check();
    std::string message = std::string(1, static_cast<char>('0' + static_cast<int>(result.level))) + result.detail;
    (void)!write(out[1], message.data(), message.size());
    _exit(0);
  }
  close(out[1]);
  std::string message;
  char buf[4096];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof(buf))) > 0) message.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || message.empty()) {
    return {"child", CheckLevel::kFail, "the child failed: status " + std::to_string(status)};
  }
  return {"", static_cast<CheckLevel>(message[0] - '0'), message.substr(1)};
}

class DoctorRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: the probes create namespaces, mounts and cgroups";
    // /var/tmp: a real local file system on the host and in the cgroup v2 guest (the images probe
    // needs one that takes idmapped mounts).
    char tmpl[] = "/var/tmp/corral-doctor-root-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    options_.state_dir = dir_;
    options_.cgroup_parent = "corral/doctor-test-" + std::to_string(getpid());
  }
  void TearDown() override {
    if (dir_.empty()) return;
    (void)umount2(dir_.c_str(), MNT_DETACH);
    rmdir(dir_.c_str());
    for (const char* c : {"memory", "cpu", "cpuacct", "pids", "freezer", ""}) {
      rmdir(("/sys/fs/cgroup/" + std::string(c) + (*c ? "/" : "") + options_.cgroup_parent).c_str());
    }
  }

  // A tmpfs on the state directory.
  void SmallStateDir(const std::string& mount_options) {
    ASSERT_EQ(mount("tmpfs", dir_.c_str(), "tmpfs", 0, mount_options.c_str()), 0) << strerror(errno);
  }

  std::string dir_;
  DoctorOptions options_;
};

TEST_F(DoctorRootTest, ThisHostPassesEveryCheck) {
  options_.claude = "/bin/true";  // the agent's binary is checked apart (unit tests)
  for (const CheckResult& r : RunDoctor(options_)) {
    if (r.name == "claude_code") continue;
    EXPECT_NE(r.level, CheckLevel::kFail) << r.name << ": " << r.detail;
    if (r.name != "kernel" && r.name != "landlock" && r.name != "state_dir") {
      EXPECT_EQ(r.level, CheckLevel::kOk) << r.name << ": " << r.detail;
    }
  }
}

TEST_F(DoctorRootTest, MissingSyscallsFail) {
  struct Case {
    int nr;
    int error;
    std::function<CheckResult()> check;
    CheckLevel expected;
    const char* says;
  };
  const DoctorOptions options = options_;
  Case cases[] = {
      {SCMP_SYS(openat2), ENOSYS, CheckOpenat2, CheckLevel::kFail, "openat2: ENOSYS"},
      {SCMP_SYS(pidfd_open), ENOSYS, CheckPidfdAndClone3, CheckLevel::kFail, "pidfd_open: ENOSYS"},
      {SCMP_SYS(clone3), ENOSYS, CheckPidfdAndClone3, CheckLevel::kFail, "clone3: ENOSYS"},
      {SCMP_SYS(seccomp), ENOSYS, CheckSeccomp, CheckLevel::kFail, "actions unavailable"},
      {SCMP_SYS(landlock_create_ruleset), ENOSYS, CheckLandlock, CheckLevel::kWarn, "unavailable (ENOSYS"},
      {SCMP_SYS(landlock_create_ruleset), EOPNOTSUPP, CheckLandlock, CheckLevel::kWarn, "lsm= boot parameter"},
      {SCMP_SYS(unshare), EPERM, [options] { return CheckUserNamespaces(options); }, CheckLevel::kFail,
       "unshare(CLONE_NEWUSER): EPERM"},
      {SCMP_SYS(unshare), EPERM, [options] { return CheckNetworkNamespaces(options); }, CheckLevel::kFail, "EPERM"},
      {SCMP_SYS(mount), EPERM, [options] { return CheckOverlayfs(options); }, CheckLevel::kFail,
       "mounting an overlay: EPERM"},
      // Images need idmapped binds; without them the host image still works: a warning.
      {SCMP_SYS(mount_setattr), EPERM, [options] { return CheckImages(options); }, CheckLevel::kWarn,
       "MOUNT_ATTR_IDMAP"},
  };
  for (const Case& c : cases) {
    CheckResult forced = UnderFilter(c.nr, c.error, c.check);
    EXPECT_EQ(forced.level, c.expected) << c.says << ": " << forced.detail;
    EXPECT_NE(forced.detail.find(c.says), std::string::npos) << forced.detail;
    // Control: the same check in the same kind of child, the filter on a syscall it never makes.
    CheckResult control = UnderFilter(SCMP_SYS(acct), EPERM, c.check);
    EXPECT_EQ(control.level, CheckLevel::kOk) << c.says << " (control): " << control.detail;
  }
}

TEST_F(DoctorRootTest, LittleSpaceFailsSomeWarns) {
  SmallStateDir("size=64m");
  CheckResult tiny = CheckStateDir(dir_);
  EXPECT_EQ(tiny.level, CheckLevel::kFail) << tiny.detail;
  EXPECT_NE(tiny.detail.find("64 MiB free"), std::string::npos) << tiny.detail;
  ASSERT_EQ(umount2(dir_.c_str(), MNT_DETACH), 0);
  SmallStateDir("size=1g");  // tmpfs pages are used only when written
  CheckResult some = CheckStateDir(dir_);
  EXPECT_EQ(some.level, CheckLevel::kWarn) << some.detail;
  ASSERT_EQ(umount2(dir_.c_str(), MNT_DETACH), 0);
  SmallStateDir("size=8g,nr_inodes=500");
  CheckResult few = CheckStateDir(dir_);
  EXPECT_EQ(few.level, CheckLevel::kFail) << few.detail;
  EXPECT_NE(few.detail.find("inodes free"), std::string::npos);
  ASSERT_EQ(umount2(dir_.c_str(), MNT_DETACH), 0);
  SmallStateDir("size=8g,nr_inodes=1000000");  // control
  EXPECT_EQ(CheckStateDir(dir_).level, CheckLevel::kOk);
}

TEST_F(DoctorRootTest, NoHierarchyFailsTheRealOneIsWritable) {
  options_.cgroup_mount = dir_;  // an empty directory: no cgroup file system
  CheckResult none = CheckCgroups(options_);
  EXPECT_EQ(none.level, CheckLevel::kFail);
  // Not a cgroup file system, or (a tmpfs, which is how v1 hierarchies are laid out) one
  // without the controllers: either way the check says so.
  EXPECT_TRUE(none.detail.find("no usable cgroup hierarchy") != std::string::npos ||
              none.detail.find("without the cpu, cpuacct, memory, pids, freezer controller(s)") != std::string::npos)
      << none.detail;
  options_.cgroup_mount = "/sys/fs/cgroup";
  CheckResult real = CheckCgroups(options_);
  EXPECT_EQ(real.level, CheckLevel::kOk) << real.detail;
}

}  // namespace
}  // namespace corral::supervisor
