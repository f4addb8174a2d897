// Tests of the seccomp policy: its tables, the compiled program, and the filter's behaviour.
//
// Behavioural tests need no privileges: each probe runs in a forked child that sets
// no_new_privs, loads the compiled program with seccomp(2) and reports the probe's errno through
// a pipe. Arguments are chosen so that a probe is harmless even if the filter failed to stop it
// and the test runs as root (nonexistent paths, bad fds, invalid flags).
//
// Beside most denials runs a control: the same probe without the filter, where the kernel's
// own answer is known not to be the filter's (ENOENT for a missing mount point, EBADF for fd
// -1, ...), so the test shows that the refusal comes from the filter and not from missing
// privileges.
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
namespace {

// ---------------------------------------------------------------------------------------------
// Running probes in children.

// Results that are not errnos.
constexpr int kChildDied = -1;         // killed by a signal or exited without reporting
constexpr int kFilterLoadFailed = -2;  // prctl or seccomp failed in the child
constexpr int kNoPty = -3;             // the probe found no pseudo-terminal to use

std::string Describe(int result) {
  if (result == 0) return "success";
  if (result == kChildDied) return "child died";
  if (result == kFilterLoadFailed) return "filter load failed";
  if (result == kNoPty) return "no pty";
  return ErrnoName(result);
}

// 0 on success, else errno.
int ErrnoOf(long rc) { return rc < 0 ? errno : 0; }

// For syscalls returning an fd: closes it and reports success.
int FdResult(long fd) {
  if (fd < 0) return errno;
  close(static_cast<int>(fd));
  return 0;
}

const SeccompProgram* g_program = nullptr;

// Runs `probe` in a forked child, under the compiled filter when `filtered`. Returns the
// probe's result (0 or an errno), or kChildDied / kFilterLoadFailed.
int RunInChild(const std::function<int()>& probe, bool filtered = true) {
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
int ExpectExit(pid_t pid, int code) {
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return errno;
  return WIFEXITED(status) && WEXITSTATUS(status) == code ? 0 : EIO;
}

// Raw clone(2) with fork semantics: the child exits at once.
int CloneWithFlags(unsigned long flags) {
  const long pid = syscall(SYS_clone, flags, 0, 0, 0, 0);
  if (pid == 0) _exit(0);
  if (pid < 0) return errno;
  waitpid(static_cast<pid_t>(pid), nullptr, __WALL);
  return 0;
}

// Runs argv[0] (found in PATH) with posix_spawnp inside the filtered child; 0 if it exits 0.
int SpawnAndWait(std::vector<std::string> args) {
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

std::set<std::string> AllowedNames() {
  std::set<std::string> names;
  for (const SyscallGroup& group : AllowedSyscallGroups()) {
    names.insert(group.syscalls.begin(), group.syscalls.end());
  }
  return names;
}

std::set<std::string> DeniedNames() {
  std::set<std::string> names;
  for (const DeniedSyscall& denied : DeniedSyscalls()) names.insert(denied.name);
  return names;
}

std::set<std::string> FilteredNames() {
  std::set<std::string> names;
  for (const FilteredSyscall& filtered : ArgumentFilteredSyscalls()) names.insert(filtered.name);
  return names;
}

// Whether libseccomp knows `name` on some filtered architecture (muxed pseudo-numbers count on
// x86, which has socketcall and ipc).
bool ResolvesSomewhere(const std::string& name) {
  for (uint32_t arch : FilteredArchitectures()) {
    const int nr = seccomp_syscall_resolve_name_arch(arch, name.c_str());
    if (nr >= 0) return true;
    if (arch == SCMP_ARCH_X86 && nr != __NR_SCMP_ERROR && nr > -10000) return true;
  }
  return false;
}

TEST(SeccompPolicyTableTest, GroupsAreNamedDescribedAndNonEmpty) {
  std::set<std::string> group_names;
  for (const SyscallGroup& group : AllowedSyscallGroups()) {
    EXPECT_FALSE(group.name.empty());
    EXPECT_FALSE(group.description.empty()) << group.name;
    EXPECT_FALSE(group.syscalls.empty()) << group.name;
    EXPECT_TRUE(group_names.insert(group.name).second) << "duplicate group " << group.name;
  }
  for (const DeniedSyscall& denied : DeniedSyscalls()) {
    EXPECT_FALSE(denied.reason.empty()) << denied.name;
  }
  for (const FilteredSyscall& filtered : ArgumentFilteredSyscalls()) {
    EXPECT_FALSE(filtered.rule.empty()) << filtered.name;
  }
}

TEST(SeccompPolicyTableTest, NoNameIsListedTwice) {
  std::set<std::string> seen;
  auto add = [&](const std::string& name, const std::string& where) {
    EXPECT_TRUE(seen.insert(name).second) << name << " appears again in " << where;
  };
  for (const SyscallGroup& group : AllowedSyscallGroups()) {
    for (const std::string& name : group.syscalls) add(name, "group " + group.name);
  }
  for (const DeniedSyscall& denied : DeniedSyscalls()) add(denied.name, "DeniedSyscalls");
  for (const FilteredSyscall& filtered : ArgumentFilteredSyscalls()) {
    add(filtered.name, "ArgumentFilteredSyscalls");
  }
}

TEST(SeccompPolicyTableTest, EveryNameResolves) {
  for (const std::string& name : AllowedNames()) {
    EXPECT_TRUE(ResolvesSomewhere(name)) << "allowed " << name;
  }
  for (const std::string& name : DeniedNames()) {
    EXPECT_TRUE(ResolvesSomewhere(name)) << "denied " << name;
  }
  for (const std::string& name : FilteredNames()) {
    EXPECT_TRUE(ResolvesSomewhere(name)) << "filtered " << name;
  }
}

TEST(SeccompPolicyTableTest, FiltersEveryX86Abi) {
  if (seccomp_arch_native() != SCMP_ARCH_X86_64) GTEST_SKIP() << "not an x86_64 host";
  EXPECT_EQ(FilteredArchitectures(),
            (std::vector<uint32_t>{SCMP_ARCH_X86_64, SCMP_ARCH_X86, SCMP_ARCH_X32}));
}

// What THREATS.md (A2-A4) and the issue require to fail with EPERM, and what Docker's default
// profile refuses to a container without capabilities. Each must be denied outright.
TEST(SeccompPolicyTableTest, DeniesWhatTheThreatModelAndDockerDeny) {
  const std::set<std::string> denied = DeniedNames();
  const std::vector<std::string> required = {
      // THREATS.md A2-A4 and the issue.
      "unshare", "setns", "mount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount",
      "fspick", "open_tree", "move_mount", "mount_setattr", "io_uring_setup", "io_uring_enter",
      "io_uring_register", "bpf", "userfaultfd", "keyctl", "add_key", "request_key",
      "perf_event_open", "ptrace", "process_vm_readv", "process_vm_writev", "kexec_load",
      "kexec_file_load", "init_module", "finit_module", "delete_module", "open_by_handle_at",
      "name_to_handle_at", "swapon", "swapoff", "syslog", "reboot", "acct", "settimeofday",
      "clock_settime", "clock_adjtime", "adjtimex", "quotactl", "lookup_dcookie", "iopl", "ioperm",
      "vhangup", "nfsservctl", "uselib", "sysfs", "_sysctl", "get_kernel_syms", "create_module",
      "query_module", "chroot", "kcmp", "pidfd_getfd", "memfd_secret",
      // Docker's default profile: allowed only with a capability the sandbox does not have.
      "fanotify_init", "quotactl_fd", "setdomainname", "sethostname", "umount", "process_madvise",
      "stime", "clock_settime64", "get_mempolicy", "mbind", "set_mempolicy",
      "set_mempolicy_home_node",
      // Not in Docker's allowlist at all.
      "migrate_pages", "move_pages", "vm86", "vm86old", "ustat"};
  for (const std::string& name : required) {
    EXPECT_TRUE(denied.count(name)) << name << " must be in DeniedSyscalls";
  }
  // All but the 32-bit-only ones exist on x86_64, so they reach the native filter.
  const std::set<std::string> x86_only = {"umount", "stime", "clock_settime64", "vm86", "vm86old"};
  if (seccomp_arch_native() == SCMP_ARCH_X86_64) {
    for (const std::string& name : required) {
      if (x86_only.count(name)) continue;
      EXPECT_GE(seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, name.c_str()), 0) << name;
    }
  }
}

TEST(SeccompPolicyTableTest, AllowsWhatModernUserlandsCall) {
  const std::set<std::string> allowed = AllowedNames();
  for (const char* name : {"faccessat2",
                           "openat2",
                           "statx",
                           "close_range",
                           "epoll_pwait2",
                           "pidfd_open",
                           "pidfd_send_signal",
                           "rseq",
                           "futex_waitv",
                           "memfd_create",
                           "copy_file_range",
                           "getrandom",
                           "membarrier",
                           "io_setup",
                           "io_submit",
                           "execveat",
                           "landlock_create_ruleset",
                           "landlock_restrict_self",
                           "seccomp",
                           "prlimit64",
                           "set_robust_list",
                           "sched_getaffinity",
                           "newfstatat",
                           "getdents64",
                           "pipe2",
                           "eventfd2",
                           "epoll_create1",
                           "wait4",
                           "vfork",
                           "map_shadow_stack",
                           "fchmodat2",
                           "process_mrelease",
                           "clock_nanosleep",
                           "mq_open",
                           "shmget",
                           "setresuid",
                           "capset",
                           "arch_prctl",
                           "sendmmsg",
                           "accept4"}) {
    EXPECT_TRUE(allowed.count(name)) << name;
  }
  for (const char* name : {"clone", "clone3", "socket", "socketpair", "ioctl", "personality"}) {
    EXPECT_TRUE(FilteredNames().count(name)) << name;
  }
}

// ---------------------------------------------------------------------------------------------
// The compiled program.

TEST_F(SeccompPolicyTest, ProgramFitsTheKernelLimit) {
  EXPECT_GT(g_program->instructions.size(), 100u);
  EXPECT_LE(g_program->instructions.size(), static_cast<size_t>(BPF_MAXINSNS));
  const sock_fprog fprog = g_program->fprog();
  EXPECT_EQ(fprog.len, g_program->instructions.size());
  EXPECT_EQ(fprog.filter, g_program->instructions.data());
}

TEST_F(SeccompPolicyTest, ProgramChecksTheArchitectureFirst) {
  const sock_filter& first = g_program->instructions.front();
  EXPECT_EQ(first.code, BPF_LD | BPF_W | BPF_ABS);
  EXPECT_EQ(first.k, offsetof(seccomp_data, arch));
  std::set<uint32_t> compared;
  for (const sock_filter& insn : g_program->instructions) {
    if (insn.code == (BPF_JMP | BPF_JEQ | BPF_K)) compared.insert(insn.k);
  }
  if (seccomp_arch_native() == SCMP_ARCH_X86_64) {
    EXPECT_TRUE(compared.count(AUDIT_ARCH_X86_64));  // x86_64 and x32 (told apart by nr)
    EXPECT_TRUE(compared.count(AUDIT_ARCH_I386));
  }
  // Unknown architectures end in SECCOMP_RET_KILL_PROCESS.
  bool kills = false;
  for (const sock_filter& insn : g_program->instructions) {
    kills |= insn.code == (BPF_RET | BPF_K) && insn.k == SECCOMP_RET_KILL_PROCESS;
  }
  EXPECT_TRUE(kills);
}

TEST_F(SeccompPolicyTest, CompilesDeterministically) {
  auto again = CompileSeccompPolicy();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_EQ(again->instructions.size(), g_program->instructions.size());
  EXPECT_EQ(0, memcmp(again->instructions.data(), g_program->instructions.data(),
                      g_program->instructions.size() * sizeof(sock_filter)));
}

TEST_F(SeccompPolicyTest, LoadsAndReportsSeccompModeFilter) {
  EXPECT_EQ(0, RunInChild([] {
              return prctl(PR_GET_SECCOMP, 0, 0, 0, 0) == SECCOMP_MODE_FILTER ? 0 : EIO;
            }));
}

// ---------------------------------------------------------------------------------------------
// The program, evaluated. A classic-BPF interpreter for the instructions libseccomp emits lets
// the tests ask the filter about every architecture and every argument value, including
// architectures this kernel cannot run (this host's kernel has IA32 emulation off and no x32).
// InterpreterAgreesWithTheKernel checks it against the real thing.

constexpr uint32_t kBadProgram = 0xdeadbeef;  // an instruction the interpreter does not know
constexpr uint32_t kRetAllow = SECCOMP_RET_ALLOW;
constexpr uint32_t kRetEperm = SECCOMP_RET_ERRNO | EPERM;
constexpr uint32_t kRetEnosys = SECCOMP_RET_ERRNO | ENOSYS;
constexpr uint32_t kRetKill = SECCOMP_RET_KILL_PROCESS;

uint32_t Evaluate(const std::vector<sock_filter>& program, const seccomp_data& data) {
  uint32_t a = 0, x = 0;
  uint32_t mem[BPF_MEMWORDS] = {};
  const auto* bytes = reinterpret_cast<const unsigned char*>(&data);
  for (size_t pc = 0; pc < program.size(); ++pc) {
    const sock_filter& f = program[pc];
    switch (f.code) {
      case BPF_LD | BPF_W | BPF_ABS:
        if (f.k % 4 != 0 || f.k + 4 > sizeof data) return kBadProgram;
        memcpy(&a, bytes + f.k, 4);
        break;
      case BPF_LD | BPF_IMM:
        a = f.k;
        break;
      case BPF_LDX | BPF_IMM:
        x = f.k;
        break;
      case BPF_LD | BPF_MEM:
        if (f.k >= BPF_MEMWORDS) return kBadProgram;
        a = mem[f.k];
        break;
      case BPF_ST:
        if (f.k >= BPF_MEMWORDS) return kBadProgram;
        mem[f.k] = a;
        break;
      case BPF_ALU | BPF_AND | BPF_K:
        a &= f.k;
        break;
      case BPF_ALU | BPF_OR | BPF_K:
        a |= f.k;
        break;
      case BPF_MISC | BPF_TAX:
        x = a;
        break;
      case BPF_MISC | BPF_TXA:
        a = x;
        break;
      case BPF_JMP | BPF_JA:
        pc += f.k;
        break;
      case BPF_JMP | BPF_JEQ | BPF_K:
        pc += a == f.k ? f.jt : f.jf;
        break;
      case BPF_JMP | BPF_JGT | BPF_K:
        pc += a > f.k ? f.jt : f.jf;
        break;
      case BPF_JMP | BPF_JGE | BPF_K:
        pc += a >= f.k ? f.jt : f.jf;
        break;
      case BPF_JMP | BPF_JSET | BPF_K:
        pc += (a & f.k) != 0 ? f.jt : f.jf;
        break;
      case BPF_RET | BPF_K:
        return f.k;
      default:
        return kBadProgram;
    }
  }
  return kBadProgram;  // fell off the end
}

uint32_t Verdict(uint32_t audit_arch, long nr, std::vector<uint64_t> args = {}) {
  seccomp_data data{};
  data.nr = static_cast<int>(nr);
  data.arch = audit_arch;
  for (size_t i = 0; i < args.size() && i < 6; ++i) data.args[i] = args[i];
  return Evaluate(g_program->instructions, data);
}

std::string DescribeAction(uint32_t action) {
  switch (action) {
    case kRetAllow:
      return "ALLOW";
    case kRetKill:
      return "KILL_PROCESS";
    case kBadProgram:
      return "bad program";
  }
  if ((action & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_ERRNO) {
    return "ERRNO(" + ErrnoName(static_cast<int>(action & SECCOMP_RET_DATA)) + ")";
  }
  return "action " + std::to_string(action);
}

#define EXPECT_ACTION(actual, expected) EXPECT_EQ(DescribeAction(actual), DescribeAction(expected))

#if defined(__x86_64__)

struct Abi {
  const char* name;
  uint32_t scmp_arch;
  uint32_t audit_arch;
};
const Abi kAbis[] = {{"x86_64", SCMP_ARCH_X86_64, AUDIT_ARCH_X86_64},
                     {"x86", SCMP_ARCH_X86, AUDIT_ARCH_I386},
                     {"x32", SCMP_ARCH_X32, AUDIT_ARCH_X86_64}};

long Nr(const Abi& abi, const std::string& name) {
  return seccomp_syscall_resolve_name_arch(abi.scmp_arch, name.c_str());
}

// x86's direct socket syscalls (Linux 4.3+, arch/x86/entry/syscalls/syscall_32.tbl);
// libseccomp resolves these names to socketcall pseudo-numbers on x86.
const std::map<std::string, long> kX86DirectSocketCalls = {
    {"socket", 359},      {"socketpair", 360},  {"bind", 361},       {"connect", 362},
    {"listen", 363},      {"accept4", 364},     {"getsockopt", 365}, {"setsockopt", 366},
    {"getsockname", 367}, {"getpeername", 368}, {"sendto", 369},     {"sendmsg", 370},
    {"recvfrom", 371},    {"recvmsg", 372},     {"shutdown", 373},   {"recvmmsg", 337},
    {"sendmmsg", 345}};

// The verdicts for `name` on `abi`: the syscall itself and, on x86, also its socketcall/ipc
// sub-call. Empty when the ABI lacks the syscall.
std::vector<uint32_t> VerdictsByName(const Abi& abi, const std::string& name,
                                     std::vector<uint64_t> args = {}) {
  std::vector<uint32_t> verdicts;
  const long nr = Nr(abi, name);
  if (nr >= 0) verdicts.push_back(Verdict(abi.audit_arch, nr, args));
  if (abi.scmp_arch != SCMP_ARCH_X86) return verdicts;
  if (nr <= -100 && nr >= -120) {
    verdicts.push_back(
        Verdict(abi.audit_arch, Nr(abi, "socketcall"), {static_cast<uint64_t>(-nr - 100)}));
    auto direct = kX86DirectSocketCalls.find(name);
    if (direct != kX86DirectSocketCalls.end()) {
      verdicts.push_back(Verdict(abi.audit_arch, direct->second, args));
    }
  }
  if (nr <= -200 && nr >= -224) {
    verdicts.push_back(Verdict(abi.audit_arch, Nr(abi, "ipc"), {static_cast<uint64_t>(-nr - 200)}));
  }
  return verdicts;
}

TEST_F(SeccompPolicyTest, InterpreterAgreesWithTheKernel) {
  if (seccomp_arch_native() != SCMP_ARCH_X86_64) GTEST_SKIP() << "x86_64 only";
  struct Case {
    long nr;
    std::vector<uint64_t> args;
  };
  const Case cases[] = {
      {SYS_getpid, {}},
      {SYS_unshare, {CLONE_NEWUSER}},
      {SYS_clone3, {0, 0}},
      {500, {}},
      {SYS_ioctl, {static_cast<uint64_t>(-1), TIOCSTI}},
      {SYS_ioctl, {static_cast<uint64_t>(-1), TCGETS}},
      {SYS_ioctl, {static_cast<uint64_t>(-1), (1ULL << 32) | TIOCSTI}},
      {SYS_socket, {AF_ALG, SOCK_SEQPACKET, 0}},
      {SYS_socket, {AF_INET, SOCK_STREAM, 0}},
      {SYS_socket, {AF_INET, SOCK_RAW, IPPROTO_ICMP}},
      {SYS_personality, {ADDR_NO_RANDOMIZE}},
      {SYS_personality, {0xffffffff}},
  };
  for (const Case& c : cases) {
    const uint32_t action = Verdict(AUDIT_ARCH_X86_64, c.nr, c.args);
    const int kernel = RunInChild([&] {
      const long rc =
          syscall(c.nr, c.args.size() > 0 ? c.args[0] : 0, c.args.size() > 1 ? c.args[1] : 0,
                  c.args.size() > 2 ? c.args[2] : 0, 0, 0, 0);
      if (rc >= 0 && (c.nr == SYS_socket)) close(static_cast<int>(rc));
      return ErrnoOf(rc);
    });
    if (action == kRetAllow) {
      EXPECT_NE(kernel, EPERM) << "nr " << c.nr;
      EXPECT_NE(kernel, kChildDied) << "nr " << c.nr;
    } else {
      ASSERT_EQ(action & SECCOMP_RET_ACTION_FULL, SECCOMP_RET_ERRNO) << DescribeAction(action);
      EXPECT_EQ(kernel, static_cast<int>(action & SECCOMP_RET_DATA)) << "nr " << c.nr;
    }
  }
}

TEST_F(SeccompPolicyTest, EveryAbiAppliesTheTables) {
  for (const Abi& abi : kAbis) {
    SCOPED_TRACE(abi.name);
    for (const DeniedSyscall& denied : DeniedSyscalls()) {
      for (uint32_t action : VerdictsByName(abi, denied.name)) {
        EXPECT_ACTION(action, kRetEperm) << denied.name;
      }
    }
    for (const std::string& name : AllowedNames()) {
      for (uint32_t action : VerdictsByName(abi, name)) EXPECT_ACTION(action, kRetAllow) << name;
    }
    ASSERT_EQ(VerdictsByName(abi, "clone3").size(), 1u);
    EXPECT_ACTION(VerdictsByName(abi, "clone3")[0], kRetEnosys);
  }
}

// Default deny: every syscall number the filter allows with zero arguments belongs to a name in
// the tables, and every number in neither table gets ENOSYS.
TEST_F(SeccompPolicyTest, NothingOutsideTheTablesIsAllowed) {
  const std::set<std::string> allowed = AllowedNames();
  const std::set<std::string> denied = DeniedNames();
  const std::set<std::string> filtered = FilteredNames();
  for (const Abi& abi : kAbis) {
    SCOPED_TRACE(abi.name);
    const long base = abi.scmp_arch == SCMP_ARCH_X32 ? 0x40000000 : 0;
    for (long nr = base; nr < base + 1024; ++nr) {
      const uint32_t action = Verdict(abi.audit_arch, nr);
      char* resolved = seccomp_syscall_resolve_num_arch(abi.scmp_arch, static_cast<int>(nr));
      const std::string name = resolved != nullptr ? resolved : "";
      free(resolved);
      if (allowed.count(name)) {
        EXPECT_ACTION(action, kRetAllow) << name;
      } else if (denied.count(name)) {
        EXPECT_ACTION(action, kRetEperm) << name;
      } else if (filtered.count(name)) {
        EXPECT_TRUE(action == kRetAllow || action == kRetEperm || action == kRetEnosys)
            << name << ": " << DescribeAction(action);
      } else {
        EXPECT_ACTION(action, kRetEnosys) << "nr " << nr << " (" << name << ")";
      }
    }
  }
}

TEST_F(SeccompPolicyTest, ForeignArchitecturesAreKilled) {
  EXPECT_ACTION(Verdict(AUDIT_ARCH_AARCH64, 0), kRetKill);
  EXPECT_ACTION(Verdict(AUDIT_ARCH_ARM, 20), kRetKill);
  EXPECT_ACTION(Verdict(0, 39), kRetKill);
}

TEST_F(SeccompPolicyTest, CloneRefusesEachNamespaceFlagOnEveryAbi) {
  const uint64_t ns_flags = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC |
                            CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWTIME;
  for (const Abi& abi : kAbis) {
    SCOPED_TRACE(abi.name);
    const long clone = Nr(abi, "clone");
    for (int bit = 0; bit < 32; ++bit) {
      const uint64_t flags = (1ULL << bit) | SIGCHLD;
      EXPECT_ACTION(Verdict(abi.audit_arch, clone, {flags}),
                    (flags & ns_flags) != 0 ? kRetEperm : kRetAllow)
          << "bit " << bit;
    }
    // What glibc's fork, pthread_create and posix_spawn pass.
    EXPECT_ACTION(
        Verdict(abi.audit_arch, clone, {CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD}),
        kRetAllow);
    EXPECT_ACTION(
        Verdict(abi.audit_arch, clone,
                {CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM |
                 CLONE_SETTLS | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID}),
        kRetAllow);
    EXPECT_ACTION(Verdict(abi.audit_arch, clone, {CLONE_VM | CLONE_VFORK | SIGCHLD}), kRetAllow);
    EXPECT_ACTION(Verdict(abi.audit_arch, clone, {ns_flags | SIGCHLD}), kRetEperm);
  }
}

TEST_F(SeccompPolicyTest, SocketFamiliesTypesAndProtocolsExhaustively) {
  for (const Abi& abi : kAbis) {
    if (abi.scmp_arch == SCMP_ARCH_X86) continue;  // below
    SCOPED_TRACE(abi.name);
    const long socket_nr = Nr(abi, "socket");
    const long socketpair_nr = Nr(abi, "socketpair");
    for (uint64_t family = 0; family < 64; ++family) {
      if (family == AF_INET || family == AF_INET6) continue;
      const bool any = family == AF_UNIX || family == AF_NETLINK;
      for (uint64_t type : {0x1ULL, 0x2ULL, 0x3ULL, 0x5ULL | SOCK_CLOEXEC}) {  // STREAM..SEQPACKET
        EXPECT_ACTION(Verdict(abi.audit_arch, socket_nr, {family, type, 0}),
                      any ? kRetAllow : kRetEperm)
            << "family " << family;
      }
      EXPECT_ACTION(Verdict(abi.audit_arch, socketpair_nr, {family, SOCK_STREAM, 0}),
                    family == AF_UNIX ? kRetAllow : kRetEperm)
          << "socketpair family " << family;
    }
    // The kernel reads an int: the upper half of the register must not matter.
    EXPECT_ACTION(Verdict(abi.audit_arch, socket_nr, {(1ULL << 32) | AF_UNIX, SOCK_STREAM, 0}),
                  kRetAllow);
    EXPECT_ACTION(Verdict(abi.audit_arch, socket_nr, {(7ULL << 32) | AF_ALG, SOCK_SEQPACKET, 0}),
                  kRetEperm);
    // Families the kernel itself refuses (>= AF_MAX) are refused either way.
    for (uint64_t family : {64ULL, 65ULL, 66ULL, 100ULL, 0xffffffffULL, ~0ULL}) {
      const uint32_t action = Verdict(abi.audit_arch, socket_nr, {family, SOCK_STREAM, 0});
      EXPECT_TRUE(action == kRetEperm || action == kRetEnosys)
          << "family " << family << ": " << DescribeAction(action);
    }
    for (uint64_t family : {uint64_t{AF_INET}, uint64_t{AF_INET6}}) {
      const uint64_t ping = family == AF_INET ? uint64_t{IPPROTO_ICMP} : uint64_t{IPPROTO_ICMPV6};
      for (uint64_t type = 0; type < 16; ++type) {
        for (uint64_t protocol = 0; protocol < 512; ++protocol) {
          const bool ok = (type == SOCK_STREAM && (protocol == 0 || protocol == IPPROTO_TCP)) ||
                          (type == SOCK_DGRAM &&
                           (protocol == 0 || protocol == IPPROTO_UDP || protocol == ping));
          for (uint64_t flags : {0, SOCK_NONBLOCK | SOCK_CLOEXEC}) {
            const uint32_t action =
                Verdict(abi.audit_arch, socket_nr, {family, type | flags, protocol});
            if (action != (ok ? kRetAllow : kRetEperm)) {
              ADD_FAILURE() << "family " << family << " type " << type << " protocol " << protocol
                            << ": " << DescribeAction(action);
            }
          }
        }
      }
    }
  }
}

TEST_F(SeccompPolicyTest, X86CannotCreateSocketsButUsesThem) {
  const Abi& x86 = kAbis[1];
  ASSERT_EQ(x86.scmp_arch, SCMP_ARCH_X86);
  const long socketcall = Nr(x86, "socketcall");
  ASSERT_GT(socketcall, 0);
  for (uint64_t family : {AF_UNIX, AF_INET, AF_ALG}) {
    EXPECT_ACTION(
        Verdict(x86.audit_arch, kX86DirectSocketCalls.at("socket"), {family, SOCK_STREAM, 0}),
        kRetEperm);
    EXPECT_ACTION(
        Verdict(x86.audit_arch, kX86DirectSocketCalls.at("socketpair"), {family, SOCK_STREAM, 0}),
        kRetEperm);
  }
  for (const auto& [name, nr] : kX86DirectSocketCalls) {
    if (name == "socket" || name == "socketpair") continue;
    EXPECT_ACTION(Verdict(x86.audit_arch, nr, {3, 0, 0}), kRetAllow) << name;
  }
  for (uint64_t call = 0; call < 32; ++call) {
    const uint32_t want = call == 1 /* SYS_SOCKET */ || call == 8 /* SYS_SOCKETPAIR */
                              ? kRetEperm
                              : call >= 2 && call <= 20 ? kRetAllow : kRetEnosys;
    EXPECT_ACTION(Verdict(x86.audit_arch, socketcall, {call, 0x1000}), want) << "call " << call;
  }
  EXPECT_ACTION(Verdict(x86.audit_arch, Nr(x86, "ipc"), {0x10003 /* versioned MSGRCV */}),
                kRetAllow);
}

TEST_F(SeccompPolicyTest, IoctlRefusesOnlyTheTerminalInjectionRequests) {
  const std::set<uint32_t> denied = {TIOCSTI, TIOCLINUX, TIOCSETD};
  std::vector<uint32_t> requests;
  for (uint32_t r = 0x5400; r < 0x5500; ++r) requests.push_back(r);  // all of the 'T' space
  for (uint32_t bit = 0; bit < 32; ++bit) {
    for (uint32_t d : denied) requests.push_back(d ^ (1u << bit));  // every neighbour
  }
  uint32_t lcg = 12345;
  for (int i = 0; i < 20000; ++i) requests.push_back(lcg = lcg * 1664525u + 1013904223u);
  for (const Abi& abi : kAbis) {
    SCOPED_TRACE(abi.name);
    const long ioctl_nr = Nr(abi, "ioctl");
    for (uint32_t request : requests) {
      const uint32_t want = denied.count(request) ? kRetEperm : kRetAllow;
      for (uint64_t upper : {0ULL, 1ULL, 0xffffffffULL}) {
        if (upper != 0 && abi.scmp_arch == SCMP_ARCH_X86) continue;  // 32-bit registers
        const uint32_t action = Verdict(abi.audit_arch, ioctl_nr, {3, (upper << 32) | request, 0});
        if (action != want) {
          ADD_FAILURE() << std::hex << "request " << request << " upper " << upper << ": "
                        << DescribeAction(action);
        }
      }
    }
  }
}

TEST_F(SeccompPolicyTest, PersonalityAllowsOnlyDockersValues) {
  const std::set<uint32_t> allowed = {0x0, 0x8, 0x20000, 0x20008, 0xffffffff};
  std::vector<uint32_t> values(allowed.begin(), allowed.end());
  for (uint32_t bit = 0; bit < 32; ++bit) {
    values.push_back(1u << bit);
    for (uint32_t a : allowed) values.push_back(a ^ (1u << bit));
  }
  for (const Abi& abi : kAbis) {
    SCOPED_TRACE(abi.name);
    const long nr = Nr(abi, "personality");
    for (uint32_t value : values) {
      EXPECT_ACTION(Verdict(abi.audit_arch, nr, {value}),
                    allowed.count(value) ? kRetAllow : kRetEperm)
          << std::hex << value;
    }
  }
}

#endif  // __x86_64__

// ---------------------------------------------------------------------------------------------
// Denials, 64-bit ABI.

struct DenialCase {
  const char* name;
  int expected;          // errno from the filter
  int (*probe)();        // returns 0 or errno
  bool control_differs;  // unfiltered, the kernel answers something else (any privilege)
};

void PrintTo(const DenialCase& c, std::ostream* os) { *os << c.name; }

class SeccompDenialTest : public SeccompPolicyTest,
                          public ::testing::WithParamInterface<DenialCase> {};

TEST_P(SeccompDenialTest, FilterRefuses) {
  const DenialCase& c = GetParam();
  const int filtered = RunInChild(c.probe);
  EXPECT_EQ(filtered, c.expected) << c.name << ": got " << Describe(filtered) << ", want "
                                  << Describe(c.expected);
  if (c.control_differs) {
    const int unfiltered = RunInChild(c.probe, /*filtered=*/false);
    EXPECT_NE(unfiltered, c.expected)
        << c.name << " without the filter also gives " << Describe(unfiltered)
        << ": this probe would not show that the filter denies it";
    EXPECT_NE(unfiltered, kChildDied) << c.name;
  }
}

constexpr char kMissing[] = "/nonexistent-corral-seccomp-test";

// Probes as captureless lambdas: ERRNO_OF(call) reports the call's errno, FD_OF(call) also
// closes the descriptor it returns.
#define ERRNO_OF(call) [] { return ErrnoOf(call); }
#define FD_OF(call) [] { return FdResult(call); }

const DenialCase kDenialCases[] = {
    // Namespaces.
    {"unshare_user", EPERM, ERRNO_OF(unshare(CLONE_NEWUSER)), false},
    {"unshare_mount", EPERM, ERRNO_OF(unshare(CLONE_NEWNS)), false},
    {"setns", EPERM, ERRNO_OF(setns(-1, 0)), true},
    {"clone_newuser", EPERM, [] { return CloneWithFlags(CLONE_NEWUSER | SIGCHLD); }, false},
    {"clone_newns", EPERM, [] { return CloneWithFlags(CLONE_NEWNS | SIGCHLD); }, false},
    {"clone_newpid", EPERM, [] { return CloneWithFlags(CLONE_NEWPID | SIGCHLD); }, false},
    {"clone_newnet", EPERM, [] { return CloneWithFlags(CLONE_NEWNET | SIGCHLD); }, false},
    {"clone_newuts", EPERM, [] { return CloneWithFlags(CLONE_NEWUTS | SIGCHLD); }, false},
    {"clone_newipc", EPERM, [] { return CloneWithFlags(CLONE_NEWIPC | SIGCHLD); }, false},
    {"clone_newcgroup", EPERM, [] { return CloneWithFlags(CLONE_NEWCGROUP | SIGCHLD); }, false},
    {"clone_newtime_bit", EPERM, [] { return CloneWithFlags(CLONE_NEWTIME | SIGCHLD); }, false},
    {"clone_user_and_mount_threaded", EPERM,
     [] { return CloneWithFlags(CLONE_NEWUSER | CLONE_NEWNS | CLONE_FILES | CLONE_FS | SIGCHLD); },
     false},
    {"clone_newuser_upper_bits", EPERM,
     [] { return CloneWithFlags((1UL << 40) | CLONE_NEWUSER | SIGCHLD); }, false},
    {"clone3", ENOSYS,
     [] {
       clone_args args{};
       args.exit_signal = SIGCHLD;
       const long pid = syscall(SYS_clone3, &args, sizeof args);
       if (pid == 0) _exit(0);
       if (pid > 0) waitpid(static_cast<pid_t>(pid), nullptr, 0);
       return ErrnoOf(pid);
     },
     false},
    {"clone3_newuser", ENOSYS,
     [] {
       clone_args args{};
       args.flags = CLONE_NEWUSER;
       args.exit_signal = SIGCHLD;
       const long pid = syscall(SYS_clone3, &args, sizeof args);
       if (pid == 0) _exit(0);
       if (pid > 0) waitpid(static_cast<pid_t>(pid), nullptr, 0);
       return ErrnoOf(pid);
     },
     false},
    // Mounts, old and new API.
    {"mount", EPERM, ERRNO_OF(mount("none", kMissing, "tmpfs", 0, nullptr)), true},
    {"umount2", EPERM, ERRNO_OF(umount2(kMissing, 0)), true},
    {"pivot_root", EPERM, ERRNO_OF(syscall(SYS_pivot_root, kMissing, kMissing)),
     false},
    {"chroot", EPERM, ERRNO_OF(chroot(kMissing)), true},
    {"fsopen", EPERM, FD_OF(syscall(SYS_fsopen, "corral-no-such-fs", 0)), false},
    {"fsconfig", EPERM,
     ERRNO_OF(syscall(SYS_fsconfig, -1, FSCONFIG_CMD_CREATE, 0, 0, 0)), true},
    {"fsmount", EPERM, FD_OF(syscall(SYS_fsmount, -1, 0, 0)), false},
    {"fspick", EPERM, FD_OF(syscall(SYS_fspick, AT_FDCWD, kMissing, 0)), false},
    {"open_tree", EPERM, FD_OF(syscall(SYS_open_tree, AT_FDCWD, kMissing, 0)),
     true},
    {"move_mount", EPERM, ERRNO_OF(syscall(SYS_move_mount, -1, "", -1, "", 0)),
     false},
    {"mount_setattr", EPERM,
     ERRNO_OF(syscall(SYS_mount_setattr, -1, "", 0, nullptr, 0)), true},
    {"quotactl_fd", EPERM, ERRNO_OF(syscall(SYS_quotactl_fd, -1, 0, 0, 0)), true},
    // Kernel attack surface.
    {"io_uring_setup", EPERM, FD_OF(syscall(SYS_io_uring_setup, 0, nullptr)),
     false},
    {"io_uring_enter", EPERM,
     ERRNO_OF(syscall(SYS_io_uring_enter, -1, 0, 0, 0, nullptr, 0)), true},
    {"io_uring_register", EPERM,
     ERRNO_OF(syscall(SYS_io_uring_register, -1, 0, nullptr, 0)), true},
    {"bpf", EPERM, ERRNO_OF(syscall(SYS_bpf, -1, nullptr, 0)), false},
    {"userfaultfd", EPERM, FD_OF(syscall(SYS_userfaultfd, ~0)), false},
    {"perf_event_open", EPERM,
     FD_OF(syscall(SYS_perf_event_open, nullptr, 0, -1, -1, 0)), true},
    {"keyctl", EPERM, ERRNO_OF(syscall(SYS_keyctl, -1, 0, 0, 0, 0)), true},
    {"add_key", EPERM, ERRNO_OF(syscall(SYS_add_key, 0, 0, 0, 0, -1)), true},
    {"request_key", EPERM, ERRNO_OF(syscall(SYS_request_key, 0, 0, 0, 0)), true},
    {"fanotify_mark", EPERM, ERRNO_OF(syscall(SYS_fanotify_mark, -1, 0, 0, -1, 0)),
     true},
    {"memfd_secret", EPERM, FD_OF(syscall(SYS_memfd_secret, 0)), true},
    {"name_to_handle_at", EPERM,
     ERRNO_OF(syscall(SYS_name_to_handle_at, AT_FDCWD, kMissing, 0, 0, 0)), true},
    {"open_by_handle_at", EPERM,
     FD_OF(syscall(SYS_open_by_handle_at, -1, nullptr, 0)), false},
    {"modify_ldt", EPERM,
     [] {
       char buf[8];
       return ErrnoOf(syscall(SYS_modify_ldt, 0, buf, 0));
     },
     true},
    // Other processes.
    {"ptrace", EPERM, ERRNO_OF(syscall(SYS_ptrace, PTRACE_PEEKDATA, 0, 0, 0)), true},
    {"process_vm_readv", EPERM,
     ERRNO_OF(syscall(SYS_process_vm_readv, getpid(), nullptr, 0, nullptr, 0, 0)),
     true},
    {"process_vm_writev", EPERM,
     ERRNO_OF(syscall(SYS_process_vm_writev, getpid(), nullptr, 0, nullptr, 0, 0)),
     true},
    {"process_madvise", EPERM,
     ERRNO_OF(syscall(SYS_process_madvise, -1, nullptr, 0, 0, 0)), true},
    {"kcmp", EPERM, ERRNO_OF(syscall(SYS_kcmp, getpid(), getpid(), 0, 0, 0)), true},
    {"pidfd_getfd", EPERM, FD_OF(syscall(SYS_pidfd_getfd, -1, 0, 0)), true},
    // The machine.
    {"kexec_load", EPERM, ERRNO_OF(syscall(SYS_kexec_load, 0, 0, 0, 0xdeadbeefUL)),
     false},
    {"kexec_file_load", EPERM,
     ERRNO_OF(syscall(SYS_kexec_file_load, -1, -1, 0, nullptr, ~0UL)), false},
    {"init_module", EPERM, ERRNO_OF(syscall(SYS_init_module, nullptr, 0, "")), false},
    {"finit_module", EPERM, ERRNO_OF(syscall(SYS_finit_module, -1, "", 0)), false},
    {"delete_module", EPERM,
     ERRNO_OF(syscall(SYS_delete_module, "corral_no_such_module", O_NONBLOCK)),
     false},
    {"reboot", EPERM, ERRNO_OF(syscall(SYS_reboot, 0, 0, 0, nullptr)), false},
    {"swapon", EPERM, ERRNO_OF(syscall(SYS_swapon, kMissing, 0)), false},
    {"swapoff", EPERM, ERRNO_OF(syscall(SYS_swapoff, kMissing)), false},
    {"syslog", EPERM, ERRNO_OF(syscall(SYS_syslog, 10 /* SIZE_BUFFER */, 0, 0)),
     false},
    {"acct", EPERM, ERRNO_OF(syscall(SYS_acct, "/nonexistent-corral/acct")), false},
    {"iopl", EPERM, ERRNO_OF(syscall(SYS_iopl, 0)), false},
    {"ioperm", EPERM, ERRNO_OF(syscall(SYS_ioperm, 0, 0, 0)), false},
    {"vhangup", EPERM,
     [] {
       setsid();  // no controlling terminal: harmless even if it got through
       return ErrnoOf(syscall(SYS_vhangup));
     },
     false},
    {"sethostname", EPERM, ERRNO_OF(syscall(SYS_sethostname, nullptr, 65)), false},
    {"setdomainname", EPERM, ERRNO_OF(syscall(SYS_setdomainname, nullptr, 65)),
     false},
    {"sysfs", EPERM, ERRNO_OF(syscall(SYS_sysfs, 1, nullptr)), true},
    {"ustat", EPERM, ERRNO_OF(syscall(SYS_ustat, 0, nullptr)), true},
    {"uselib", EPERM, ERRNO_OF(syscall(SYS_uselib, nullptr)), true},
    {"nfsservctl", EPERM, ERRNO_OF(syscall(SYS_nfsservctl, 0, 0, 0)), true},
    {"lookup_dcookie", EPERM, ERRNO_OF(syscall(SYS_lookup_dcookie, 0, nullptr, 0)),
     true},
    // Clocks.
    {"settimeofday", EPERM, ERRNO_OF(syscall(SYS_settimeofday, nullptr, nullptr)),
     false},
    {"clock_settime", EPERM,
     ERRNO_OF(syscall(SYS_clock_settime, CLOCK_REALTIME, nullptr)), true},
    {"adjtimex_read_only", EPERM,
     [] {
       timex tx{};
       return ErrnoOf(syscall(SYS_adjtimex, &tx));
     },
     true},
    {"clock_adjtime_read_only", EPERM,
     [] {
       timex tx{};
       return ErrnoOf(syscall(SYS_clock_adjtime, CLOCK_REALTIME, &tx));
     },
     true},
    // NUMA.
    {"get_mempolicy", EPERM, ERRNO_OF(syscall(SYS_get_mempolicy, 0, 0, 0, 0, 0)),
     true},
    {"mbind", EPERM, ERRNO_OF(syscall(SYS_mbind, 0, 0, 0, 0, 0, 0)), true},
    {"move_pages", EPERM, ERRNO_OF(syscall(SYS_move_pages, 0, 0, 0, 0, 0, 0)), true},
    // Sockets: families, raw IP, other IP protocols.
    {"socket_alg", EPERM, FD_OF(socket(AF_ALG, SOCK_SEQPACKET, 0)), true},
    {"socket_vsock", EPERM, FD_OF(socket(AF_VSOCK, SOCK_STREAM, 0)), false},
    {"socket_packet", EPERM, FD_OF(socket(AF_PACKET, SOCK_RAW, 0)), false},
    {"socket_inet_raw", EPERM, FD_OF(socket(AF_INET, SOCK_RAW, IPPROTO_ICMP)),
     false},
    {"socket_inet6_raw", EPERM,
     FD_OF(socket(AF_INET6, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW)), false},
    {"socket_inet_packet_type", EPERM, FD_OF(socket(AF_INET, SOCK_PACKET, 0)),
     false},
    {"socket_inet_sctp_seqpacket", EPERM,
     FD_OF(socket(AF_INET, SOCK_SEQPACKET, IPPROTO_SCTP)), false},
    {"socket_inet_sctp_stream", EPERM,
     FD_OF(socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP)), false},
    {"socket_inet_mptcp", EPERM,
     FD_OF(socket(AF_INET, SOCK_STREAM, IPPROTO_MPTCP)), false},
    {"socket_inet_l2tp", EPERM,
     FD_OF(socket(AF_INET, SOCK_DGRAM, 115 /* IPPROTO_L2TP */)), false},
    {"socket_inet6_udplite", EPERM,
     FD_OF(socket(AF_INET6, SOCK_DGRAM, IPPROTO_UDPLITE)), false},
    {"socket_tipc", EPERM, FD_OF(socket(30 /* AF_TIPC */, SOCK_RDM, 0)), false},
    {"socket_rds", EPERM, FD_OF(socket(AF_RDS, SOCK_SEQPACKET, 0)), false},
    {"socket_key", EPERM, FD_OF(socket(AF_KEY, SOCK_RAW, 2)), false},
    {"socket_bluetooth", EPERM, FD_OF(socket(AF_BLUETOOTH, SOCK_RAW, 0)), false},
    {"socket_family_63", EPERM, FD_OF(socket(63, SOCK_STREAM, 0)), false},
    {"socket_alg_upper_bits", EPERM,
     FD_OF(syscall(SYS_socket, (1UL << 32) | AF_ALG, SOCK_SEQPACKET, 0)), false},
    {"socketpair_inet", EPERM,
     [] {
       int sv[2];
       return ErrnoOf(socketpair(AF_INET, SOCK_STREAM, 0, sv));
     },
     false},
    // Terminals.
    {"ioctl_tiocsti", EPERM,
     [] {
       char c = 'x';
       return ErrnoOf(ioctl(-1, TIOCSTI, &c));
     },
     true},
    {"ioctl_tiocsti_upper_bits", EPERM,
     [] {
       char c = 'x';
       return ErrnoOf(syscall(SYS_ioctl, -1, (1UL << 32) | TIOCSTI, &c));
     },
     true},
    {"ioctl_tiocsti_sign_extended", EPERM,
     [] {
       char c = 'x';
       return ErrnoOf(syscall(SYS_ioctl, -1, 0xffffffff00000000UL | TIOCSTI, &c));
     },
     true},
    {"ioctl_tioclinux", EPERM,
     [] {
       char c = 0;
       return ErrnoOf(ioctl(-1, TIOCLINUX, &c));
     },
     true},
    {"ioctl_tiocsetd", EPERM,
     [] {
       int ldisc = 0;
       return ErrnoOf(ioctl(-1, TIOCSETD, &ldisc));
     },
     true},
    // personality: only Docker's values.
    {"personality_addr_no_randomize", EPERM, ERRNO_OF(personality(ADDR_NO_RANDOMIZE)),
     false},
    {"personality_read_implies_exec", EPERM, ERRNO_OF(personality(READ_IMPLIES_EXEC)),
     false},
    {"personality_svr4", EPERM, ERRNO_OF(personality(PER_SVR4)), false},
    // Unknown and future syscalls: the default action.
    {"syscall_500", ENOSYS, ERRNO_OF(syscall(500)), false},
    {"syscall_1000", ENOSYS, ERRNO_OF(syscall(1000)), false},
};

#undef ERRNO_OF
#undef FD_OF

INSTANTIATE_TEST_SUITE_P(Denials, SeccompDenialTest, ::testing::ValuesIn(kDenialCases),
                         [](const ::testing::TestParamInfo<DenialCase>& param_info) {
                           return std::string(param_info.param.name);
                         });

// ---------------------------------------------------------------------------------------------
// What must keep working under the filter (the positive controls).

TEST_F(SeccompPolicyTest, ForkRunsTheChild) {
  EXPECT_EQ(0, RunInChild([] {
              const pid_t pid = fork();
              if (pid == 0) _exit(7);
              if (pid < 0) return errno;
              return ExpectExit(pid, 7);
            }));
}

TEST_F(SeccompPolicyTest, ThreadsStartAndJoin) {
  EXPECT_EQ(0, RunInChild([] {
              pthread_t thread;
              static int value = 0;
              const int rc = pthread_create(
                  &thread, nullptr,
                  [](void*) -> void* {
                    value = 42;
                    return nullptr;
                  },
                  nullptr);
              if (rc != 0) return rc;
              pthread_join(thread, nullptr);
              return value == 42 ? 0 : EIO;
            }));
}

TEST_F(SeccompPolicyTest, PlainCloneAndVforkWork) {
  EXPECT_EQ(0, RunInChild([] { return CloneWithFlags(SIGCHLD); }));
  EXPECT_EQ(0, RunInChild([] { return CloneWithFlags(CLONE_FILES | CLONE_FS | SIGCHLD); }));
  EXPECT_EQ(0, RunInChild([] {
              const pid_t pid = vfork();
              if (pid == 0) _exit(3);
              if (pid < 0) return errno;
              return ExpectExit(pid, 3);
            }));
}

TEST_F(SeccompPolicyTest, FilesCanBeCreatedWrittenReadAndRemoved) {
  const std::string dir = ::testing::TempDir();
  EXPECT_EQ(0, RunInChild([&] {
              std::string path = dir + "/corral-seccomp-XXXXXX";
              const int fd = mkstemp(path.data());
              if (fd < 0) return errno;
              const char text[] = "hello";
              if (write(fd, text, sizeof text) != sizeof text) return errno;
              char back[sizeof text] = {};
              if (pread(fd, back, sizeof back, 0) != sizeof back) return errno;
              struct stat st {};
              if (fstat(fd, &st) != 0) return errno;
              if (fsync(fd) != 0 || ftruncate(fd, 0) != 0) return errno;
              close(fd);
              if (faccessat(AT_FDCWD, path.c_str(), R_OK, AT_EACCESS) != 0) return errno;
              const std::string moved = path + ".moved";
              if (rename(path.c_str(), moved.c_str()) != 0) return errno;
              if (unlink(moved.c_str()) != 0) return errno;
              return memcmp(text, back, sizeof text) == 0 ? 0 : EIO;
            }));
}

TEST_F(SeccompPolicyTest, PipesCarryData) {
  EXPECT_EQ(0, RunInChild([] {
              int p[2];
              if (pipe2(p, O_CLOEXEC) != 0) return errno;
              if (write(p[1], "x", 1) != 1) return errno;
              char c = 0;
              if (read(p[0], &c, 1) != 1) return errno;
              return c == 'x' ? 0 : EIO;
            }));
}

TEST_F(SeccompPolicyTest, AllowedSocketsCanBeCreated) {
  struct Case {
    const char* name;
    int family, type, protocol;
  };
  const Case cases[] = {
      {"unix stream", AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0},
      {"unix seqpacket", AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0},
      {"unix dgram", AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0},
      {"inet stream", AF_INET, SOCK_STREAM, 0},
      {"inet tcp nonblock cloexec", AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
       IPPROTO_TCP},
      {"inet udp", AF_INET, SOCK_DGRAM, IPPROTO_UDP},
      {"inet6 stream", AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0},
      {"inet6 dgram", AF_INET6, SOCK_DGRAM, 0},
      {"netlink route raw", AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE},
      {"netlink route dgram", AF_NETLINK, SOCK_DGRAM, NETLINK_ROUTE},
      {"netlink sock_diag", AF_NETLINK, SOCK_RAW, NETLINK_SOCK_DIAG},
  };
  for (const Case& c : cases) {
    const int result = RunInChild([&] { return FdResult(socket(c.family, c.type, c.protocol)); });
    // The host may lack IPv6; the filter must not be the one saying no.
    if (c.family == AF_INET6 && result == EAFNOSUPPORT) continue;
    EXPECT_EQ(result, 0) << c.name << ": " << Describe(result);
  }
  // Ping sockets: the kernel may refuse (net.ipv4.ping_group_range), the filter must not.
  const int ping = RunInChild([] { return FdResult(socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP)); });
  EXPECT_NE(ping, EPERM);
  EXPECT_NE(ping, ENOSYS);
  // AF_UNIX with garbage in the upper half of the family: the kernel reads an int.
  EXPECT_EQ(0, RunInChild([] {
              return FdResult(syscall(SYS_socket, (1UL << 32) | AF_UNIX, SOCK_STREAM, 0));
            }));
  EXPECT_EQ(0, RunInChild([] {
              int sv[2];
              if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return errno;
              close(sv[0]);
              close(sv[1]);
              return 0;
            }));
}

TEST_F(SeccompPolicyTest, LoopbackTcpConnects) {
  EXPECT_EQ(0, RunInChild([] {
              const int server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
              if (server < 0) return errno;
              sockaddr_in addr{};
              addr.sin_family = AF_INET;
              addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
              socklen_t len = sizeof addr;
              if (bind(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
                  listen(server, 1) != 0 ||
                  getsockname(server, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
                return errno;
              }
              const int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
              if (client < 0) return errno;
              if (connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
                return errno;
              }
              const int accepted = accept4(server, nullptr, nullptr, SOCK_CLOEXEC);
              if (accepted < 0) return errno;
              if (send(client, "y", 1, 0) != 1) return errno;
              char c = 0;
              if (recv(accepted, &c, 1, 0) != 1) return errno;
              return c == 'y' ? 0 : EIO;
            }));
}

TEST_F(SeccompPolicyTest, OrdinaryIoctlsPass) {
  // Not denied: the kernel answers EBADF for fd -1, including for requests whose low bits
  // resemble a denied one.
  for (unsigned long request :
       {static_cast<unsigned long>(TCGETS), 0x5413UL /* TIOCGWINSZ */, 0x80005412UL,
        0x5412UL | 0x10000UL, 0xffffffffUL, 0UL, static_cast<unsigned long>(FIONREAD)}) {
    const int result = RunInChild([&] { return ErrnoOf(syscall(SYS_ioctl, -1, request, 0)); });
    EXPECT_EQ(result, EBADF) << std::hex << request << ": " << Describe(result);
  }
  // TCGETS on a regular file: ENOTTY from the kernel, not EPERM from the filter.
  EXPECT_EQ(ENOTTY, RunInChild([] {
              termios t{};
              return ErrnoOf(ioctl(open("/proc/self/stat", O_RDONLY | O_CLOEXEC), TCGETS, &t));
            }));
  // TCGETS on a pseudo-terminal works.
  const int pty = RunInChild([] {
    const int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0) return -errno;  // no /dev/ptmx here: reported below
    termios t{};
    return ErrnoOf(ioctl(master, TCGETS, &t));
  });
  if (pty < 0 && pty != kChildDied && pty != kFilterLoadFailed) {
    GTEST_SKIP() << "no pseudo-terminal: " << Describe(-pty);
  }
  EXPECT_EQ(pty, 0) << Describe(pty);
}

TEST_F(SeccompPolicyTest, TiocstiIsRefusedOnARealTerminal) {
  // A pty made the controlling terminal of a new session: unfiltered, TIOCSTI on it succeeds
  // (or is EIO where dev.tty.legacy_tiocsti=0), whatever our privileges; filtered it is EPERM.
  auto inject = [] {
    const int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) return kNoPty;
    const char* name = ptsname(master);
    if (name == nullptr || setsid() < 0) return kNoPty;
    const int slave = open(name, O_RDWR);  // becomes the controlling terminal
    if (slave < 0) return kNoPty;
    char c = '#';
    return ErrnoOf(ioctl(slave, TIOCSTI, &c));
  };
  const int unfiltered = RunInChild(inject, /*filtered=*/false);
  if (unfiltered == kNoPty) GTEST_SKIP() << "no pseudo-terminal";
  EXPECT_TRUE(unfiltered == 0 || unfiltered == EIO) << Describe(unfiltered);
  const int filtered = RunInChild(inject);
  EXPECT_EQ(filtered, EPERM) << Describe(filtered);
}

TEST_F(SeccompPolicyTest, DockerPersonalitiesPass) {
  for (unsigned long persona : {0x0UL, 0x8UL, 0x20000UL, 0x20008UL, 0xffffffffUL}) {
    const int result = RunInChild([&] { return ErrnoOf(syscall(SYS_personality, persona)); });
    EXPECT_EQ(result, 0) << std::hex << persona << ": " << Describe(result);
  }
}

TEST_F(SeccompPolicyTest, ExecOfTrueWorks) {
  EXPECT_EQ(0, RunInChild([] {
              const pid_t pid = fork();
              if (pid == 0) {
                char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
                execve("/bin/true", argv, environ);
                _exit(127);
              }
              if (pid < 0) return errno;
              return ExpectExit(pid, 0);
            }));
  EXPECT_EQ(0, RunInChild([] { return SpawnAndWait({"true"}); }));  // posix_spawn: clone(VFORK)
}

TEST_F(SeccompPolicyTest, EverydaySyscallsWork) {
  EXPECT_EQ(0, RunInChild([] { return getpid() > 0 ? 0 : EIO; }));
  EXPECT_EQ(0, RunInChild([] {
              char buf[16];
              return ErrnoOf(getrandom(buf, sizeof buf, 0));
            }));
  EXPECT_EQ(0, RunInChild([] {
              struct statx stx {};
              return ErrnoOf(statx(AT_FDCWD, "/", 0, STATX_BASIC_STATS, &stx));
            }));
  EXPECT_EQ(0, RunInChild([] { return ErrnoOf(syscall(SYS_faccessat2, AT_FDCWD, "/", R_OK, 0)); }));
  EXPECT_EQ(0, RunInChild([] { return FdResult(memfd_create("corral-test", MFD_CLOEXEC)); }));
  EXPECT_EQ(0, RunInChild([] { return ErrnoOf(close_range(1000, ~0U, 0)); }));
  EXPECT_EQ(0, RunInChild([] { return FdResult(syscall(SYS_pidfd_open, getpid(), 0)); }));
  EXPECT_EQ(0, RunInChild([] {
              timespec ts{0, 1000};
              return ErrnoOf(clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, nullptr));
            }));
  EXPECT_EQ(0, RunInChild([] { return ErrnoOf(prctl(PR_SET_NAME, "corral-test", 0, 0, 0)); }));
  EXPECT_EQ(0, RunInChild([] { return ErrnoOf(sched_yield()); }));
  EXPECT_EQ(0, RunInChild([] {
              const long r = syscall(SYS_membarrier, 0 /* MEMBARRIER_CMD_QUERY */, 0, 0);
              return ErrnoOf(r);
            }));
}

