#include "isolation/launcher.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <linux/securebits.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/capability.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/sendfile.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/file_util.h"
#include "rootfs/mount_executor.h"

namespace corral::isolation {
namespace {

// Messages on the sync socket. Each is one SOCK_SEQPACKET datagram of a SyncMessage.
enum class SyncType : uint32_t {
  kUserNsReady = 2,  // child -> parent: unshare(CLONE_NEWUSER) done, write the id maps
  kMapsGo = 3,       // parent -> child: the id maps are written
  kSetupError = 4,   // child -> parent: a step failed (step, index, error)
};

// Steps of the child recipe, reported in kSetupError.
enum class ChildStep : int32_t {
  kWaitParent = 1,
  kCgroupNamespace,
  kSession,
  kMounts,  // index = MountStep, detail = index into the plan
  kHostname,
  kLoopback,
  kGroups,
  kUserNamespace,
  kWaitMaps,
  kSetGid,
  kSecureBits,
  kBoundingSet,
  kSetUid,
  kCapabilities,
  kRlimits,
  kChdir,
  kNoNewPrivs,
  kParentDeath,
  kFds,
  kSeccomp,
  kExec,
  kListeners,  // index = which port
  kCpuAffinity,
  kJoinCgroup,  // index = which file (0..: join fds, then leaf fds)
};

struct SyncMessage {
  SyncType type;
  int32_t step;
  int32_t mount_step;
  int32_t index;
  int32_t error;
};

// Data the child reads; built before clone.
struct ChildArgs {
  const LaunchPlan* plan;
  int sync_fd;  // both above 3 + the listeners: fd 3 is where the status fd goes, then those
  int init_fd;
  char* const* argv;
  char* const* envp;
  sock_fprog fprog;
  int last_cap;
};

[[noreturn]] void ChildFail(int sync_fd, ChildStep step, int error, int mount_step = 0,
                            int index = -1) {
  SyncMessage msg = {SyncType::kSetupError, static_cast<int32_t>(step), mount_step, index, error};
  (void)send(sync_fd, &msg, sizeof(msg), MSG_NOSIGNAL);
  _exit(125);
}

bool ChildWaitFor(int sync_fd, SyncType type) {
  SyncMessage msg;
  ssize_t n;
  do {
    n = recv(sync_fd, &msg, sizeof(msg), 0);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(sizeof(msg)) && msg.type == type;
}

int BringLoopbackUp() {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  struct ifreq ifr = {};
  ifr.ifr_name[0] = 'l';
  ifr.ifr_name[1] = 'o';
  int rc = 0;
  if (ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) {
    rc = errno;
  } else {
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (ioctl(fd, SIOCSIFFLAGS, &ifr) != 0) rc = errno;
  }
  close(fd);
  return rc;
}

// "0" to each of the files (cgroup_backend.h, OpenSelfJoin): this thread, the child's only one,
// moves into their cgroup. `first` numbers them in an error.
void ChildJoinCgroup(const std::vector<int>& fds, int sync_fd, int first) {
  for (size_t i = 0; i < fds.size(); ++i) {
    if (write(fds[i], "0", 1) != 1) ChildFail(sync_fd, ChildStep::kJoinCgroup, errno, 0, first + static_cast<int>(i));
  }
}

// CPU affinity, a session, the mount plan, the hostname and lo. In our cgroup already (clone3
// put us there, or ChildJoinCgroup did), so what the mounts allocate is charged to the sandbox.
void ChildEnterSandbox(const LaunchPlan& plan, int sync_fd) {
  if (!plan.cpu_mask.empty() &&
      syscall(SYS_sched_setaffinity, 0, plan.cpu_mask.size() * sizeof(unsigned long), plan.cpu_mask.data()) != 0) {
    ChildFail(sync_fd, ChildStep::kCpuAffinity, errno);
  }
  if (setsid() < 0) ChildFail(sync_fd, ChildStep::kSession, errno);

  rootfs::MountFailure mount_failure;
  if (!rootfs::ExecuteMountPlan(plan.mounts, &mount_failure)) {
    ChildFail(sync_fd, ChildStep::kMounts, mount_failure.error,
              static_cast<int>(mount_failure.step), mount_failure.index);
  }
  if (sethostname(plan.hostname.data(), plan.hostname.size()) != 0) {
    ChildFail(sync_fd, ChildStep::kHostname, errno);
  }
  if (int rc = BringLoopbackUp(); rc != 0) ChildFail(sync_fd, ChildStep::kLoopback, rc);
}

// The daemon's services on this loopback, one listening socket per port in `listeners` (room
// for kMaxLoopbackListeners). Held above their final fds until those are free.
void ChildOpenListeners(const LaunchPlan& plan, int sync_fd, int* listeners) {
  const size_t n_listeners = plan.loopback_ports.size();
  for (size_t i = 0; i < n_listeners; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) ChildFail(sync_fd, ChildStep::kListeners, errno, 0, static_cast<int>(i));
    struct sockaddr_in address = {};
    address.sin_family = AF_INET;
    address.sin_port = htons(plan.loopback_ports[i]);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, reinterpret_cast<struct sockaddr*>(&address), sizeof(address)) != 0 || listen(fd, 128) != 0) {
      ChildFail(sync_fd, ChildStep::kListeners, errno, 0, static_cast<int>(i));
    }
    listeners[i] = fcntl(fd, F_DUPFD_CLOEXEC, static_cast<int>(4 + n_listeners));
    if (listeners[i] < 0) ChildFail(sync_fd, ChildStep::kListeners, errno, 0, static_cast<int>(i));
    close(fd);
  }
}

