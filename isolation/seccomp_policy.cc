#include "isolation/seccomp_policy.h"

#include <netinet/in.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/unique_fd.h"

namespace corral::isolation {
namespace {

// Syscalls in neither table: ENOSYS, so libc falls back (e.g. clone3 -> clone, and whatever
// the kernel adds after this policy was written).
constexpr uint32_t kDefaultAction = SCMP_ACT_ERRNO(ENOSYS);
constexpr uint32_t kDeny = SCMP_ACT_ERRNO(EPERM);
constexpr uint32_t kAllow = SCMP_ACT_ALLOW;

// The low 32 bits of an argument. The kernel truncates int and unsigned int arguments (ioctl's
// request, socket's family and protocol, personality) to 32 bits, so the filter must not let
// the upper half change its answer: ioctl(fd, (1UL << 32) | TIOCSTI) is a TIOCSTI.
constexpr uint64_t kLow32 = 0xffffffffULL;

constexpr uint64_t kNamespaceCloneFlags[] = {
    CLONE_NEWNS,   CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
    CLONE_NEWUSER, CLONE_NEWPID,    CLONE_NEWNET, CLONE_NEWTIME,
};

struct ScmpCtxDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};
using ScmpCtx = std::unique_ptr<void, ScmpCtxDeleter>;

// libseccomp returns -errno.
Status ScmpError(std::string_view step, int rc) { return ErrnoError(step, -rc); }

std::string ArchName(uint32_t arch) {
  switch (arch) {
    case SCMP_ARCH_X86_64:
      return "x86_64";
    case SCMP_ARCH_X86:
      return "x86";
    case SCMP_ARCH_X32:
      return "x32";
    case SCMP_ARCH_AARCH64:
      return "aarch64";
    case SCMP_ARCH_ARM:
      return "arm";
    default:
      return "arch " + std::to_string(arch);
  }
}

// x86 (i386) reaches socket calls both directly and through socketcall(2); libseccomp turns a
// rule on "socket" into one on socketcall(SYS_SOCKET, args) whose remaining argument checks
// then read socketcall's own arguments (a pointer), not socket's. So on x86 socket argument
// rules are not expressible and socket creation is refused outright.
bool SocketArgumentsFilterable(uint32_t arch) { return arch != SCMP_ARCH_X86; }

// Whether `name` exists on `arch` as libseccomp knows it. Multiplexed pseudo-numbers (-100 to
// -224: socket and SysV IPC calls reached through socketcall/ipc) count on the architectures
// that have the multiplexer; pseudo-numbers below -10000 mean "not on this architecture".
bool ExistsOnArch(const std::string& name, uint32_t arch) {
  const int nr = seccomp_syscall_resolve_name_arch(arch, name.c_str());
  if (nr >= 0) return true;
  if (nr == __NR_SCMP_ERROR || nr <= -10000) return false;
  return arch == SCMP_ARCH_X86;  // the only filtered ABI with socketcall(2) and ipc(2)
}

// Adds one rule for `name`, skipped on architectures without that syscall. The syscall is
// passed as the native number (or pseudo-number) and libseccomp translates it by name.
Status AddRule(scmp_filter_ctx ctx, uint32_t arch, const std::string& name, uint32_t action,
               const std::vector<scmp_arg_cmp>& args = {}) {
  const int native_nr = seccomp_syscall_resolve_name(name.c_str());
  if (native_nr == __NR_SCMP_ERROR) return Status::Error("seccomp: unknown syscall " + name);
  if (!ExistsOnArch(name, arch)) return Status();
  const int rc = seccomp_rule_add_array(ctx, action, native_nr,
                                        static_cast<unsigned int>(args.size()), args.data());
  if (rc < 0) return ScmpError("seccomp_rule_add " + name + " (" + ArchName(arch) + ")", rc);
  return Status();
}

// A set of 32-bit values, as `(value & mask) == match` for a comparison.
struct MaskedValue {
  uint32_t mask;
  uint32_t match;
};

// Disjoint blocks that together match every value of the bit space `space` except the listed
// ones, walking a binary trie from the top bit down (at most 32 blocks per listed value).
// libseccomp gives no precedence between overlapping rules with different actions (an
// unconditional ALLOW silently swallows a conditional EPERM on the same syscall), so "deny
// these values, allow the rest" is written as rules that never overlap.
void CoverComplement(const std::vector<uint32_t>& listed, uint32_t space, uint32_t prefix_mask,
                     uint32_t prefix, std::vector<MaskedValue>* out) {
  if (listed.empty()) {
    out->push_back({prefix_mask, prefix});
    return;
  }
  const uint32_t remaining = space & ~prefix_mask;
  if (remaining == 0) return;  // exactly one listed value: not part of the complement
  const uint32_t bit = 1u << (31 - __builtin_clz(remaining));
  std::vector<uint32_t> zero, one;
  for (uint32_t v : listed) ((v & bit) ? one : zero).push_back(v);
  CoverComplement(zero, space, prefix_mask | bit, prefix, out);
  CoverComplement(one, space, prefix_mask | bit, prefix | bit, out);
}

std::vector<MaskedValue> ComplementOf(std::vector<uint32_t> listed, uint32_t space) {
  for (uint32_t& v : listed) v &= space;
  std::vector<MaskedValue> out;
  CoverComplement(listed, space, 0, 0, &out);
  return out;
}

scmp_arg_cmp Low32Equals(unsigned int arg, uint32_t value) {
  return scmp_arg_cmp{arg, SCMP_CMP_MASKED_EQ, kLow32, value};
}
scmp_arg_cmp Masked(unsigned int arg, MaskedValue block) {
  return scmp_arg_cmp{arg, SCMP_CMP_MASKED_EQ, block.mask, block.match};
}

// Values of argument `arg` whose low 32 bits are in `listed` get `listed_action`; values
// whose bits within `space` differ from every listed value get `other_action`. With `space` =
// kLow32 that is every other value. A smaller space keeps the rule count down where the kernel
// rejects large values anyway (socket families >= AF_MAX, IP protocols >= IPPROTO_MAX): such a
// value whose bits within `space` match a listed one gets the default action, ENOSYS.
// `prefix` conditions are prepended to every rule.
Status AddValueSplit(scmp_filter_ctx ctx, uint32_t arch, const std::string& name,
                     const std::vector<scmp_arg_cmp>& prefix, unsigned int arg,
                     const std::vector<uint32_t>& listed, uint32_t listed_action,
                     uint32_t other_action, uint32_t space = kLow32) {
  for (uint32_t value : listed) {
    std::vector<scmp_arg_cmp> args = prefix;
    args.push_back(Low32Equals(arg, value));
    RETURN_IF_ERROR(AddRule(ctx, arch, name, listed_action, args));
  }
  for (MaskedValue block : ComplementOf(listed, space)) {
    std::vector<scmp_arg_cmp> args = prefix;
    args.push_back(Masked(arg, block));
    RETURN_IF_ERROR(AddRule(ctx, arch, name, other_action, args));
  }
  return Status();
}

// clone(2): allowed unless a namespace flag is set. The rules are disjoint: ALLOW needs every
// flag clear, each EPERM rule needs one flag set. CLONE_NEWTIME (0x80) lies inside clone's
// CSIGNAL byte (clone cannot create a time namespace), so masking it only refuses exit
// signals >= 128, which the kernel rejects anyway.
Status AddCloneRules(scmp_filter_ctx ctx, uint32_t arch) {
  uint64_t all = 0;
  for (uint64_t flag : kNamespaceCloneFlags) all |= flag;
  RETURN_IF_ERROR(AddRule(ctx, arch, "clone", kAllow, {{0, SCMP_CMP_MASKED_EQ, all, 0}}));
  for (uint64_t flag : kNamespaceCloneFlags) {
    RETURN_IF_ERROR(AddRule(ctx, arch, "clone", kDeny, {{0, SCMP_CMP_MASKED_EQ, flag, flag}}));
  }
  // clone3 gets ENOSYS. While that is the default action it needs no rule (libseccomp
  // refuses a rule whose action equals the default, with EACCES).
  if (kDefaultAction != SCMP_ACT_ERRNO(ENOSYS)) {
    RETURN_IF_ERROR(AddRule(ctx, arch, "clone3", SCMP_ACT_ERRNO(ENOSYS)));
  }
  return Status();
}

Status AddSocketRules(scmp_filter_ctx ctx, uint32_t arch) {
  if (!SocketArgumentsFilterable(arch)) {
    RETURN_IF_ERROR(AddRule(ctx, arch, "socket", kDeny));
    return AddRule(ctx, arch, "socketpair", kDeny);
  }
  // The kernel refuses families >= AF_MAX (46) and IP protocols >= IPPROTO_MAX (263) itself,
  // so the EPERM covers span 6 and 9 bits (see AddValueSplit).
  constexpr uint32_t kFamilySpace = 0x3f;
  constexpr uint32_t kProtocolSpace = 0x1ff;
  static_assert(AF_MAX <= kFamilySpace + 1 && IPPROTO_MAX <= kProtocolSpace + 1);

  // Families: UNIX and NETLINK whatever the type and protocol (`ip` uses SOCK_RAW netlink),
  // INET/INET6 checked further below, every other family EPERM (AF_ALG, AF_VSOCK, AF_PACKET,
  // AF_TIPC, AF_RDS, ...).
  for (MaskedValue block : ComplementOf({AF_UNIX, AF_NETLINK, AF_INET, AF_INET6}, kFamilySpace)) {
    RETURN_IF_ERROR(AddRule(ctx, arch, "socket", kDeny, {Masked(0, block)}));
  }
  RETURN_IF_ERROR(AddRule(ctx, arch, "socket", kAllow, {Low32Equals(0, AF_UNIX)}));
  RETURN_IF_ERROR(AddRule(ctx, arch, "socket", kAllow, {Low32Equals(0, AF_NETLINK)}));
  constexpr uint32_t kSockTypeMask = 0xf;  // the rest are SOCK_NONBLOCK and SOCK_CLOEXEC
  for (uint32_t family : {AF_INET, AF_INET6}) {
    const scmp_arg_cmp is_family = Low32Equals(0, family);
    // Type: STREAM or DGRAM; SOCK_RAW, SOCK_PACKET and SCTP's SOCK_SEQPACKET are refused.
    for (MaskedValue block : ComplementOf({SOCK_STREAM, SOCK_DGRAM}, kSockTypeMask)) {
      RETURN_IF_ERROR(AddRule(ctx, arch, "socket", kDeny, {is_family, Masked(1, block)}));
    }
    // Protocol: TCP, UDP or ping, so that no other IP protocol module (SCTP, L2TP, MPTCP,
    // UDP-Lite) is reachable, or autoloaded, from inside.
    const uint32_t ping = family == AF_INET ? uint32_t{IPPROTO_ICMP} : uint32_t{IPPROTO_ICMPV6};
    RETURN_IF_ERROR(AddValueSplit(ctx, arch, "socket",
                                  {is_family, Masked(1, {kSockTypeMask, SOCK_STREAM})}, 2,
                                  {0, IPPROTO_TCP}, kAllow, kDeny, kProtocolSpace));
    RETURN_IF_ERROR(AddValueSplit(ctx, arch, "socket",
                                  {is_family, Masked(1, {kSockTypeMask, SOCK_DGRAM})}, 2,
                                  {0, IPPROTO_UDP, ping}, kAllow, kDeny, kProtocolSpace));
  }
  // socketpair: only AF_UNIX makes pairs, but the kernel creates the sockets of the other
  // families before it says so; refuse them before any family code runs.
  return AddValueSplit(ctx, arch, "socketpair", {}, 0, {AF_UNIX}, kAllow, kDeny, kFamilySpace);
}

// ioctl: TIOCSTI pushes input into a terminal (the sandbox could type into the shell that
// reads its output: CVE-2017-5226, bubblewrap); TIOCLINUX can read and paste the virtual
// console's selection; TIOCSETD switches line discipline (n_hdlc CVE-2017-2636, n_gsm
// CVE-2023-6546). Every other request is allowed.
Status AddIoctlRules(scmp_filter_ctx ctx, uint32_t arch) {
  return AddValueSplit(ctx, arch, "ioctl", {}, 1, {TIOCSTI, TIOCLINUX, TIOCSETD}, kDeny, kAllow);
}

// personality: Docker's values. ADDR_NO_RANDOMIZE and READ_IMPLIES_EXEC (which weaken the
// memory layout of whatever runs next) and foreign execution domains are refused.
Status AddPersonalityRules(scmp_filter_ctx ctx, uint32_t arch) {
  constexpr uint32_t kPerLinux = PER_LINUX, kPerLinux32 = PER_LINUX32, kUname26 = UNAME26;
  return AddValueSplit(ctx, arch, "personality", {}, 0,
                       {kPerLinux, kPerLinux32, kUname26, kUname26 | kPerLinux32, 0xffffffffu},
                       kAllow, kDeny);
}

// One architecture's filter, in a context of its own: seccomp_merge() joins them later. A
// per-architecture context lets x86 differ (socket rules) without libseccomp rewriting rules
// behind our back.
StatusOr<ScmpCtx> BuildArchFilter(uint32_t arch) {
  const std::string where = " (" + ArchName(arch) + ")";
  ScmpCtx ctx(seccomp_init(kDefaultAction));
  if (!ctx) return Status::Error("seccomp_init" + where + " failed");
  if (arch != seccomp_arch_native()) {
    int rc = seccomp_arch_add(ctx.get(), arch);
    if (rc < 0) return ScmpError("seccomp_arch_add" + where, rc);
    rc = seccomp_arch_remove(ctx.get(), SCMP_ARCH_NATIVE);
    if (rc < 0) return ScmpError("seccomp_arch_remove native" + where, rc);
  }
  // The loader sets no_new_privs itself, before anything else that needs it.
  int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 0);
  if (rc < 0) return ScmpError("seccomp_attr_set CTL_NNP" + where, rc);
  // Every ABI the CPU runs is in the filter, so another audit arch cannot be legitimate.
  rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  if (rc < 0) return ScmpError("seccomp_attr_set ACT_BADARCH" + where, rc);
  // A binary search over syscall numbers instead of a linear scan of ~300 entries.
  rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_OPTIMIZE, 2);
  if (rc < 0) return ScmpError("seccomp_attr_set CTL_OPTIMIZE" + where, rc);

  for (const SyscallGroup& group : AllowedSyscallGroups()) {
    for (const std::string& name : group.syscalls) {
      RETURN_IF_ERROR(AddRule(ctx.get(), arch, name, kAllow));
    }
  }
  for (const DeniedSyscall& denied : DeniedSyscalls()) {
    RETURN_IF_ERROR(AddRule(ctx.get(), arch, denied.name, kDeny));
  }
  RETURN_IF_ERROR(AddCloneRules(ctx.get(), arch));
  RETURN_IF_ERROR(AddSocketRules(ctx.get(), arch));
  RETURN_IF_ERROR(AddIoctlRules(ctx.get(), arch));
  RETURN_IF_ERROR(AddPersonalityRules(ctx.get(), arch));
  return ctx;
}

