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
//
// Only MakeV1Backend (cgroup_backend.h) is seen outside this file.

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <climits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cgroups/cgroup_backend.h"
#include "cgroups/cgroup_fs.h"
#include "common/file_util.h"

namespace corral::cgroups {

namespace {

enum class Controller { kMemory, kCpu, kCpuacct, kPids, kFreezer };
constexpr size_t kControllerCount = 5;

constexpr Controller kAllControllers[] = {Controller::kMemory, Controller::kCpu,
                                          Controller::kCpuacct, Controller::kPids,
                                          Controller::kFreezer};

// What Create() cannot do without: every command needs memory and pids limits, CPU accounting
// and a way to kill its whole tree. The cpu hierarchy (CFS quota) is optional.
constexpr Controller kRequiredControllers[] = {Controller::kMemory, Controller::kCpuacct,
                                               Controller::kPids, Controller::kFreezer};

bool IsFrozen(std::string_view state) {
  while (!state.empty() && (state.back() == '\n' || state.back() == ' ')) state.remove_suffix(1);
  return state == "FROZEN";
}

void KillAll(const std::vector<pid_t>& pids) {
  // ESRCH: the task exited since cgroup.procs was read. Nothing else can fail for root.
  for (pid_t pid : pids) (void)::kill(pid, SIGKILL);
}

class V1Backend final : public CgroupBackend {
 public:
  // `root`: the directory holding the controller hierarchies (usually /sys/fs/cgroup).
  explicit V1Backend(std::string root) : root_(WithoutTrailingSlashes(std::move(root))) {}

  CgroupVersion version() const override { return CgroupVersion::kV1; }

  // mkdir in every hierarchy (parents as needed). If one mkdir fails, the cgroups this call
  // already made in other hierarchies are removed again.
  Status Create(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    ASSIGN_OR_RETURN(Layout layout, ResolveLayout());
    for (Controller controller : kRequiredControllers) {
      RETURN_IF_ERROR(DirOf(layout, controller, name, "Create").status());
    }
    std::vector<std::string> created;
    for (const Hierarchy& hierarchy : layout.hierarchies) {
      Status made = MakeCgroupDirs(hierarchy.path, name);
      if (!made.ok()) {
        // Leave no half-made cgroup behind: the name must be free in every hierarchy next time.
        for (const std::string& dir : created) (void)::rmdir(dir.c_str());
        return made;
      }
      created.push_back(hierarchy.path + "/" + name);
    }
    return Status();
  }

  // mkdir in every hierarchy there is, the missing parents too.
  Status CreateLeaf(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    ASSIGN_OR_RETURN(Layout layout, ResolveLayout());
    if (layout.hierarchies.empty()) return Status::Error("cgroup v1: no hierarchy under " + root_);
    for (const Hierarchy& hierarchy : layout.hierarchies) {
      Status made = MakeCgroupDirs(hierarchy.path, name);
      if (!made.ok() && made.error_number() != EEXIST) return made;
    }
    return Status();
  }

  // A memory limit is written to memory.limit_in_bytes first, then memsw: the kernel requires
  // memsw >= limit at every step, so when raising the limit above the current memsw value the
  // first write fails with EINVAL and the pair is written in the other order.
  Status SetLimits(const std::string& name, const CgroupLimits& limits) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    RETURN_IF_ERROR(ValidateLimits(limits));
    ASSIGN_OR_RETURN(Layout layout, ResolveLayout());
    if (limits.memory_max_bytes.has_value()) {
      ASSIGN_OR_RETURN(std::string dir, DirOf(layout, Controller::kMemory, name, "a memory limit"));
      RETURN_IF_ERROR(SetMemoryLimit(dir, *limits.memory_max_bytes));
    }
    if (limits.cpu_quota_us.has_value()) {
      ASSIGN_OR_RETURN(std::string dir, DirOf(layout, Controller::kCpu, name, "a CPU limit"));
      // Period first: the quota is checked against the period already in place.
      RETURN_IF_ERROR(
          WriteExistingFile(dir + "/cpu.cfs_period_us", std::to_string(limits.cpu_period_us)));
      RETURN_IF_ERROR(
          WriteExistingFile(dir + "/cpu.cfs_quota_us", std::to_string(*limits.cpu_quota_us)));
    }
    if (limits.pids_max.has_value()) {
      ASSIGN_OR_RETURN(std::string dir, DirOf(layout, Controller::kPids, name, "a pids limit"));
      RETURN_IF_ERROR(WriteExistingFile(dir + "/pids.max", std::to_string(*limits.pids_max)));
    }
    return Status();
  }