// After barrier 2: the plan's gid and uid, securebits, the bounding set, and the capability sets
// cut down to init_capabilities (raised ambient first, while that is still allowed).
void ChildSetIdentity(const LaunchPlan& plan, int sync_fd, int last_cap) {
  if (syscall(SYS_setresgid, plan.gid, plan.gid, plan.gid) != 0) ChildFail(sync_fd, ChildStep::kSetGid, errno);
  if (syscall(SYS_setgroups, 0, nullptr) != 0) ChildFail(sync_fd, ChildStep::kGroups, errno);
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2] = {};
  const uint32_t keep_low = static_cast<uint32_t>(plan.init_capabilities);
  const uint32_t keep_high = static_cast<uint32_t>(plan.init_capabilities >> 32);
  if (plan.init_capabilities != 0) {
    // An ambient capability must be permitted and inheritable when raised, and raising must
    // happen before the securebits below lock ambient raising off.
    if (syscall(SYS_capget, &header, data) != 0) ChildFail(sync_fd, ChildStep::kCapabilities, errno);
    data[0].inheritable = keep_low;
    data[1].inheritable = keep_high;
    if (syscall(SYS_capset, &header, data) != 0) ChildFail(sync_fd, ChildStep::kCapabilities, errno);
    for (int cap = 0; cap <= last_cap && cap < 64; ++cap) {
      if ((plan.init_capabilities >> cap) & 1) {
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0) {
          ChildFail(sync_fd, ChildStep::kCapabilities, errno);
        }
      }
    }
  }
  // Root inside never gains capabilities by exec, and nothing can turn that back on.
  if (prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP_LOCKED |
                                   SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
                                   SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED) != 0) {
    ChildFail(sync_fd, ChildStep::kSecureBits, errno);
  }
  for (int cap = 0; cap <= last_cap; ++cap) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) {
      ChildFail(sync_fd, ChildStep::kBoundingSet, errno);
    }
  }
  if (syscall(SYS_setresuid, plan.uid, plan.uid, plan.uid) != 0) ChildFail(sync_fd, ChildStep::kSetUid, errno);
  // Everything but init_capabilities goes; the ambient set shrinks with it (an ambient
  // capability must stay permitted and inheritable), so what remains ambient is exactly those.
  data[0] = {keep_low, keep_low, keep_low};
  data[1] = {keep_high, keep_high, keep_high};
  if (syscall(SYS_capset, &header, data) != 0) ChildFail(sync_fd, ChildStep::kCapabilities, errno);
  if (plan.init_capabilities == 0 && prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) {
    ChildFail(sync_fd, ChildStep::kCapabilities, errno);
  }
}