// seccomp_export_bpf() writes to an fd; a memfd keeps the program off the file system.
StatusOr<SeccompProgram> ExportBpf(scmp_filter_ctx ctx) {
  UniqueFd fd(memfd_create("corral-seccomp-bpf", MFD_CLOEXEC));
  if (!fd) return ErrnoError("memfd_create for seccomp BPF");
  const int rc = seccomp_export_bpf(ctx, fd.get());
  if (rc < 0) return ScmpError("seccomp_export_bpf", rc);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return ErrnoError("fstat seccomp BPF memfd");
  const auto size = static_cast<size_t>(st.st_size);
  if (size == 0 || size % sizeof(sock_filter) != 0) {
    return Status::Error("seccomp_export_bpf: odd program size " + std::to_string(size));
  }
  if (size / sizeof(sock_filter) > BPF_MAXINSNS) {
    return Status::Error("seccomp program too long: " + std::to_string(size / sizeof(sock_filter)) +
                         " instructions, the kernel takes " + std::to_string(BPF_MAXINSNS));
  }
  SeccompProgram program;
  program.instructions.resize(size / sizeof(sock_filter));
  auto* bytes = reinterpret_cast<char*>(program.instructions.data());
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pread(fd.get(), bytes + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("read seccomp BPF memfd");
    if (n == 0) return Status::Error("read seccomp BPF memfd: short read");
    done += static_cast<size_t>(n);
  }
  return program;
}

}  // namespace

