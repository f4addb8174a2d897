// Tests of the seccomp policy's tables and of the compiled program. The filter's behaviour is
// tried in seccomp_filter_test.cc (loaded for real) and seccomp_bpf_test.cc (evaluated for every
// ABI); beside most denials there runs a control without the filter, so a refusal is shown to
// come from the filter and not from missing privileges.
#include "tests/unit/seccomp_test_util.h"

namespace corral::isolation {
namespace {

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