  // memory.limit_in_bytes (the kernel's page-aligned LONG_MAX is no limit), cpu.cfs_quota_us
  // (-1 is none) with cpu.cfs_period_us, pids.max ("max"); a missing hierarchy limits nothing.
  StatusOr<CgroupLimits> ReadLimits(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    ASSIGN_OR_RETURN(Layout layout, ResolveLayout());
    CgroupLimits limits;
    if (layout.index[static_cast<size_t>(Controller::kMemory)] >= 0) {
      ASSIGN_OR_RETURN(std::string dir, DirOf(layout, Controller::kMemory, name, "ReadLimits"));
      ASSIGN_OR_RETURN(uint64_t bytes, ReadUintFile(dir + "/memory.limit_in_bytes"));
      // "No limit" reads as PAGE_COUNTER_MAX pages: LONG_MAX rounded down to a page.
      const long page = ::sysconf(_SC_PAGESIZE);
      const uint64_t unlimited = static_cast<uint64_t>(LONG_MAX) & ~static_cast<uint64_t>(page > 0 ? page - 1 : 4095);
      if (bytes < unlimited) limits.memory_max_bytes = bytes;
    }
    if (layout.index[static_cast<size_t>(Controller::kCpu)] >= 0) {
      ASSIGN_OR_RETURN(std::string dir, DirOf(layout, Controller::kCpu, name, "ReadLimits"));
      ASSIGN_OR_RETURN(std::string quota, ReadFileToString(dir + "/cpu.cfs_quota_us"));
      ASSIGN_OR_RETURN(limits.cpu_period_us, ReadUintFile(dir + "/cpu.cfs_period_us"));
      // -1: no quota.
      if (quota.rfind("-1", 0) != 0) {
        ASSIGN_OR_RETURN(limits.cpu_quota_us, ParseCgroupUint(quota));
      }
    }
    if (layout.index[static_cast<size_t>(Controller::kPids)] >= 0) {
      ASSIGN_OR_RETURN(std::string dir, DirOf(layout, Controller::kPids, name, "ReadLimits"));
      ASSIGN_OR_RETURN(std::string max, ReadFileToString(dir + "/pids.max"));
      if (max.rfind("max", 0) != 0) {
        ASSIGN_OR_RETURN(limits.pids_max, ParseCgroupUint(max));
      }
    }
    return limits;
  }

  // Writes `pid` to cgroup.procs in every hierarchy.
  Status Attach(const std::string& name, pid_t pid) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    ASSIGN_OR_RETURN(Layout layout, ResolveLayout());
    if (layout.hierarchies.empty()) return Status::Error("cgroup v1: no hierarchy under " + root_);
    const std::string text = std::to_string(pid);
    for (const Hierarchy& hierarchy : layout.hierarchies) {
      RETURN_IF_ERROR(WriteExistingFile(hierarchy.path + "/" + name + "/cgroup.procs", text));
    }
    return Status();
  }

  // Create(<name>/<leaf>), then Attach: v1 has no rule against processes in inner cgroups.
  Status AttachToNewLeaf(const std::string& name, const std::string& leaf, pid_t pid) override {
    if (leaf.find('/') != std::string::npos) return Status::Error("leaf " + leaf + ": one component", EINVAL);
    RETURN_IF_ERROR(Create(name + "/" + leaf));
    return Attach(name + "/" + leaf, pid);
  }