namespace {

// The allowlist as data: each group's names, then the group with its description; the
// table lists the groups in the order the filter adds them.

struct AllowedGroupTable {
  const char* name;
  const char* description;
  std::span<const char* const> syscalls;
};

constexpr const char* kProcessSyscalls[] = {
    "execve", "execveat", "exit", "exit_group", "fork", "vfork", "wait4", "waitid", "waitpid",
    "getpid", "getppid", "gettid", "getpgid", "getpgrp", "setpgid", "getsid", "setsid",
    "set_tid_address", "set_robust_list", "get_robust_list", "rseq", "restart_syscall", "futex",
    "futex_time64", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue", "pidfd_open",
    "pidfd_send_signal", "process_mrelease", "arch_prctl", "get_thread_area", "set_thread_area",
    "uname",
};
constexpr AllowedGroupTable kProcessGroup = {
    "process",
    "Process and thread life cycle: exec, exit, fork/vfork (clone is argument-filtered), wait, "
    "process ids and sessions, futexes, robust lists, rseq, pidfds for own descendants, TLS "
    "setup.",
    kProcessSyscalls};

constexpr const char* kMemorySyscalls[] = {
    "brk", "mmap", "mmap2", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync", "mlock",
    "mlock2", "mlockall", "munlock", "munlockall", "remap_file_pages", "membarrier", "memfd_create",
    "pkey_alloc", "pkey_free", "pkey_mprotect", "map_shadow_stack",
};
constexpr AllowedGroupTable kMemoryGroup = {
    "memory",
    "Address space: mappings, protections, advice, locking (bounded by RLIMIT_MEMLOCK), memfd, "
    "protection keys, x86 shadow stacks, membarrier.",
    kMemorySyscalls};

constexpr const char* kFileIoSyscalls[] = {
    "open", "openat", "openat2", "creat", "read", "write", "readv", "writev", "pread64", "pwrite64",
    "preadv", "pwritev", "preadv2", "pwritev2", "lseek", "_llseek", "sendfile", "sendfile64",
    "splice", "tee", "vmsplice", "copy_file_range", "fallocate", "fadvise64", "fadvise64_64",
    "readahead", "cachestat", "fsync", "fdatasync", "sync", "syncfs", "sync_file_range", "truncate",
    "truncate64", "ftruncate", "ftruncate64",
};
constexpr AllowedGroupTable kFileIoGroup = {
    "file-io",
    "Reading and writing open files: read/write families, seeks, zero-copy (sendfile, splice, "
    "copy_file_range), preallocation and advice, syncing, truncation, open/openat/openat2.",
    kFileIoSyscalls};

constexpr const char* kAsyncIoSyscalls[] = {
    "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents",
    "io_pgetevents_time64",
};
constexpr AllowedGroupTable kAsyncIoGroup = {
    "async-io",
    "Linux native AIO (io_setup family; io_uring is denied). Used by databases and some runtimes; "
    "bounded by fs.aio-max-nr.",
    kAsyncIoSyscalls};

constexpr const char* kFileMetadataSyscalls[] = {
    "stat", "fstat", "lstat", "newfstatat", "stat64", "fstat64", "lstat64", "fstatat64", "statx",
    "statfs", "fstatfs", "statfs64", "fstatfs64", "access", "faccessat", "faccessat2", "readlink",
    "readlinkat", "getdents", "getdents64", "getcwd", "chdir", "fchdir", "umask", "mkdir",
    "mkdirat", "rmdir", "rename", "renameat", "renameat2", "link", "linkat", "symlink", "symlinkat",
    "unlink", "unlinkat", "mknod", "mknodat", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown",
    "fchown", "lchown", "fchownat", "chown32", "fchown32", "lchown32", "utime", "utimes",
    "utimensat", "utimensat_time64", "futimesat", "getxattr", "lgetxattr", "fgetxattr", "setxattr",
    "lsetxattr", "fsetxattr", "listxattr", "llistxattr", "flistxattr", "removexattr",
    "lremovexattr", "fremovexattr", "inotify_init", "inotify_init1", "inotify_add_watch",
    "inotify_rm_watch",
};
constexpr AllowedGroupTable kFileMetadataGroup = {
    "file-metadata",
    "Paths and inodes: stat families, access checks (faccessat2 included so glibc need not fall "
    "back), directories, links, renames, permissions and owners (capabilities are dropped, so "
    "only what the caller owns), timestamps, xattrs, inotify, cwd and umask.",
    kFileMetadataSyscalls};

constexpr const char* kFdAndPollSyscalls[] = {
    "close", "close_range", "dup", "dup2", "dup3", "fcntl", "fcntl64", "flock", "pipe", "pipe2",
    "eventfd", "eventfd2", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
    "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "ppoll_time64", "select", "_newselect",
    "pselect6", "pselect6_time64",
};
constexpr AllowedGroupTable kFdAndPollGroup = {
    "fd-and-poll",
    "File descriptors and readiness: close/close_range, dup, fcntl, flock, pipes, eventfd, epoll "
    "(epoll_pwait2 included), poll and select (ioctl is argument-filtered).",
    kFdAndPollSyscalls};

constexpr const char* kTimeSyscalls[] = {
    "time", "gettimeofday", "clock_gettime", "clock_gettime64", "clock_getres",
    "clock_getres_time64", "clock_nanosleep", "clock_nanosleep_time64", "nanosleep", "alarm",
    "getitimer", "setitimer", "timer_create", "timer_settime", "timer_settime64", "timer_gettime",
    "timer_gettime64", "timer_getoverrun", "timer_delete", "timerfd_create", "timerfd_settime",
    "timerfd_settime64", "timerfd_gettime", "timerfd_gettime64", "times",
};
constexpr AllowedGroupTable kTimeGroup = {
    "time",
    "Reading clocks, sleeping, interval timers, POSIX timers and timerfds (setting clocks is "
    "denied).",
    kTimeSyscalls};

constexpr const char* kSignalsSyscalls[] = {
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigsuspend", "rt_sigpending",
    "rt_sigtimedwait", "rt_sigtimedwait_time64", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
    "sigaltstack", "sigreturn", "sigprocmask", "kill", "tkill", "tgkill", "signalfd", "signalfd4",
    "pause",
};
constexpr AllowedGroupTable kSignalsGroup = {
    "signals",
    "Signal handling and delivery; kill reaches only processes in the sandbox's own PID "
    "namespace.",
    kSignalsSyscalls};

constexpr const char* kSocketsSyscalls[] = {
    "bind", "connect", "listen", "accept", "accept4", "getsockname", "getpeername", "getsockopt",
    "setsockopt", "sendto", "recvfrom", "send", "recv", "sendmsg", "recvmsg", "sendmmsg",
    "recvmmsg", "recvmmsg_time64", "shutdown",
};
constexpr AllowedGroupTable kSocketsGroup = {
    "sockets",
    "Operations on sockets the sandbox may create (socket and socketpair are argument-filtered); "
    "the network namespace holds only lo. On x86 these are also reached through socketcall(2), "
    "one rule per sub-call.",
    kSocketsSyscalls};

constexpr const char* kIpcSyscalls[] = {
    "ipc", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop",
    "semtimedop_time64", "semctl", "shmget", "shmat", "shmdt", "shmctl", "mq_open", "mq_unlink",
    "mq_timedsend", "mq_timedsend_time64", "mq_timedreceive", "mq_timedreceive_time64", "mq_notify",
    "mq_getsetattr",
};
constexpr AllowedGroupTable kIpcGroup = {
    "ipc",
    "System V IPC and POSIX message queues; the sandbox has its own IPC namespace (ipc(2) is the "
    "x86 multiplexer).",
    kIpcSyscalls};

constexpr const char* kIdentitySyscalls[] = {
    "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", "setuid",
    "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid", "setgroups",
    "getuid32", "geteuid32", "getgid32", "getegid32", "getresuid32", "getresgid32", "getgroups32",
    "setuid32", "setgid32", "setreuid32", "setregid32", "setresuid32", "setresgid32", "setfsuid32",
    "setfsgid32", "setgroups32",
};
constexpr AllowedGroupTable kIdentityGroup = {
    "identity",
    "User and group ids. Changing them is allowed: the process is in a user namespace whose map "
    "holds only the sandbox's own unprivileged host range, and has no capabilities.",
    kIdentitySyscalls};

constexpr const char* kLimitsAndPrctlSyscalls[] = {
    "getrlimit", "setrlimit", "prlimit64", "ugetrlimit", "getrusage", "prctl", "capget", "capset",
};
constexpr AllowedGroupTable kLimitsAndPrctlGroup = {
    "limits-and-prctl",
    "Resource limits (within the hard limits set before exec), usage, prctl, and capabilities "
    "(capset can only drop: the sets are empty).",
    kLimitsAndPrctlSyscalls};

constexpr const char* kSchedulingSyscalls[] = {
    "sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_setparam",
    "sched_getscheduler", "sched_setscheduler", "sched_get_priority_max", "sched_get_priority_min",
    "sched_rr_get_interval", "sched_rr_get_interval_time64", "sched_getattr", "sched_setattr",
    "getpriority", "setpriority", "ioprio_get", "ioprio_set", "getcpu",
};
constexpr AllowedGroupTable kSchedulingGroup = {
    "scheduling",
    "CPU affinity, policy and priority of the sandbox's own processes (cgroup limits still "
    "apply), I/O priority.",
    kSchedulingSyscalls};

constexpr const char* kSelfRestrictionSyscalls[] = {
    "seccomp", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
};
constexpr AllowedGroupTable kSelfRestrictionGroup = {
    "self-restriction",
    "Ways for a process to narrow its own rights further: stacking another seccomp filter and "
    "Landlock. Neither can widen anything.",
    kSelfRestrictionSyscalls};

constexpr const char* kMiscSyscalls[] = {
    "sysinfo", "getrandom",
};
constexpr AllowedGroupTable kMiscGroup = {
    "misc",
    "System information and randomness.",
    kMiscSyscalls};

constexpr AllowedGroupTable kAllowedGroupTables[] = {
    kProcessGroup, kMemoryGroup, kFileIoGroup, kAsyncIoGroup, kFileMetadataGroup, kFdAndPollGroup,
    kTimeGroup, kSignalsGroup, kSocketsGroup, kIpcGroup, kIdentityGroup, kLimitsAndPrctlGroup,
    kSchedulingGroup, kSelfRestrictionGroup, kMiscGroup,
};

}  // namespace

