// The cgroup v1 backend: limits expressed in v2 terms, translated to the v1 controllers.
//
// The backend root holds one directory per controller hierarchy: <root>/memory, <root>/cpu,
// <root>/cpuacct, <root>/pids, <root>/freezer. Each may be a symlink, and several may be one
// hierarchy ("cpu,cpuacct" co-mounted, with "cpu" and "cpuacct" symlinks to it): directories that
// resolve to the same inode are one hierarchy, so every cgroup directory is created, written and
// removed once. A cgroup "a/b" is <root>/<controller>/a/b in each hierarchy.
//
// The hierarchies are looked up on every call (a few stat(2)s), so a backend made before a
// controller was mounted sees it afterwards.
//
// Translation from v2 terms:
//   memory.max      -> memory.limit_in_bytes, then memory.memsw.limit_in_bytes = the same value
//                      (only where the kernel accounts swap: the file exists), memory.swappiness=0
//   cpu.max q p     -> cpu.cfs_period_us = p, then cpu.cfs_quota_us = q
//   pids.max        -> pids.max
//   cpu.stat        -> cpuacct.usage (total), cpuacct.usage_user / cpuacct.usage_sys (ns), or
//                      cpuacct.stat (USER_HZ ticks) on kernels without those files
//   memory.current  -> memory.usage_in_bytes;  memory.peak -> memory.max_usage_in_bytes
//   memory.events   -> memory.oom_control's "oom_kill" line (hierarchical, like v2's)
//   cgroup.freeze   -> freezer.state FROZEN / THAWED
//   cgroup.kill     -> freeze, SIGKILL every task, thaw (v1 frozen tasks die only once thawed)
//
// Create() needs the memory, cpuacct, pids and freezer hierarchies and fails naming the one that
// is missing; the cpu hierarchy is needed only by a CPU limit. Cleanup calls (Destroy,
// RemoveIfEmpty, ListChildren, Procs) work on whichever hierarchies exist.
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cgroups/cgroup_backend.h"

namespace corral::cgroups {

class V1Backend final : public CgroupBackend {
 public:
  enum class Controller { kMemory, kCpu, kCpuacct, kPids, kFreezer };
  static constexpr size_t kControllerCount = 5;

  // `root`: the directory holding the controller hierarchies (usually /sys/fs/cgroup).
  explicit V1Backend(std::string root);

  CgroupVersion version() const override { return CgroupVersion::kV1; }
  const std::string& root() const { return root_; }

  // mkdir in every hierarchy (parents as needed). If one mkdir fails, the cgroups this call
  // already made in other hierarchies are removed again.
  Status Create(const std::string& name) override;
  // mkdir in every hierarchy there is, the missing parents too.
  Status CreateLeaf(const std::string& name) override;
  // A memory limit is written to memory.limit_in_bytes first, then memsw: the kernel requires
  // memsw >= limit at every step, so when raising the limit above the current memsw value the
  // first write fails with EINVAL and the pair is written in the other order.
  Status SetLimits(const std::string& name, const CgroupLimits& limits) override;
  // memory.limit_in_bytes (the kernel's page-aligned LONG_MAX is no limit), cpu.cfs_quota_us
  // (-1 is none) with cpu.cfs_period_us, pids.max ("max"); a missing hierarchy limits nothing.
  StatusOr<CgroupLimits> ReadLimits(const std::string& name) override;
  // Writes `pid` to cgroup.procs in every hierarchy.
  Status Attach(const std::string& name, pid_t pid) override;
  // Create(<name>/<leaf>), then Attach: v1 has no rule against processes in inner cgroups.
  Status AttachToNewLeaf(const std::string& name, const std::string& leaf, pid_t pid) override;
  // {<hierarchy>/<name>, controller} for each of our controllers that has a hierarchy.
  StatusOr<std::vector<CgroupViewDir>> ViewDirs(const std::string& name) override;
  // Always an error (EOPNOTSUPP): CLONE_INTO_CGROUP is v2 only.
  StatusOr<UniqueFd> OpenForClone(const std::string& name) override;
  StatusOr<CgroupStats> Stats(const std::string& name) override;
  StatusOr<uint64_t> CpuUsageUsec(const std::string& name) override;
  // Union over every hierarchy's subtree.
  StatusOr<std::vector<pid_t>> Procs(const std::string& name) override;
  // freezer.state = FROZEN, then waits until it reads FROZEN (it says FREEZING while tasks are
  // still running). On timeout the cgroup is thawed again and an error returned.
  Status Freeze(const std::string& name) override;
  Status Thaw(const std::string& name) override;
  Status Kill(const std::string& name) override;
  Status Destroy(const std::string& name) override;
  StatusOr<std::vector<std::string>> ListChildren(const std::string& name) override;
  Status RemoveIfEmpty(const std::string& name) override;

  static std::string_view ControllerName(Controller controller);

 private:
  // One mounted hierarchy and the controllers of ours that it carries.
  struct Hierarchy {
    std::string path;         // <root>/<first controller naming it>
    std::string controllers;  // "cpu" or "cpu,cpuacct": for messages
  };
  struct Layout {
    std::vector<Hierarchy> hierarchies;
    // Index into `hierarchies` per Controller, or -1 when that controller has no hierarchy.
    std::array<int, kControllerCount> index{-1, -1, -1, -1, -1};
  };

  // The hierarchies under root_, found once (they are mounted at boot and stay) and then reused:
  // every call used to stat each controller's path again.
  StatusOr<Layout> ResolveLayout() const;
  StatusOr<Layout> FindLayout() const;
  // The directory of cgroup `name` in `controller`'s hierarchy, or an error naming the missing
  // hierarchy and `purpose`.
  StatusOr<std::string> DirOf(const Layout& layout, Controller controller, const std::string& name,
                              std::string_view purpose) const;
  // The directories of cgroup `name` that exist, one per hierarchy.
  StatusOr<std::vector<std::string>> ExistingDirs(const std::string& name) const;
  Status SetMemoryLimit(const std::string& dir, uint64_t bytes);
  // Freezes and waits at most `timeout` for FROZEN; with `thaw_on_timeout` undoes it on failure.
  Status FreezeDir(const std::string& freezer_dir, std::chrono::milliseconds timeout,
                   bool thaw_on_timeout);
  // One round of Kill(): freeze (if a freezer cgroup exists), SIGKILL every listed task, thaw.
  Status KillRound(const std::string& name, const std::string& freezer_dir, bool can_freeze);

  std::string root_;
  mutable std::mutex layout_mu_;
  mutable std::optional<Layout> layout_;
};

}  // namespace corral::cgroups