  // {<hierarchy>/<name>, controller} for each of our controllers that has a hierarchy.
  StatusOr<std::vector<CgroupViewDir>> ViewDirs(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    ASSIGN_OR_RETURN(Layout layout, ResolveLayout());
    std::vector<CgroupViewDir> dirs;
    for (Controller controller : kAllControllers) {
      const int index = layout.index[static_cast<size_t>(controller)];
      if (index < 0) continue;
      dirs.push_back({layout.hierarchies[static_cast<size_t>(index)].path + "/" + name,
                      std::string(ControllerName(controller))});
    }
    return dirs;
  }

  // The `tasks` file of each hierarchy: "0" there moves the writing thread alone.
  StatusOr<std::vector<UniqueFd>> OpenSelfJoin(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    ASSIGN_OR_RETURN(Layout layout, ResolveLayout());
    if (layout.hierarchies.empty()) return Status::Error("cgroup v1: no hierarchy under " + root_);
    std::vector<UniqueFd> fds;
    for (const Hierarchy& hierarchy : layout.hierarchies) {
      const std::string path = hierarchy.path + "/" + name + "/tasks";
      UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
      if (!fd) return ErrnoError("open " + path);
      fds.push_back(std::move(fd));
    }
    return fds;
  }

  // Always an error (EOPNOTSUPP): CLONE_INTO_CGROUP is v2 only.
  StatusOr<UniqueFd> OpenForClone(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    return Status::Error("cgroup v1: CLONE_INTO_CGROUP needs cgroup v2; use Attach()", EOPNOTSUPP);
  }

  StatusOr<CgroupStats> Stats(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    ASSIGN_OR_RETURN(Layout layout, ResolveLayout());
    ASSIGN_OR_RETURN(std::string cpuacct, DirOf(layout, Controller::kCpuacct, name, "Stats"));
    ASSIGN_OR_RETURN(std::string memory, DirOf(layout, Controller::kMemory, name, "Stats"));
    ASSIGN_OR_RETURN(std::string pids, DirOf(layout, Controller::kPids, name, "Stats"));
    CgroupStats stats;
    // cpuacct.usage is the scheduler's exact runtime (ns); the user/system split is sampled at
    // ticks, so user + system can differ from it by a few ms.
    ASSIGN_OR_RETURN(uint64_t usage_ns, ReadUintFile(cpuacct + "/cpuacct.usage"));
    stats.cpu_usage_usec = usage_ns / 1000;
    StatusOr<uint64_t> user_ns = ReadUintFile(cpuacct + "/cpuacct.usage_user");
    if (user_ns.ok()) {
      ASSIGN_OR_RETURN(uint64_t sys_ns, ReadUintFile(cpuacct + "/cpuacct.usage_sys"));
      stats.cpu_user_usec = *user_ns / 1000;
      stats.cpu_system_usec = sys_ns / 1000;
    } else if (user_ns.status().error_number() == ENOENT) {
      // cpuacct.usage_user/usage_sys appeared in Linux 4.6; before, only cpuacct.stat in USER_HZ.
      ASSIGN_OR_RETURN(std::string stat, ReadFileToString(cpuacct + "/cpuacct.stat"));
      long ticks_per_second = ::sysconf(_SC_CLK_TCK);
      if (ticks_per_second <= 0) ticks_per_second = 100;
      const uint64_t usec_per_tick = 1000000 / static_cast<uint64_t>(ticks_per_second);
      stats.cpu_user_usec = FindKeyedValue(stat, "user").value_or(0) * usec_per_tick;
      stats.cpu_system_usec = FindKeyedValue(stat, "system").value_or(0) * usec_per_tick;
    } else {
      return user_ns.status();
    }
    RETURN_IF_ERROR(ReadCounters({memory + "/memory.usage_in_bytes", memory + "/memory.max_usage_in_bytes",
                                   memory + "/memory.oom_control", pids + "/pids.current", pids + "/pids.events"},
                                  &stats));
    return stats;
  }