// The status fd at 3 and the listeners at 4.., everything else close-on-exec.
void ChildPlaceFds(const LaunchPlan& plan, int sync_fd, const int* listeners) {
  const size_t n_listeners = plan.loopback_ports.size();
  if (plan.status_fd == 3) {
    // Already in place: dup2(3, 3) would leave it close-on-exec.
    if (fcntl(3, F_SETFD, 0) != 0) ChildFail(sync_fd, ChildStep::kFds, errno);
  } else if (plan.status_fd >= 0) {
    if (dup2(plan.status_fd, 3) != 3) ChildFail(sync_fd, ChildStep::kFds, errno);
  }
  for (size_t i = 0; i < n_listeners; ++i) {
    // dup2 leaves the new fd open at exec; the temporary one closes then.
    if (dup2(listeners[i], static_cast<int>(4 + i)) != static_cast<int>(4 + i)) {
      ChildFail(sync_fd, ChildStep::kFds, errno);
    }
  }
  // Everything but stdio, the status fd and the listeners closes at exec.
  const unsigned keep_below = n_listeners > 0 ? static_cast<unsigned>(4 + n_listeners) : plan.status_fd >= 0 ? 4 : 3;
  if (syscall(SYS_close_range, keep_below, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    ChildFail(sync_fd, ChildStep::kFds, errno);
  }
}

// The child, from clone to execveat. Raw system calls on prepared data only.
[[noreturn]] void ChildMain(const ChildArgs& args) {
  const LaunchPlan& plan = *args.plan;
  const int sync_fd = args.sync_fd;

  // Die with the launcher. Re-armed below: a credential change clears it.
  if (plan.die_with_parent && prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
    ChildFail(sync_fd, ChildStep::kParentDeath, errno);
  }
  // An empty signal mask: the launcher blocks the signals it forwards (for its signalfd).
  // Dispositions need no reset: exec resets handled signals, and an ignored one (nohup) stays
  // ignored inside as it would for any child.
  sigset_t empty;
  sigemptyset(&empty);
  sigprocmask(SIG_SETMASK, &empty, nullptr);

  ChildJoinCgroup(plan.cgroup_join_fds, sync_fd, 0);
  ChildEnterSandbox(plan, sync_fd);
  int listeners[kMaxLoopbackListeners];
  ChildOpenListeners(plan, sync_fd, listeners);
  // The cgroup namespace is rooted at our cgroup: the sandbox's own, which the mount plan showed
  // at /sys/fs/cgroup. Then on into the leaf, where there is one (v1: ourselves; v2: the parent
  // does it, on kUserNsReady).
  if (unshare(CLONE_NEWCGROUP) != 0) ChildFail(sync_fd, ChildStep::kCgroupNamespace, errno);
  ChildJoinCgroup(plan.cgroup_leaf_fds, sync_fd, static_cast<int>(plan.cgroup_join_fds.size()));
  // The host root's supplementary groups must not follow us in. Raw syscalls, here and for the
  // ids below: glibc's set*id wrappers apply the change to every thread of the process they think
  // they are in (__nptl_setxid), and this child, cloned from a multi-threaded daemon, still has
  // the daemon's thread list: it waited forever on one of those threads once.
  if (syscall(SYS_setgroups, 0, nullptr) != 0) ChildFail(sync_fd, ChildStep::kGroups, errno);
  if (unshare(CLONE_NEWUSER) != 0) ChildFail(sync_fd, ChildStep::kUserNamespace, errno);

  // Barrier 2: the parent writes our id maps.
  SyncMessage ready = {SyncType::kUserNsReady, 0, 0, 0, 0};
  if (send(sync_fd, &ready, sizeof(ready), MSG_NOSIGNAL) != sizeof(ready)) _exit(125);
  if (!ChildWaitFor(sync_fd, SyncType::kMapsGo)) _exit(125);

  ChildSetIdentity(plan, sync_fd, args.last_cap);
  for (const auto& [resource, value] : plan.rlimits) {
    struct rlimit limit = {value, value};
    if (setrlimit(static_cast<__rlimit_resource>(resource), &limit) != 0) {
      ChildFail(sync_fd, ChildStep::kRlimits, errno);
    }
  }
  if (chdir(plan.cwd.c_str()) != 0) ChildFail(sync_fd, ChildStep::kChdir, errno);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ChildFail(sync_fd, ChildStep::kNoNewPrivs, errno);
  if (plan.die_with_parent && prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
    ChildFail(sync_fd, ChildStep::kParentDeath, errno);
  }
  // If the launcher died before the line above, nobody would kill us: its end of the socket
  // is then closed, which a peek sees as EOF.
  char peek;
  if (recv(sync_fd, &peek, 1, MSG_PEEK | MSG_DONTWAIT) == 0) _exit(125);

  ChildPlaceFds(plan, sync_fd, listeners);
  // Seccomp last: from here on only the sandbox's own policy applies.
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &args.fprog) != 0) {
    ChildFail(sync_fd, ChildStep::kSeccomp, errno);
  }
  syscall(SYS_execveat, args.init_fd, "", args.argv, args.envp, AT_EMPTY_PATH);
  ChildFail(sync_fd, ChildStep::kExec, errno);
}