// Real programs, as a sandbox runs them. Skipped when the program is not installed.
class SeccompRealProgramTest : public SeccompPolicyTest {
 protected:
  void ExpectRuns(std::vector<std::string> args) {
    const std::string program = args[0];
    const int result = RunInChild([&] { return SpawnAndWait(args); });
    EXPECT_EQ(result, 0) << program << " under the filter: " << Describe(result);
  }
  static bool Installed(const std::string& name) {
    return RunInChild(
               [&] {
                 return SpawnAndWait({"sh", "-c", "command -v " + name + " >/dev/null"});
               },
               false) == 0;
  }
};

TEST_F(SeccompRealProgramTest, Shell) {
  ExpectRuns({"sh", "-c",
              "set -e; d=$(mktemp -d); echo hi > \"$d/f\"; cat \"$d/f\" | grep -q hi; "
              "ls / > /dev/null; (sleep 0 &); wait; rm -r \"$d\""});
}

TEST_F(SeccompRealProgramTest, Python) {
  if (!Installed("python3")) GTEST_SKIP() << "python3 not installed";
  ExpectRuns(
      {"python3", "-c",
       "import os, socket, subprocess, tempfile, threading, multiprocessing\n"
       "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
       "assert subprocess.run(['true']).returncode == 0\n"
       "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); s.close()\n"
       "socket.if_nameindex()\n"
       "with tempfile.TemporaryDirectory() as d: open(os.path.join(d, 'x'), 'w').write('y')\n"
       "os.urandom(8)\n"});
}

