// The compiled seccomp program, evaluated: a classic-BPF interpreter asks the filter about every
// architecture and argument value, including ABIs this kernel cannot run; and the x32 and i386
// ABIs tried for real where the kernel allows.
#include "tests/unit/seccomp_test_util.h"

namespace corral::isolation {
namespace {

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
// The other x86 ABIs. x32 syscalls are the x86_64 instruction with bit 30 set in the number;
// i386 syscalls are `int $0x80` from this 64-bit process (IA32 emulation), which the kernel
// reports to seccomp as AUDIT_ARCH_I386.

#if defined(__x86_64__)

constexpr long kX32Bit = 0x40000000;

long X32Nr(const char* name) { return seccomp_syscall_resolve_name_arch(SCMP_ARCH_X32, name); }
// The i386 number the kernel takes: the direct socket calls by the kernel's table (libseccomp
// gives their socketcall pseudo-numbers, which are no syscall at all), the rest by libseccomp.
long I386Nr(const char* name) {
  auto direct = kX86DirectSocketCalls.find(name);
  if (direct != kX86DirectSocketCalls.end()) return direct->second;
  return seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86, name);
}

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
