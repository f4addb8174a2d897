// One interface over cgroup v1 and cgroup v2.
//
// Limits are expressed in v2 terms and translated by the v1 backend. A cgroup is named by a path
// relative to the backend's root, e.g. "corral/run-1a2b" (never absolute, never containing ".."):
// the backend maps it to <root>/<name> on v2 and to <root>/<controller>/<name> for each v1
// controller it manages (memory, cpu, cpuacct, pids, freezer). Backends take their root as a
// constructor argument so that unit tests point them at a temporary directory laid out like a
// real hierarchy; production uses DetectBackend().
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace corral::cgroups {

enum class CgroupVersion { kV1, kV2 };

struct CgroupLimits {
  // memory.max; swap is switched off for the cgroup whenever this is set.
  std::optional<uint64_t> memory_max_bytes;
  // cpu.max "<quota> <period>"; unset means no CPU cap.
  std::optional<uint64_t> cpu_quota_us;
  uint64_t cpu_period_us = 100000;
  // pids.max.
  std::optional<uint64_t> pids_max;
};

// Counters read from the kernel's own accounting of the whole cgroup tree.
struct CgroupStats {
  uint64_t cpu_usage_usec = 0;   // user + system
  uint64_t cpu_user_usec = 0;
  uint64_t cpu_system_usec = 0;
  uint64_t memory_current_bytes = 0;
  uint64_t memory_peak_bytes = 0;  // v2 memory.peak, v1 memory.max_usage_in_bytes
  uint64_t oom_kill_count = 0;     // processes the OOM killer killed in this cgroup
  uint64_t pids_current = 0;
  uint64_t pids_max_events = 0;    // fork/clone attempts refused by pids.max
};

// A host directory that shows one cgroup, and where it goes under /sys/fs/cgroup inside the
// sandbox (rootfs/mount_plan.h binds it there, read-only).
struct CgroupViewDir {
  std::string host_dir;  // e.g. /sys/fs/cgroup/corral/sb_x or /sys/fs/cgroup/memory/corral/sb_x
  std::string name;      // "" on v2 (the cgroup is /sys/fs/cgroup itself); v1: the controller
};

class CgroupBackend;

// How a process cloned into a cgroup gets there (CgroupBackend::PrepareClone), and, with a leaf,
// how it moves on into <name>/<leaf> once it has made its cgroup namespace (rooted at <name>).
//   v2: clone3 puts it in <name> (CLONE_INTO_CGROUP, clone_fd()); AfterNamespace() moves it to
//       the leaf and hands the controllers to <name>'s children.
//   v1: the child writes "0" to each of join_fds() as its first step, and to each of leaf_fds()
//       right after its cgroup namespace (OpenSelfJoin: no global lock, no grace period).
// Launchers do all of it; each part is empty or a no-op where another one did the work. Refers
// to its backend: use it while the backend lives.
class ClonePlacement {
 public:
  ClonePlacement() = default;
  ClonePlacement(CgroupBackend* backend, std::string name, std::string leaf, UniqueFd clone_fd,
                 std::vector<UniqueFd> join, std::vector<UniqueFd> leaf_join)
      : backend_(backend),
        name_(std::move(name)),
        leaf_(std::move(leaf)),
        clone_fd_(std::move(clone_fd)),
        join_(std::move(join)),
        leaf_join_(std::move(leaf_join)) {}

  // For clone3's cgroup field (CLONE_INTO_CGROUP), or -1.
  int clone_fd() const { return clone_fd_ ? clone_fd_.get() : -1; }
  // What the child writes "0" to, itself: at its start, and after its cgroup namespace.
  std::vector<int> join_fds() const { return Raw(join_); }
  std::vector<int> leaf_fds() const { return Raw(leaf_join_); }
  // Called with the child's host pid once it has made its cgroup namespace, before it runs
  // anything of the sandbox's: moves it into the leaf where the child could not (v2).
  Status AfterNamespace(pid_t pid) const;

 private:
  static std::vector<int> Raw(const std::vector<UniqueFd>& fds) {
    std::vector<int> raw;
    for (const UniqueFd& fd : fds) raw.push_back(fd.get());
    return raw;
  }

  CgroupBackend* backend_ = nullptr;
  std::string name_;
  std::string leaf_;
  UniqueFd clone_fd_;
  std::vector<UniqueFd> join_;
  std::vector<UniqueFd> leaf_join_;
};

class CgroupBackend {
 public:
  virtual ~CgroupBackend() = default;

  // Which hierarchy this is. The layers above do not branch on it: the difference is behind
  // the methods below (PrepareClone, ProcessCgroup, name, MissingControllers). Tests choose
  // their expectations by it.
  virtual CgroupVersion version() const = 0;

  // "v1" or "v2", for logs and reports.
  const char* name() const;

  // How a process cloned into the (existing) cgroup `name` is put there, and then (with a
  // `leaf`, a single component) into <name>/<leaf>: ClonePlacement. On v1 the leaf is made here;
  // on v2 by AfterNamespace (<name> may have no controlled children while the child is in it).
  StatusOr<ClonePlacement> PrepareClone(const std::string& name, const std::string& leaf = "");

  // The cgroup of process `pid` (0: this process) in this backend's hierarchy, from
  // /proc/PID/cgroup (proc_cgroup.h). ENOENT when the process is gone.
  StatusOr<std::string> ProcessCgroup(pid_t pid) const;

  // The controllers corral needs that the hierarchy mounted at `mount_root` does not offer
  // (v2: its root's cgroup.controllers lacks cpu, memory or pids; v1: no hierarchy directory
  // for cpu, cpuacct, memory, pids or freezer).
  std::vector<std::string> MissingControllers(const std::string& mount_root) const;

  // What a cgroup that cannot be created under a parent most likely lacks ("" when nothing is
  // known): on v2 the delegation of the subtree.
  const char* CreateFailureHint() const;

  // Creates the cgroup (and missing parents). On v2 enables the memory, cpu and pids
  // controllers in the parents' cgroup.subtree_control. EEXIST is an error: names are unique.
  virtual Status Create(const std::string& name) = 0;

  // Creates the cgroup (and missing parents) to move a process into, enabling no controller on
  // the way, and an existing one is fine: corrald's own leaf below a cgroup that still holds
  // corrald (on v2 a write to that cgroup's subtree_control would fail with EBUSY until it moves).
  virtual Status CreateLeaf(const std::string& name) = 0;

  // Applies every limit that is set. Memory limits switch swap off (v2 memory.swap.max=0; v1
  // memory.memsw.limit_in_bytes when the kernel accounts swap, and memory.swappiness=0).
  virtual Status SetLimits(const std::string& name, const CgroupLimits& limits) = 0;

  // The limits set on the cgroup, read back from the kernel in SetLimits' terms: an absent
  // value is "no limit" (memory.max/pids.max "max", cpu.max "max ...", v1's unlimited values).
  virtual StatusOr<CgroupLimits> ReadLimits(const std::string& name) = 0;

  // Moves `pid` into the cgroup (every v1 controller).
  virtual Status Attach(const std::string& name, pid_t pid) = 0;

  // Makes `name`/`leaf` and moves `pid` there from `name`; then (v2) enables the controllers in
  // `name` for its children. For a process cloned into `name` itself, so that the cgroup
  // namespace it makes is rooted at `name`, which must leave `name` before `name` may have
  // controlled children (v2's "no internal processes" rule). On v1: Create, then Attach.
  virtual Status AttachToNewLeaf(const std::string& name, const std::string& leaf, pid_t pid) = 0;

  // The host directories that show the cgroup: one on v2; on v1 one per hierarchy of the
  // backend's controllers that is mounted (memory, cpu, cpuacct, pids, freezer; a co-mounted
  // "cpu,cpuacct" appears under both names). Paths only: the cgroup need not exist yet.
  virtual StatusOr<std::vector<CgroupViewDir>> ViewDirs(const std::string& name) = 0;

  // v2: an O_DIRECTORY|O_PATH fd of the cgroup for clone3's CLONE_INTO_CGROUP.
  // v1: an error (EOPNOTSUPP). Launchers call PrepareClone(), which does the right thing on both.
  virtual StatusOr<UniqueFd> OpenForClone(const std::string& name) = 0;

  // Files a process writes "0" to, itself, to move into the (existing) cgroup `name`: v1 the
  // `tasks` file of each hierarchy, v2 its cgroup.procs. Opened here (write-only, close-on-exec)
  // with this process's credentials, which are the ones the kernel checks: the writer needs no
  // privilege of its own, and may be inside the sandbox's namespaces. Why: every write to
  // cgroup.procs takes cgroup_threadgroup_rwsem for writing, and the first writer after a quiet
  // spell waits for an RCU grace period (8-25 ms, bench/RESULTS.md); a thread that writes "0"
  // to a v1 `tasks` file moves only itself, which the kernel does without that lock. (On v2
  // the write still takes it; CLONE_INTO_CGROUP is the fast way in there.)
  virtual StatusOr<std::vector<UniqueFd>> OpenSelfJoin(const std::string& name) = 0;

  virtual StatusOr<CgroupStats> Stats(const std::string& name) = 0;

  // user+system CPU time of the whole tree: the cheap read a CPU-time watchdog polls.
  virtual StatusOr<uint64_t> CpuUsageUsec(const std::string& name) = 0;

  // The pids in the cgroup and its descendants.
  virtual StatusOr<std::vector<pid_t>> Procs(const std::string& name) = 0;

  virtual Status Freeze(const std::string& name) = 0;
  virtual Status Thaw(const std::string& name) = 0;

  // Kills every process in the cgroup tree, whatever it did to escape its process group
  // (v2: cgroup.kill; v1: freeze, SIGKILL every task, thaw), and waits (bounded, ~2 s) until
  // the tree is empty.
  virtual Status Kill(const std::string& name) = 0;

  // Kill() then removes the cgroup and its descendants, deepest first. A missing cgroup is OK.
  virtual Status Destroy(const std::string& name) = 0;

  // Names (relative to the backend root) of the direct children of `name`; empty if missing.
  virtual StatusOr<std::vector<std::string>> ListChildren(const std::string& name) = 0;

  // Removes `name` if it exists and is empty (no children, no processes). Never kills.
  virtual Status RemoveIfEmpty(const std::string& name) = 0;
};

// v2 backend rooted at a cgroup2 mount (or a directory laid out like one), without trailing
// '/'. The files it uses and how it waits: v2_backend.cc.
std::unique_ptr<CgroupBackend> MakeV2Backend(std::string root);

// v1 backend rooted at a directory holding one directory per controller hierarchy
// (<root>/memory, <root>/cpu, <root>/cpuacct, <root>/pids, <root>/freezer; "cpu,cpuacct"
// co-mounts and symlinks are followed). How v2's terms translate to v1's files: v1_backend.cc.
std::unique_ptr<CgroupBackend> MakeV1Backend(std::string root);

// statfs(/sys/fs/cgroup): cgroup2 magic -> v2; tmpfs holding v1 hierarchies -> v1 (hybrid hosts
// whose cgroup2 mount carries no controllers are v1 here).
StatusOr<std::unique_ptr<CgroupBackend>> DetectBackend(const std::string& mount_root = "/sys/fs/cgroup");

}  // namespace corral::cgroups