std::string StepName(const LaunchPlan& plan, const SyncMessage& msg) {
  switch (static_cast<ChildStep>(msg.step)) {
    case ChildStep::kWaitParent: return "wait for launcher";
    case ChildStep::kCgroupNamespace: return "cgroup namespace";
    case ChildStep::kSession: return "setsid";
    case ChildStep::kMounts:
      switch (static_cast<rootfs::MountStep>(msg.mount_step)) {
        case rootfs::MountStep::kMakePrivate: return "make mounts private";
        case rootfs::MountStep::kScratch: return "mount scratch tmpfs on " + plan.mounts.scratch_dir;
        case rootfs::MountStep::kSkeleton:
          if (msg.index >= 0 && static_cast<size_t>(msg.index) < plan.mounts.skeleton.size()) {
            return "create " + plan.mounts.skeleton[msg.index].path;
          }
          return "create skeleton";
        case rootfs::MountStep::kLayer: return "mount workspace disk " + plan.mounts.layer_device;
        case rootfs::MountStep::kImageLayer:
          if (msg.index >= 0 && static_cast<size_t>(msg.index) < plan.mounts.layers.size()) {
            return "mount image layer " + plan.mounts.layers[msg.index].source;
          }
          return "mount image layer";
        case rootfs::MountStep::kOverlay: return "mount overlay root";
        case rootfs::MountStep::kOpenRoot: return "open new root";
        case rootfs::MountStep::kMount:
          if (msg.index >= 0 && static_cast<size_t>(msg.index) < plan.mounts.mounts.size()) {
            return plan.mounts.mounts[msg.index].description;
          }
          return "mount";
        case rootfs::MountStep::kPivotRoot: return "pivot_root";
        case rootfs::MountStep::kNone: break;
      }
      return "mounts";
    case ChildStep::kHostname: return "sethostname";
    case ChildStep::kLoopback: return "bring up lo";
    case ChildStep::kGroups: return "setgroups";
    case ChildStep::kUserNamespace: return "user namespace";
    case ChildStep::kWaitMaps: return "wait for id maps";
    case ChildStep::kSetGid: return "setresgid";
    case ChildStep::kSecureBits: return "securebits";
    case ChildStep::kBoundingSet: return "capability bounding set";
    case ChildStep::kSetUid: return "setresuid";
    case ChildStep::kCapabilities: return "drop capabilities";
    case ChildStep::kRlimits: return "rlimits";
    case ChildStep::kChdir: return "chdir " + plan.cwd;
    case ChildStep::kNoNewPrivs: return "no_new_privs";
    case ChildStep::kParentDeath: return "parent death signal";
    case ChildStep::kFds: return "file descriptors";
    case ChildStep::kSeccomp: return "seccomp";
    case ChildStep::kExec: return "exec corral-init";
    case ChildStep::kListeners:
      if (msg.index >= 0 && static_cast<size_t>(msg.index) < plan.loopback_ports.size()) {
        return "listen on 127.0.0.1:" + std::to_string(plan.loopback_ports[msg.index]);
      }
      return "loopback listeners";
    case ChildStep::kCpuAffinity: return "CPU affinity";
    case ChildStep::kJoinCgroup: return "join cgroup";
  }
  return "setup";
}

