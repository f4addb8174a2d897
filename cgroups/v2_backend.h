// The cgroup v2 (unified hierarchy) backend.
//
// A cgroup "a/b" is the directory <root>/a/b. Files used:
//   limits   memory.max, memory.swap.max (0 whenever memory.max is set; skipped when the kernel
//            does not account swap and the file is absent), cpu.max "<quota> <period>", pids.max
//   stats    cpu.stat (usage_usec, user_usec, system_usec), memory.current, memory.peak,
//            memory.events (oom_kill), pids.current, pids.events (max)
//   control  cgroup.subtree_control, cgroup.procs, cgroup.freeze, cgroup.events, cgroup.kill
//
// Create() enables the memory, cpu and pids controllers in cgroup.subtree_control of every
// ancestor, from the root down to the parent, limited to what each ancestor's
// cgroup.controllers offers (on a hybrid host's controller-less cgroup2 mount it enables
// nothing, and the core files still work: procs, freeze, kill, cpu.stat).
//
// Stats() reads a counter whose controller the hierarchy does not offer (its file is absent) as
// 0, as it does memory.peak on kernels before 5.19; cpu.stat, which every v2 cgroup has, must be
// there. Freeze, Kill and Destroy wait for the kernel at most kSettleTimeout (2 s).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cgroups/cgroup_backend.h"

namespace corral::cgroups {

class V2Backend final : public CgroupBackend {
 public:
  // `root`: a cgroup2 mount point (or a directory laid out like one), without trailing '/'.
  explicit V2Backend(std::string root);

  CgroupVersion version() const override { return CgroupVersion::kV2; }
  const std::string& root() const { return root_; }

  Status Create(const std::string& name) override;
  Status CreateLeaf(const std::string& name) override;
  Status SetLimits(const std::string& name, const CgroupLimits& limits) override;
  // memory.max, cpu.max and pids.max ("max" is no limit).
  StatusOr<CgroupLimits> ReadLimits(const std::string& name) override;
  Status Attach(const std::string& name, pid_t pid) override;
  // mkdir <name>/<leaf> (no controllers enabled on the way), pid into its cgroup.procs, then
  // memory/cpu/pids into <name>/cgroup.subtree_control.
  Status AttachToNewLeaf(const std::string& name, const std::string& leaf, pid_t pid) override;
  // {<root>/<name>, ""}.
  StatusOr<std::vector<CgroupViewDir>> ViewDirs(const std::string& name) override;
  // open(O_PATH|O_DIRECTORY|O_CLOEXEC): clone3 resolves CLONE_INTO_CGROUP's fd with
  // fdget_raw(), so an O_PATH descriptor is enough (checked on 6.1 and 6.18).
  StatusOr<UniqueFd> OpenForClone(const std::string& name) override;
  StatusOr<CgroupStats> Stats(const std::string& name) override;
  StatusOr<uint64_t> CpuUsageUsec(const std::string& name) override;
  StatusOr<std::vector<pid_t>> Procs(const std::string& name) override;
  // Writes cgroup.freeze=1 and waits until cgroup.events reports "frozen 1". On timeout the
  // cgroup is thawed again and an error returned.
  Status Freeze(const std::string& name) override;
  Status Thaw(const std::string& name) override;
  // cgroup.kill (Linux 5.14+); on older kernels: freeze, SIGKILL each listed pid, thaw. Then
  // waits until cgroup.events reports "populated 0".
  Status Kill(const std::string& name) override;
  Status Destroy(const std::string& name) override;
  StatusOr<std::vector<std::string>> ListChildren(const std::string& name) override;
  Status RemoveIfEmpty(const std::string& name) override;

 private:
  std::string PathOf(const std::string& name) const { return root_ + "/" + name; }

  // Enables memory/cpu/pids in `dir`/cgroup.subtree_control where offered and not yet enabled.
  Status EnableControllers(const std::string& dir);
  // The pre-5.14 path of Kill(): freeze, SIGKILL every pid in the tree, thaw.
  Status KillByFreezing(const std::string& name);
  StatusOr<bool> IsPopulated(const std::string& name);

  std::string root_;
};

}  // namespace corral::cgroups