TEST_F(SeccompRealProgramTest, Node) {
  if (!Installed("node")) GTEST_SKIP() << "node not installed";
  ExpectRuns({"node", "-e",
              "const cp = require('child_process'), fs = require('fs'), os = require('os'), "
              "net = require('net');"
              "if (cp.spawnSync('true').status !== 0) process.exit(1);"
              "const d = fs.mkdtempSync(os.tmpdir() + '/corral-');"
              "fs.writeFileSync(d + '/f', 'x'); fs.rmSync(d, {recursive: true});"
              "os.networkInterfaces(); os.cpus();"
              "const s = net.createServer().listen(0, '127.0.0.1', () => s.close());"});
}

TEST_F(SeccompRealProgramTest, Git) {
  if (!Installed("git")) GTEST_SKIP() << "git not installed";
  ExpectRuns({"sh", "-c",
              "set -e; d=$(mktemp -d); cd \"$d\"; git init -q; echo x > f; git add f; "
              "git -c user.name=t -c user.email=t@t commit -qm m; git log --oneline >/dev/null; "
              "cd /; rm -rf \"$d\""});
}

TEST_F(SeccompRealProgramTest, Compiler) {
  if (!Installed("cc")) GTEST_SKIP() << "no C compiler installed";
  ExpectRuns({"sh", "-c",
              "set -e; d=$(mktemp -d); printf 'int main(void){return 0;}\\n' > \"$d/m.c\"; "
              "cc -O1 -o \"$d/m\" \"$d/m.c\"; \"$d/m\"; rm -rf \"$d\""});
}