const std::vector<SyscallGroup>& AllowedSyscallGroups() {
  static const std::vector<SyscallGroup> kGroups = [] {
    std::vector<SyscallGroup> groups;
    for (const AllowedGroupTable& group : kAllowedGroupTables) {
      groups.push_back({group.name, group.description, {group.syscalls.begin(), group.syscalls.end()}});
    }
    return groups;
  }();
  return kGroups;
}

const std::vector<DeniedSyscall>& DeniedSyscalls() {
  static const std::vector<DeniedSyscall> kDenied = {
      // Namespaces and mounts: the sandbox's shape is fixed by the launcher.
      {"unshare", "new namespaces expose userns-reachable kernel code (CVE-2022-0185)"},
      {"setns", "joining another namespace would leave the sandbox"},
      {"mount", "mount table is fixed by the launcher (CVE-2022-0185)"},
      {"umount", "mount table is fixed by the launcher; unmounting could reveal what is below"},
      {"umount2", "mount table is fixed by the launcher; unmounting could reveal what is below"},
      {"pivot_root", "root is fixed by the launcher"},
      {"chroot", "root is fixed by the launcher; chroot tricks confuse path checks"},
      {"fsopen", "new mount API: CVE-2021-41133 (left unfiltered in Flatpak)"},
      {"fsconfig", "new mount API: CVE-2022-0185 (fsconfig heap overflow)"},
      {"fsmount", "new mount API: CVE-2021-41133"},
      {"fspick", "new mount API: CVE-2021-41133"},
      {"open_tree", "new mount API: can clone mounts (CVE-2021-41133)"},
      {"move_mount", "new mount API: CVE-2021-41133"},
      {"mount_setattr", "new mount API: can change mount flags (CVE-2021-41133)"},
      {"quotactl", "file system quota administration"},
      {"quotactl_fd", "file system quota administration"},
      {"sethostname", "hostname is set by the launcher (Docker: CAP_SYS_ADMIN only)"},
      {"setdomainname", "domain name is set by the launcher (Docker: CAP_SYS_ADMIN only)"},
      // Large kernel attack surface with no use inside the sandbox.
      {"io_uring_setup", "io_uring: large kernel attack surface, bypasses seccomp per op"},
      {"io_uring_enter", "io_uring: large kernel attack surface, bypasses seccomp per op"},
      {"io_uring_register", "io_uring: large kernel attack surface, bypasses seccomp per op"},
      {"bpf", "eBPF verifier and maps: CVE-2021-3490, CVE-2023-2163"},
      {"userfaultfd", "stalls kernel page faults, used to win races (CVE-2021-22555 chain)"},
      {"perf_event_open", "performance counters: CVE-2023-2235, side channels"},
      {"keyctl", "kernel keyrings are not namespaced (CVE-2016-0728)"},
      {"add_key", "kernel keyrings are not namespaced (CVE-2016-0728)"},
      {"request_key", "kernel keyrings are not namespaced; can upcall to host helpers"},
      {"fanotify_init", "file system wide event monitoring (Docker: CAP_SYS_ADMIN only)"},
      {"fanotify_mark", "useless without fanotify_init"},
      {"lookup_dcookie", "profiling interface (Docker: CAP_SYS_ADMIN only)"},
      {"memfd_secret", "removes pages from the kernel's direct map; not needed inside"},
      {"name_to_handle_at", "file handles bypass path-based checks (Shocker, 2014)"},
      {"open_by_handle_at", "opens any inode by handle, escaping bind mounts (Shocker, 2014)"},
      {"modify_ldt", "16-bit segments: CVE-2015-5157, CVE-2017-17053; only Wine needs it"},
      // Other processes.
      {"ptrace", "tracing: CVE-2019-13272; also defeats seccomp of the tracee"},
      {"process_vm_readv", "reads another process's memory"},
      {"process_vm_writev", "writes another process's memory"},
      {"process_madvise", "acts on another process's memory (Docker: CAP_SYS_PTRACE)"},
      {"kcmp", "compares kernel objects of other processes, leaks kernel pointers' order"},
      {"pidfd_getfd", "steals file descriptors from another process"},
      // The machine itself.
      {"kexec_load", "loads a new kernel"},
      {"kexec_file_load", "loads a new kernel"},
      {"init_module", "loads kernel modules"},
      {"finit_module", "loads kernel modules"},
      {"delete_module", "unloads kernel modules"},
      {"create_module", "obsolete module interface"},
      {"get_kernel_syms", "obsolete module interface"},
      {"query_module", "obsolete module interface"},
      {"reboot", "reboots the machine, or kills the PID namespace's init"},
      {"swapon", "host swap configuration"},
      {"swapoff", "host swap configuration"},
      {"syslog", "kernel log leaks addresses (dmesg_restrict)"},
      {"acct", "process accounting writes to host-chosen files"},
      {"iopl", "raw I/O port access"},
      {"ioperm", "raw I/O port access"},
      {"vm86", "virtual 8086 mode: old bugs, no use"},
      {"vm86old", "virtual 8086 mode: old bugs, no use"},
      {"vhangup", "hangs up the terminal of the session"},
      {"nfsservctl", "obsolete NFS server control"},
      {"uselib", "obsolete a.out loader"},
      {"sysfs", "obsolete file system type query"},
      {"_sysctl", "obsolete binary sysctl"},
      {"ustat", "obsolete; leaks file system statistics by device number"},
      // Clocks are host-wide: the time namespace does not virtualise CLOCK_REALTIME.
      {"settimeofday", "sets the host clock"},
      {"stime", "sets the host clock"},
      {"clock_settime", "sets the host clock"},
      {"clock_settime64", "sets the host clock"},
      {"adjtimex", "tunes the host clock; read-only use (ntp_gettime) is not worth the surface"},
      {"clock_adjtime", "tunes the host clock; read-only use is not worth the surface"},
      {"clock_adjtime64", "tunes the host clock; read-only use is not worth the surface"},
      // NUMA placement is the host's business (Docker: CAP_SYS_NICE only); libnuma treats
      // EPERM from get_mempolicy as "no NUMA" and carries on.
      {"mbind", "NUMA memory placement (Docker: CAP_SYS_NICE only)"},
      {"set_mempolicy", "NUMA memory placement (Docker: CAP_SYS_NICE only)"},
      {"get_mempolicy", "NUMA memory placement (Docker: CAP_SYS_NICE only)"},
      {"set_mempolicy_home_node", "NUMA memory placement (Docker: CAP_SYS_NICE only)"},
      {"migrate_pages", "moves another process's pages between NUMA nodes"},
      {"move_pages", "moves another process's pages between NUMA nodes"},
  };
  return kDenied;
}

