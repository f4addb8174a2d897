// The launcher: clone3 and the child recipe that turns a process into a sandbox.
//
// Everything the child needs (mount plan, BPF program, argv/envp arrays, id maps) is built in
// the parent into a LaunchPlan first. The child, between clone and execveat, runs only raw
// system calls on that data: no allocation, no exceptions, no logging. A failed step is written
// to the sync socket as {step, index, errno} and the child _exits.
//
// Order of the recipe (parent <-> child over a SOCK_SEQPACKET pair):
//   parent: clone3(NEWPID|NEWNS|NEWUTS|NEWIPC|NEWNET, CLONE_PIDFD, CLONE_INTO_CGROUP on v2)
//   child:  join its cgroup (v1: "0" to cgroup_join_fds, see cgroups/cgroup_backend.h), CPU
//           affinity, new session, mounts + pivot_root, hostname, lo up, listeners, cgroup
//           namespace (rooted at that cgroup), join the leaf (v1: cgroup_leaf_fds), drop
//           supplementary groups, unshare(CLONE_NEWUSER), send kUserNsReady
//   parent: the after_cgroup_namespace hook (v2: the daemon moves its init into a leaf below the
//           namespace's root), write uid_map/gid_map (inside 0..65535 -> host
//           base..base+65535), send kMapsGo                          -- the one barrier
//   child:  setresgid/setresuid inside, securebits, bounding set cleared, capabilities dropped,
//           rlimits, cwd, no_new_privs, parent-death signal, seccomp (last), execveat(init memfd)
//   parent: EOF on the sync socket (it is close-on-exec) means the exec happened.
// No step waits for the parent before the user namespace: nothing writes a pid to cgroup.procs
// (on v1 such a write waits for an RCU grace period, 8-25 ms on a quiet host).
//
// The mounts are made before the user namespace exists, with the host root's credentials: so
// the overlay's copy-up keeps the sandbox's own host uids, and every mount belongs to the
// initial user namespace, which makes them all locked for the sandbox (root inside cannot
// unmount, remount or move them even with capabilities in its own user namespace).
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "isolation/seccomp_policy.h"
#include "rootfs/mount_plan.h"

namespace corral::isolation {

// The size of the id range a sandbox owns on the host: inside ids 0..65535.
inline constexpr uint32_t kIdRangeSize = 65536;

struct LaunchPlan {
  rootfs::MountPlan mounts;
  SeccompProgram seccomp;
  std::string hostname;
  uid_t host_uid_base = 0;  // host uid of root inside
  gid_t host_gid_base = 0;
  uid_t uid = 0;            // inside
  gid_t gid = 0;
  std::vector<std::pair<int, rlim_t>> rlimits;  // resource, soft = hard
  std::string cwd;          // inside
  int init_fd = -1;         // sealed memfd holding corral-init
  std::vector<std::string> argv;  // corral-init's argv
  std::vector<std::string> env;
  int cgroup_fd = -1;       // v2: CLONE_INTO_CGROUP; -1 on v1
  // v1: files the child writes "0" to (cgroups::ClonePlacement): first thing, to join its cgroup,
  // and right after its cgroup namespace, to move on into the leaf.
  std::vector<int> cgroup_join_fds;
  std::vector<int> cgroup_leaf_fds;
  int status_fd = -1;       // becomes fd 3 inside: corral-init's status pipe (`corral run`) or
                            // its control socket (the daemon's persistent sandboxes)
  // `corral run`: the sandbox dies with the launcher (PR_SET_PDEATHSIG). The daemon clears it:
  // its sandboxes outlive a restart of the daemon, and the thread that launched them.
  bool die_with_parent = true;
  // Capabilities (bits, 1 << CAP_X) that PID 1 keeps, in the sandbox's own user namespace only,
  // as ambient capabilities so they survive the exec of corral-init: the daemon's init needs
  // CAP_SETUID, CAP_SETGID and CAP_KILL to start commands as other users and to signal them.
  // Every command it starts drops them before exec. Requires uid 0 inside; 0 keeps none.
  uint64_t init_capabilities = 0;
  // TCP ports on the sandbox's loopback (127.0.0.1) where the child listens before it leaves the
  // host's user namespace: the services the daemon gives the sandbox (model relay, egress
  // proxy, tool bridge). The listening sockets become fds 4, 5, ... of corral-init, which hands
  // them to the daemon (init_protocol.h, kListeners). At most kMaxLoopbackListeners.
  std::vector<uint16_t> loopback_ports;
  // sched_setaffinity's mask for PID 1, and so for everything inside (isolation/cpu_affinity.h);
  // empty: the launcher's own.
  std::vector<unsigned long> cpu_mask;
};

inline constexpr size_t kMaxLoopbackListeners = 8;

struct LaunchedSandbox {
  pid_t pid = -1;  // host pid of the sandbox's PID 1
  UniqueFd pidfd;
};

// Called with the child's host pid while the child waits.
using AttachFn = std::function<Status(pid_t)>;

// Starts the sandbox. `after_cgroup_namespace`, when set, runs once the child has made its cgroup
// namespace, before it has run anything of the sandbox's. On a failed setup step in the child
// the Status carries the step's name as its message ("mount proc on /proc", "seccomp", ...) and
// the step's errno; the child has been reaped. Other errors are the parent's own (clone3, the
// hook, writing the id maps).
StatusOr<LaunchedSandbox> Launch(const LaunchPlan& plan, const AttachFn& after_cgroup_namespace = nullptr);

// Reads a program into a sealed, close-on-exec memfd suitable for LaunchPlan::init_fd.
StatusOr<UniqueFd> LoadSealedExecutable(const std::string& path);

}  // namespace corral::isolation