  StatusOr<uint64_t> CpuUsageUsec(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    ASSIGN_OR_RETURN(Layout layout, ResolveLayout());
    ASSIGN_OR_RETURN(std::string cpuacct, DirOf(layout, Controller::kCpuacct, name, "CpuUsageUsec"));
    ASSIGN_OR_RETURN(uint64_t usage_ns, ReadUintFile(cpuacct + "/cpuacct.usage"));
    return usage_ns / 1000;
  }

  // Union over every hierarchy's subtree.
  StatusOr<std::vector<pid_t>> Procs(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    ASSIGN_OR_RETURN(Layout layout, ResolveLayout());
    std::vector<pid_t> pids;
    bool found = false;
    for (const Hierarchy& hierarchy : layout.hierarchies) {
      const std::string dir = hierarchy.path + "/" + name;
      ASSIGN_OR_RETURN(bool exists, PathExists(dir));
      if (!exists) continue;
      found = true;
      RETURN_IF_ERROR(CollectTreePids(dir, &pids));
    }
    if (!found) return ErrnoError("cgroup v1: no cgroup " + name + " under " + root_, ENOENT);
    SortUnique(&pids);
    return pids;
  }

  // freezer.state = FROZEN, then waits until it reads FROZEN (it says FREEZING while tasks are
  // still running). On timeout the cgroup is thawed again and an error returned.
  Status Freeze(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    ASSIGN_OR_RETURN(Layout layout, ResolveLayout());
    ASSIGN_OR_RETURN(std::string dir, DirOf(layout, Controller::kFreezer, name, "Freeze"));
    return FreezeDir(dir, kSettleTimeout, /*thaw_on_timeout=*/true);
  }

  Status Thaw(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    ASSIGN_OR_RETURN(Layout layout, ResolveLayout());
    ASSIGN_OR_RETURN(std::string dir, DirOf(layout, Controller::kFreezer, name, "Thaw"));
    return WriteExistingFile(dir + "/freezer.state", "THAWED");
  }

  Status Kill(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    ASSIGN_OR_RETURN(Layout layout, ResolveLayout());
    std::string freezer_dir;
    bool can_freeze = false;
    StatusOr<std::string> dir = DirOf(layout, Controller::kFreezer, name, "Kill");
    if (dir.ok()) {
      freezer_dir = *dir;
      ASSIGN_OR_RETURN(can_freeze, PathExists(freezer_dir));
    }
    auto deadline = std::chrono::steady_clock::now() + kSettleTimeout;
    for (;;) {
      ASSIGN_OR_RETURN(std::vector<pid_t> pids, Procs(name));
      if (pids.empty()) return Status();
      if (std::chrono::steady_clock::now() >= deadline) {
        return Status::Error("kill cgroup " + name + ": " + std::to_string(pids.size()) +
                             " tasks still there after " + std::to_string(kSettleTimeout.count()) +
                             " ms (first: " + std::to_string(pids.front()) + ")");
      }
      RETURN_IF_ERROR(KillRound(name, freezer_dir, can_freeze));
      // Killed tasks leave cgroup.procs as they pass cgroup_exit(), shortly after the thaw.
      (void)PollUntil(
          [&]() -> StatusOr<bool> {
            ASSIGN_OR_RETURN(std::vector<pid_t> left, Procs(name));
            return left.empty();
          },
          std::chrono::milliseconds(100), "kill");
    }
  }

  Status Destroy(const std::string& name) override {
    ASSIGN_OR_RETURN(std::vector<std::string> dirs, ExistingDirs(name));
    if (dirs.empty()) return Status();
    RETURN_IF_ERROR(Kill(name).WithContext("destroy " + name));
    auto deadline = std::chrono::steady_clock::now() + kSettleTimeout;
    for (const std::string& dir : dirs) {
      ASSIGN_OR_RETURN(std::vector<std::string> tree, ListTreeDeepestFirst(dir));
      for (const std::string& cgroup : tree) RETURN_IF_ERROR(RemoveCgroupDir(cgroup, deadline));
    }
    return Status();
  }