// The child's next message, as recv returns it (0: EOF). A child that failed and exited with a
// message of ours unread resets the socket: that error comes first, once (`reset_seen` records it), and the
// child's own message, queued before it exited, after.
ssize_t ReceiveFromChild(int fd, SyncMessage& msg, bool& reset_seen) {
  for (;;) {
    ssize_t n = recv(fd, &msg, sizeof(msg), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ECONNRESET && !reset_seen) {
      reset_seen = true;
      continue;
    }
    return n;
  }
}

Status WriteIdMaps(pid_t pid, const LaunchPlan& plan) {
  const std::string proc = "/proc/" + std::to_string(pid);
  RETURN_IF_ERROR(WriteExistingFile(
      proc + "/uid_map", "0 " + std::to_string(plan.host_uid_base) + " " + std::to_string(kIdRangeSize)));
  RETURN_IF_ERROR(WriteExistingFile(
      proc + "/gid_map", "0 " + std::to_string(plan.host_gid_base) + " " + std::to_string(kIdRangeSize)));
  return Status();
}

// The highest capability number this kernel knows (libcap asks the kernel, not its headers).
int LastCap() {
  unsigned bits = cap_max_bits();
  return bits > 0 && bits <= 64 ? static_cast<int>(bits) - 1 : CAP_LAST_CAP;
}

pid_t CloneSandbox(const LaunchPlan& plan, int* pidfd) {
  constexpr uint64_t kNamespaces =
      CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET;
  struct clone_args args = {};
  args.flags = kNamespaces | CLONE_PIDFD | (plan.cgroup_fd >= 0 ? CLONE_INTO_CGROUP : 0);
  args.pidfd = reinterpret_cast<uint64_t>(pidfd);
  args.exit_signal = SIGCHLD;
  args.cgroup = plan.cgroup_fd >= 0 ? static_cast<uint64_t>(plan.cgroup_fd) : 0;
  long pid = syscall(SYS_clone3, &args, sizeof(args));
  if (pid < 0 && errno == ENOSYS && plan.cgroup_fd < 0) {
    // Kernels before 5.3: clone(2) with CLONE_PIDFD (5.2) returns the pidfd via parent_tid.
    pid = syscall(SYS_clone, kNamespaces | CLONE_PIDFD | SIGCHLD, nullptr, pidfd, nullptr, 0);
  }
  return static_cast<pid_t>(pid);
}

}  // namespace

StatusOr<UniqueFd> LoadSealedExecutable(const std::string& path) {
  UniqueFd source(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!source) return ErrnoError("open " + path);
  struct stat st;
  if (fstat(source.get(), &st) != 0) return ErrnoError("stat " + path);
  UniqueFd memfd(static_cast<int>(memfd_create("corral-init", MFD_CLOEXEC | MFD_ALLOW_SEALING)));
  if (!memfd) return ErrnoError("memfd_create");
  off_t offset = 0;
  while (offset < st.st_size) {
    ssize_t n = sendfile(memfd.get(), source.get(), &offset, static_cast<size_t>(st.st_size - offset));
    if (n < 0) return ErrnoError("copy " + path);
    if (n == 0) break;
  }
  if (fchmod(memfd.get(), 0555) != 0) return ErrnoError("chmod memfd");
  if (fcntl(memfd.get(), F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) != 0) {
    return ErrnoError("seal memfd");
  }
  return memfd;
}