const std::vector<FilteredSyscall>& ArgumentFilteredSyscalls() {
  static const std::vector<FilteredSyscall> kFiltered = {
      {"clone",
       "allowed unless a namespace flag (CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|"
       "NEWNET|NEWTIME) is set: then EPERM"},
      {"clone3",
       "ENOSYS (the default action): its flags are in memory the filter cannot read; glibc "
       "falls back to clone"},
      {"socket",
       "AF_UNIX and AF_NETLINK: allowed; AF_INET/AF_INET6: SOCK_STREAM with protocol 0/TCP and "
       "SOCK_DGRAM with protocol 0/UDP/ICMP(v6) allowed, anything else EPERM; other families "
       "EPERM. On x86 (i386): always EPERM"},
      {"socketpair", "AF_UNIX allowed, anything else EPERM. On x86 (i386): always EPERM"},
      {"socketcall",
       "x86 (i386) only: each sub-call allowed as its direct syscall is; SYS_SOCKET and "
       "SYS_SOCKETPAIR EPERM"},
      {"ioctl", "TIOCSTI, TIOCLINUX and TIOCSETD (low 32 bits of the request) EPERM, rest allowed"},
      {"personality",
       "0 (PER_LINUX), 0x8 (PER_LINUX32), 0x20000 (UNAME26), 0x20008 and 0xffffffff (query) "
       "allowed, anything else EPERM"},
  };
  return kFiltered;
}

std::vector<uint32_t> FilteredArchitectures() {
  const uint32_t native = seccomp_arch_native();
  switch (native) {
    case SCMP_ARCH_X86_64:
      return {SCMP_ARCH_X86_64, SCMP_ARCH_X86, SCMP_ARCH_X32};
    case SCMP_ARCH_AARCH64:
      return {SCMP_ARCH_AARCH64, SCMP_ARCH_ARM};
    default:
      return {native};
  }
}

StatusOr<SeccompProgram> CompileSeccompPolicy() {
  ScmpCtx merged;
  for (uint32_t arch : FilteredArchitectures()) {
    ASSIGN_OR_RETURN(ScmpCtx ctx, BuildArchFilter(arch));
    if (!merged) {
      merged = std::move(ctx);
      continue;
    }
    const int rc = seccomp_merge(merged.get(), ctx.get());
    if (rc < 0) return ScmpError("seccomp_merge " + ArchName(arch), rc);
    (void)ctx.release();  // seccomp_merge() released the source context.
  }
  if (!merged) return Status::Error("seccomp: no architecture to filter");
  return ExportBpf(merged.get());
}

}  // namespace corral::isolation
