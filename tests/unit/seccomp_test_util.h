// Shared helpers of the seccomp tests (seccomp_policy_test, seccomp_bpf_test,
// seccomp_filter_test): running probes in forked children under the compiled filter, and the
// policy's tables as name sets.
//
// Behavioural tests need no privileges: each probe runs in a forked child that sets
// no_new_privs, loads the compiled program with seccomp(2) and reports the probe's errno through
// a pipe. Arguments are chosen so that a probe is harmless even if the filter failed to stop it
// and the test runs as root (nonexistent paths, bad fds, invalid flags).
#pragma once

#include "isolation/seccomp_policy.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timex.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

extern char** environ;

namespace corral::isolation {

// ---------------------------------------------------------------------------------------------
// Running probes in children.

// Results that are not errnos.
constexpr int kChildDied = -1;         // killed by a signal or exited without reporting
constexpr int kFilterLoadFailed = -2;  // prctl or seccomp failed in the child
constexpr int kNoPty = -3;             // the probe found no pseudo-terminal to use

inline std::string Describe(int result) {
  if (result == 0) return "success";
  if (result == kChildDied) return "child died";
  if (result == kFilterLoadFailed) return "filter load failed";
  if (result == kNoPty) return "no pty";
  return ErrnoName(result);
}

// 0 on success, else errno.
inline int ErrnoOf(long rc) { return rc < 0 ? errno : 0; }

// For syscalls returning an fd: closes it and reports success.
inline int FdResult(long fd) {
  if (fd < 0) return errno;
  close(static_cast<int>(fd));
  return 0;
}

inline const SeccompProgram* g_program = nullptr;

// Runs `probe` in a forked child, under the compiled filter when `filtered`. Returns the
// probe's result (0 or an errno), or kChildDied / kFilterLoadFailed.
inline int RunInChild(const std::function<int()>& probe, bool filtered = true) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return kChildDied;
  const pid_t pid = fork();
  if (pid < 0) return kChildDied;
  if (pid == 0) {
    close(fds[0]);
    int result = kFilterLoadFailed;
    if (filtered) {
      const sock_fprog fprog = g_program->fprog();
      if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
          syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog) != 0) {
        (void)!write(fds[1], &result, sizeof result);
        _exit(1);
      }
    }
    result = probe();
    (void)!write(fds[1], &result, sizeof result);
    _exit(0);
  }
  close(fds[1]);
  int result = kChildDied;
  ssize_t n;
  do {
    n = read(fds[0], &result, sizeof result);
  } while (n < 0 && errno == EINTR);
  if (n != sizeof result) result = kChildDied;
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status)) return kChildDied;
  return result;
}

// Waits for `pid` and returns 0 if it exited with `code`, else EIO.
inline int ExpectExit(pid_t pid, int code) {
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return errno;
  return WIFEXITED(status) && WEXITSTATUS(status) == code ? 0 : EIO;
}

// Raw clone(2) with fork semantics: the child exits at once.
inline int CloneWithFlags(unsigned long flags) {
  const long pid = syscall(SYS_clone, flags, 0, 0, 0, 0);
  if (pid == 0) _exit(0);
  if (pid < 0) return errno;
  waitpid(static_cast<pid_t>(pid), nullptr, __WALL);
  return 0;
}

// Runs argv[0] (found in PATH) with posix_spawnp inside the filtered child; 0 if it exits 0.
inline int SpawnAndWait(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  if (rc != 0) return rc;
  return ExpectExit(pid, 0);
}

class SeccompPolicyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (g_program != nullptr) return;  // shared by the suites deriving from this one
    auto compiled = CompileSeccompPolicy();
    ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
    g_program = new SeccompProgram(std::move(compiled).value());
  }
  void SetUp() override {
    ASSERT_NE(g_program, nullptr) << "the policy did not compile (see SetUpTestSuite)";
  }
};

// ---------------------------------------------------------------------------------------------
// The tables.

inline std::set<std::string> AllowedNames() {
  std::set<std::string> names;
  for (const SyscallGroup& group : AllowedSyscallGroups()) {
    names.insert(group.syscalls.begin(), group.syscalls.end());
  }
  return names;
}

inline std::set<std::string> DeniedNames() {
  std::set<std::string> names;
  for (const DeniedSyscall& denied : DeniedSyscalls()) names.insert(denied.name);
  return names;
}

inline std::set<std::string> FilteredNames() {
  std::set<std::string> names;
  for (const FilteredSyscall& filtered : ArgumentFilteredSyscalls()) names.insert(filtered.name);
  return names;
}

// Whether libseccomp knows `name` on some filtered architecture (muxed pseudo-numbers count on
// x86, which has socketcall and ipc).
inline bool ResolvesSomewhere(const std::string& name) {
  for (uint32_t arch : FilteredArchitectures()) {
    const int nr = seccomp_syscall_resolve_name_arch(arch, name.c_str());
    if (nr >= 0) return true;
    if (arch == SCMP_ARCH_X86 && nr != __NR_SCMP_ERROR && nr > -10000) return true;
  }
  return false;
}

}  // namespace corral::isolation