// ---------------------------------------------------------------------------------------------
// The other x86 ABIs. x32 syscalls are the x86_64 instruction with bit 30 set in the number;
// i386 syscalls are `int $0x80` from this 64-bit process (IA32 emulation), which the kernel
// reports to seccomp as AUDIT_ARCH_I386.

#if defined(__x86_64__)

constexpr long kX32Bit = 0x40000000;

long X32Nr(const char* name) { return seccomp_syscall_resolve_name_arch(SCMP_ARCH_X32, name); }
long I386Nr(const char* name) { return seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86, name); }

// An i386 syscall; arguments are 32-bit. Returns -errno like the kernel.
int Int80(long nr, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0) {
  long ret;
  asm volatile("int $0x80"
               : "=a"(ret)
               : "a"(nr), "b"(a), "c"(b), "d"(c), "S"(d), "D"(e)
               : "memory", "r8", "r9", "r10", "r11");
  return static_cast<int>(ret);
}
int Int80Errno(int ret) { return ret < 0 && ret > -4096 ? -ret : 0; }

TEST_F(SeccompPolicyTest, X32AbiIsFiltered) {
  ASSERT_GT(X32Nr("unshare"), kX32Bit);
  auto x32 = [](const char* name, long a, long b = 0, long c = 0) {
    return RunInChild([=] { return ErrnoOf(syscall(X32Nr(name), a, b, c)); });
  };
  EXPECT_EQ(x32("unshare", CLONE_NEWUSER), EPERM);
  EXPECT_EQ(x32("mount", 0), EPERM);
  EXPECT_EQ(x32("socket", AF_ALG, SOCK_SEQPACKET), EPERM);
  EXPECT_EQ(x32("socket", AF_INET, SOCK_RAW, IPPROTO_ICMP), EPERM);
  EXPECT_EQ(x32("ioctl", -1, TIOCSTI), EPERM);
  EXPECT_EQ(x32("clone", CLONE_NEWUSER | SIGCHLD), EPERM);
  EXPECT_EQ(x32("clone3", 0), ENOSYS);
  EXPECT_EQ(x32("bpf", -1), EPERM);
  EXPECT_EQ(RunInChild([] { return ErrnoOf(syscall(kX32Bit | 500)); }), ENOSYS);
  // Allowed x32 calls reach the kernel, which may not run x32 at all (ENOSYS then): the point
  // is that the filter did not say EPERM.
  const int getpid_x32 = x32("getpid", 0);
  EXPECT_TRUE(getpid_x32 == 0 || getpid_x32 == ENOSYS) << Describe(getpid_x32);
}