  StatusOr<std::vector<std::string>> ListChildren(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    ASSIGN_OR_RETURN(Layout layout, ResolveLayout());
    std::vector<std::string> children;
    for (const Hierarchy& hierarchy : layout.hierarchies) {
      ASSIGN_OR_RETURN(std::vector<std::string> names,
                       ListSubdirectories(hierarchy.path + "/" + name));
      for (std::string& child : names) children.push_back(name + "/" + child);
    }
    std::sort(children.begin(), children.end());
    children.erase(std::unique(children.begin(), children.end()), children.end());
    return children;
  }

  Status RemoveIfEmpty(const std::string& name) override {
    ASSIGN_OR_RETURN(std::vector<std::string> dirs, ExistingDirs(name));
    for (const std::string& dir : dirs) {
      // Look at every hierarchy before removing from any: removing the memory cgroup of a
      // command whose tasks are still in the freezer one would leave it half unmanaged. The
      // sandboxes' parent is asked after every stop: a stat, not a listing of its children.
      ASSIGN_OR_RETURN(bool has_children, HasSubdirectories(dir));
      if (has_children) return Status();
      StatusOr<std::vector<pid_t>> pids = ReadPidList(dir + "/cgroup.procs");
      if (pids.ok() && !pids->empty()) return Status();
      if (!pids.ok() && pids.status().error_number() != ENOENT) return pids.status();
    }
    for (const std::string& dir : dirs) RETURN_IF_ERROR(RemoveCgroupDirIfEmpty(dir));
    return Status();
  }

  static std::string_view ControllerName(Controller controller) {
    switch (controller) {
      case Controller::kMemory:
        return "memory";
      case Controller::kCpu:
        return "cpu";
      case Controller::kCpuacct:
        return "cpuacct";
      case Controller::kPids:
        return "pids";
      case Controller::kFreezer:
        return "freezer";
    }
    return "?";
  }

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
  StatusOr<Layout> ResolveLayout() const {
    std::lock_guard lock(layout_mu_);
    if (layout_) return *layout_;
    ASSIGN_OR_RETURN(Layout layout, FindLayout());
    if (!layout.hierarchies.empty()) layout_ = layout;
    return layout;
  }

  StatusOr<Layout> FindLayout() const {
    Layout layout;
    std::vector<std::pair<dev_t, ino_t>> identities;
    for (Controller controller : kAllControllers) {
      std::string path = root_ + "/" + std::string(ControllerName(controller));
      struct stat st;
      // stat, not lstat: "cpu" and "cpuacct" are usually symlinks to "cpu,cpuacct".
      if (::stat(path.c_str(), &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) continue;
        return ErrnoError("stat " + path);
      }
      if (!S_ISDIR(st.st_mode)) continue;
      int found = -1;
      for (size_t i = 0; i < identities.size(); ++i) {
        if (identities[i] == std::make_pair(st.st_dev, st.st_ino)) found = static_cast<int>(i);
      }
      if (found < 0) {
        found = static_cast<int>(layout.hierarchies.size());
        identities.emplace_back(st.st_dev, st.st_ino);
        layout.hierarchies.push_back(Hierarchy{path, std::string(ControllerName(controller))});
      } else {
        layout.hierarchies[found].controllers += "," + std::string(ControllerName(controller));
      }
      layout.index[static_cast<size_t>(controller)] = found;
    }
    return layout;
  }

  // The directory of cgroup `name` in `controller`'s hierarchy, or an error naming the missing
  // hierarchy and `purpose`.
  StatusOr<std::string> DirOf(const Layout& layout, Controller controller,
                                         const std::string& name, std::string_view purpose) const {
    int index = layout.index[static_cast<size_t>(controller)];
    if (index < 0) {
      return Status::Error("cgroup v1: no " + std::string(ControllerName(controller)) +
                               " hierarchy at " + root_ + "/" +
                               std::string(ControllerName(controller)) + " (needed by " +
                               std::string(purpose) + ")",
                           ENOENT);
    }
    return layout.hierarchies[static_cast<size_t>(index)].path + "/" + name;
  }

