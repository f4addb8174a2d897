// The seccomp filter loaded for real in forked children: every denial (each beside a control
// that shows the refusal comes from the filter), and what must keep working under it.
#include "tests/unit/seccomp_test_util.h"

namespace corral::isolation {
namespace {

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

}  // namespace
}  // namespace corral::isolation