TEST_F(SeccompPolicyTest, I386AbiIsFiltered) {
  // Is IA32 emulation on? Without it `int $0x80` faults and the child dies.
  const int probe = RunInChild(
      [] {
        signal(SIGSEGV, SIG_DFL);  // die quietly, even under a sanitizer's handler
        return Int80(I386Nr("getpid")) > 0 ? 0 : EIO;
      },
      false);
  if (probe != 0) {
    GTEST_SKIP() << "int $0x80 does not work here (IA32 emulation off; PVM hosts run 64-bit "
                    "code only): "
                 << Describe(probe) << ". The interpreter tests cover x86.";
  }

  auto call32 = [](const char* name, long a = 0, long b = 0, long c = 0) {
    const long nr = I386Nr(name);
    return RunInChild([=] { return Int80Errno(Int80(nr, a, b, c)); });
  };
  // Allowed, and the kernel answers.
  EXPECT_EQ(RunInChild([] { return Int80(I386Nr("getpid")) == getpid() ? 0 : EIO; }), 0);
  EXPECT_EQ(call32("ioctl", -1, TCGETS), EBADF);
  EXPECT_EQ(call32("personality", 0xffffffff), 0);
  // Denied.
  EXPECT_EQ(call32("unshare", CLONE_NEWUSER), EPERM);
  EXPECT_EQ(call32("setns", -1, 0), EPERM);
  EXPECT_EQ(call32("mount"), EPERM);
  EXPECT_EQ(call32("umount"), EPERM);
  EXPECT_EQ(call32("fsopen"), EPERM);
  EXPECT_EQ(call32("io_uring_setup"), EPERM);
  EXPECT_EQ(call32("bpf", -1), EPERM);
  EXPECT_EQ(call32("ptrace"), EPERM);
  EXPECT_EQ(call32("modify_ldt"), EPERM);
  EXPECT_EQ(call32("vm86old"), EPERM);
  EXPECT_EQ(call32("vm86"), EPERM);
  EXPECT_EQ(call32("stime"), EPERM);
  EXPECT_EQ(call32("clone", CLONE_NEWUSER | SIGCHLD), EPERM);
  EXPECT_EQ(call32("clone3"), ENOSYS);
  EXPECT_EQ(call32("ioctl", -1, TIOCSTI), EPERM);
  EXPECT_EQ(call32("personality", ADDR_NO_RANDOMIZE), EPERM);
  EXPECT_EQ(RunInChild([] { return Int80Errno(Int80(500)); }), ENOSYS);
  // Sockets cannot be created on i386, directly or through socketcall(2); socketcall's other
  // sub-calls pass (EBADF/EFAULT from the kernel).
  EXPECT_EQ(call32("socket", AF_UNIX, SOCK_STREAM), EPERM);
  EXPECT_EQ(call32("socketpair", AF_UNIX, SOCK_STREAM), EPERM);
  const long socketcall = I386Nr("socketcall");
  ASSERT_GT(socketcall, 0);
  EXPECT_EQ(RunInChild([=] { return Int80Errno(Int80(socketcall, 1 /* SYS_SOCKET */, 0)); }),
            EPERM);
  EXPECT_EQ(RunInChild([=] { return Int80Errno(Int80(socketcall, 8 /* SYS_SOCKETPAIR */, 0)); }),
            EPERM);
  const int getsockname =
      RunInChild([=] { return Int80Errno(Int80(socketcall, 6 /* SYS_GETSOCKNAME */, 0)); });
  EXPECT_TRUE(getsockname == EFAULT || getsockname == EBADF) << Describe(getsockname);
  const int connect_direct = call32("connect", -1, 0, 0);
  EXPECT_EQ(connect_direct, EBADF);
}

#endif  // __x86_64__

}  // namespace
}  // namespace corral::isolation

// The program embedded at build time is exactly what the policy compiles to now.
#include "isolation/seccomp_program.h"

namespace corral::isolation {
namespace {

TEST(PrecompiledSeccompProgramTest, MatchesAFreshCompile) {
  auto fresh = CompileSeccompPolicy();
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  SeccompProgram embedded = PrecompiledSeccompPolicy();
  ASSERT_EQ(embedded.instructions.size(), fresh->instructions.size());
  for (size_t i = 0; i < embedded.instructions.size(); ++i) {
    const sock_filter& a = embedded.instructions[i];
    const sock_filter& b = fresh->instructions[i];
    ASSERT_TRUE(a.code == b.code && a.jt == b.jt && a.jf == b.jf && a.k == b.k) << "instruction " << i;
  }
}

}  // namespace
}  // namespace corral::isolation