  // The directories of cgroup `name` that exist, one per hierarchy.
  StatusOr<std::vector<std::string>> ExistingDirs(const std::string& name) const {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    ASSIGN_OR_RETURN(Layout layout, ResolveLayout());
    std::vector<std::string> dirs;
    for (const Hierarchy& hierarchy : layout.hierarchies) {
      const std::string dir = hierarchy.path + "/" + name;
      ASSIGN_OR_RETURN(bool exists, PathExists(dir));
      if (exists) dirs.push_back(dir);
    }
    return dirs;
  }

  Status SetMemoryLimit(const std::string& dir, uint64_t bytes) {
    const std::string value = std::to_string(bytes);
    const std::string limit = dir + "/memory.limit_in_bytes";
    const std::string memsw = dir + "/memory.memsw.limit_in_bytes";
    // memory.memsw.* exists only when the kernel accounts swap (CONFIG_MEMCG_SWAP and not
    // swapaccount=0). Without it swappiness=0 is all we can do to keep the cgroup out of swap.
    ASSIGN_OR_RETURN(bool has_memsw, PathExists(memsw));
    Status status = WriteExistingFile(limit, value);
    if (!status.ok() && status.error_number() == EINVAL && has_memsw) {
      // mem_cgroup_resize_max() refuses limit > memsw.limit with EINVAL (and memsw < limit
      // likewise): when raising, memsw has to go first.
      RETURN_IF_ERROR(WriteExistingFile(memsw, value));
      RETURN_IF_ERROR(WriteExistingFile(limit, value));
    } else {
      RETURN_IF_ERROR(status);
      if (has_memsw) RETURN_IF_ERROR(WriteExistingFile(memsw, value));
    }
    Status swappiness = WriteExistingFile(dir + "/memory.swappiness", "0");
    if (!swappiness.ok() && swappiness.error_number() != ENOENT) return swappiness;
    return Status();
  }

  // Freezes and waits at most `timeout` for FROZEN; with `thaw_on_timeout` undoes it on failure.
  Status FreezeDir(const std::string& freezer_dir, std::chrono::milliseconds timeout,
                              bool thaw_on_timeout) {
    const std::string state = freezer_dir + "/freezer.state";
    RETURN_IF_ERROR(WriteExistingFile(state, "FROZEN"));
    // freezer.state reads FREEZING until every task of the subtree is in the refrigerator; a
    // task in uninterruptible sleep (e.g. on NFS) can hold that up indefinitely.
    Status status = PollUntil(
        [&]() -> StatusOr<bool> {
          ASSIGN_OR_RETURN(std::string current, ReadFileToString(state));
          return IsFrozen(current);
        },
        timeout, "freeze " + freezer_dir);
    if (!status.ok() && thaw_on_timeout) (void)WriteExistingFile(state, "THAWED");
    return status;
  }

  // One round of Kill(): freeze (if a freezer cgroup exists), SIGKILL every listed task, thaw.
  Status KillRound(const std::string& name, const std::string& freezer_dir,
                              bool can_freeze) {
    // Frozen, the tree cannot fork between our reading cgroup.procs and the kills, so one round
    // normally gets everything. A freeze that times out still leaves most tasks stopped: go on.
    if (can_freeze) (void)FreezeDir(freezer_dir, std::chrono::milliseconds(250), false);
    StatusOr<std::vector<pid_t>> pids = Procs(name);
    if (pids.ok()) KillAll(*pids);
    // v1 frozen tasks sit in the refrigerator with SIGKILL pending and die only once thawed.
    if (can_freeze) RETURN_IF_ERROR(WriteExistingFile(freezer_dir + "/freezer.state", "THAWED"));
    return pids.status();
  }

  std::string root_;
  mutable std::mutex layout_mu_;
  mutable std::optional<Layout> layout_;
};

}  // namespace

std::unique_ptr<CgroupBackend> MakeV1Backend(std::string root) {
  return std::make_unique<V1Backend>(std::move(root));
}

}  // namespace corral::cgroups