StatusOr<LaunchedSandbox> Launch(const LaunchPlan& plan, const AttachFn& after_cgroup_namespace) {
  if (plan.init_fd < 0) return Status::Error("launch: no init program");
  if (plan.argv.empty()) return Status::Error("launch: empty argv");
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    return ErrnoError("socketpair");
  }
  UniqueFd parent_end(pair[0]), child_end(pair[1]);
  if (plan.loopback_ports.size() > kMaxLoopbackListeners) {
    return Status::Error("launch: at most " + std::to_string(kMaxLoopbackListeners) + " loopback listeners", EINVAL);
  }
  if (!plan.loopback_ports.empty() && plan.status_fd < 0) {
    return Status::Error("launch: loopback listeners need a status fd (they follow it)", EINVAL);
  }
  // The child puts the status fd at 3 and the listeners after it; nothing it still needs may
  // sit there.
  const int first_free = static_cast<int>(4 + plan.loopback_ports.size());
  UniqueFd moved_sync, moved_init;
  int child_sync = child_end.get(), init_fd = plan.init_fd;
  if (child_sync < first_free) {
    moved_sync.reset(fcntl(child_sync, F_DUPFD_CLOEXEC, first_free));
    if (!moved_sync) return ErrnoError("move sync socket");
    child_sync = moved_sync.get();
  }
  if (init_fd < first_free) {
    moved_init.reset(fcntl(init_fd, F_DUPFD_CLOEXEC, first_free));
    if (!moved_init) return ErrnoError("move init fd");
    init_fd = moved_init.get();
  }

  // argv/envp arrays, built now: the child must not allocate.
  std::vector<char*> argv, envp;
  for (const auto& arg : plan.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  for (const auto& var : plan.env) envp.push_back(const_cast<char*>(var.c_str()));
  envp.push_back(nullptr);
  ChildArgs args = {&plan, child_sync, init_fd, argv.data(), envp.data(), plan.seccomp.fprog(), LastCap()};
  if (args.fprog.len == 0) return Status::Error("launch: empty seccomp program");

  int pidfd = -1;
  pid_t pid = CloneSandbox(plan, &pidfd);
  if (pid < 0) return ErrnoError("clone3");
  if (pid == 0) ChildMain(args);

  LaunchedSandbox sandbox;
  sandbox.pid = pid;
  sandbox.pidfd.reset(pidfd);
  child_end.reset();
  moved_sync.reset();
  moved_init.reset();

  // On any parent-side failure the half-made sandbox dies and is reaped before we return.
  auto abort_child = [&](Status status) -> Status {
    syscall(SYS_pidfd_send_signal, sandbox.pidfd.get(), SIGKILL, nullptr, 0);
    siginfo_t info;
    while (waitid(P_PIDFD, static_cast<id_t>(sandbox.pidfd.get()), &info, WEXITED) != 0 &&
           errno == EINTR) {
    }
    return status;
  };
  auto child_error = [&](const SyncMessage& msg) -> Status {
    return abort_child(Status::Error(StepName(plan, msg), msg.error));
  };

  bool reset_seen = false;
  for (;;) {
    SyncMessage msg;
    ssize_t n = ReceiveFromChild(parent_end.get(), msg, reset_seen);
    if (n < 0) return abort_child(ErrnoError("sync with child"));
    if (n == 0 && reset_seen) return abort_child(Status::Error("sync with child", ECONNRESET));
    if (n == 0) return sandbox;  // EOF: the sync socket closed at exec.
    if (n != sizeof(msg)) return abort_child(Status::Error("sync with child: short message"));
    if (msg.type == SyncType::kSetupError) return child_error(msg);
    if (msg.type != SyncType::kUserNsReady) return abort_child(Status::Error("sync with child: unexpected message"));
    // The child made its cgroup namespace just before this message.
    if (after_cgroup_namespace) {
      Status settled = after_cgroup_namespace(pid);
      if (!settled.ok()) return abort_child(settled.WithContext("after the cgroup namespace"));
    }
    Status maps = WriteIdMaps(pid, plan);
    if (!maps.ok()) return abort_child(maps.WithContext("write id maps"));
    SyncMessage maps_go = {SyncType::kMapsGo, 0, 0, 0, 0};
    if (send(parent_end.get(), &maps_go, sizeof(maps_go), MSG_NOSIGNAL) != sizeof(maps_go)) {
      return abort_child(ErrnoError("sync with child"));
    }
  }
}

}  // namespace corral::isolation
