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
//
// Only MakeV2Backend (cgroup_backend.h) is seen outside this file.

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
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

// The controllers a sandbox's cgroup needs, in the order they are enabled.
constexpr std::string_view kWantedControllers[] = {"memory", "cpu", "pids"};

// True when `word` is one of the space-separated words of `list` (cgroup.controllers and
// cgroup.subtree_control both read like "cpuset cpu io memory pids\n").
bool ListHasWord(std::string_view list, std::string_view word) {
  size_t pos = 0;
  while (pos < list.size()) {
    size_t begin = list.find_first_not_of(" \t\n", pos);
    if (begin == std::string_view::npos) break;
    size_t end = list.find_first_of(" \t\n", begin);
    if (end == std::string_view::npos) end = list.size();
    if (list.substr(begin, end - begin) == word) return true;
    pos = end;
  }
  return false;
}

// The file's content, or nullopt when it does not exist.
StatusOr<std::optional<std::string>> ReadIfPresent(const std::string& path) {
  StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok() && text.status().error_number() == ENOENT) return std::optional<std::string>();
  if (!text.ok()) return text.status();
  return std::optional<std::string>(std::move(*text));
}

// "max" (no limit) or a number, with surrounding whitespace.
StatusOr<std::optional<uint64_t>> ParseMaxOrUint(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text == "max") return std::optional<uint64_t>();
  ASSIGN_OR_RETURN(uint64_t value, ParseCgroupUint(text));
  return std::optional<uint64_t>(value);
}

class V2Backend final : public CgroupBackend {
 public:
  // `root`: a cgroup2 mount point (or a directory laid out like one), without trailing '/'.
  explicit V2Backend(std::string root) : root_(WithoutTrailingSlashes(std::move(root))) {}

  CgroupVersion version() const override { return CgroupVersion::kV2; }

  Status Create(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    std::vector<std::string> parts = SplitCgroupName(name);
    // A concurrent run may remove a shared parent (RemoveIfEmpty) between our mkdir of it and of
    // its child (ENOENT): start again from the top, enabling the controllers again on the way.
    for (int attempt = 0;; ++attempt) {
      std::string dir = root_;
      Status status;
      for (size_t i = 0; i < parts.size() && status.ok(); ++i) {
        status = EnableControllers(dir);
        if (!status.ok()) break;
        dir += "/" + parts[i];
        bool last = i + 1 == parts.size();
        if (::mkdir(dir.c_str(), 0755) != 0 && (errno != EEXIST || last)) {
          status = ErrnoError("mkdir " + dir);
        }
      }
      if (status.ok() || status.error_number() != ENOENT || attempt >= 16) return status;
    }
  }

  Status CreateLeaf(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    Status made = MakeCgroupDirs(root_, name);
    if (!made.ok() && made.error_number() != EEXIST) return made;
    return Status();
  }

  Status SetLimits(const std::string& name, const CgroupLimits& limits) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    RETURN_IF_ERROR(ValidateLimits(limits));
    const std::string dir = PathOf(name);
    if (limits.memory_max_bytes.has_value()) {
      RETURN_IF_ERROR(
          WriteExistingFile(dir + "/memory.max", std::to_string(*limits.memory_max_bytes)));
      // memory.swap.max exists only when the kernel accounts swap (CONFIG_SWAP, and not booted
      // with swapaccount=0); without it there is no swap to switch off for this cgroup.
      Status swap = WriteExistingFile(dir + "/memory.swap.max", "0");
      if (!swap.ok() && swap.error_number() != ENOENT) return swap;
    }
    if (limits.cpu_quota_us.has_value()) {
      RETURN_IF_ERROR(WriteExistingFile(dir + "/cpu.max", std::to_string(*limits.cpu_quota_us) + " " +
                                                              std::to_string(limits.cpu_period_us)));
    }
    if (limits.pids_max.has_value()) {
      RETURN_IF_ERROR(WriteExistingFile(dir + "/pids.max", std::to_string(*limits.pids_max)));
    }
    return Status();
  }

  // memory.max, cpu.max and pids.max ("max" is no limit).
  StatusOr<CgroupLimits> ReadLimits(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    const std::string dir = PathOf(name);
    CgroupLimits limits;
    // A controller that is not enabled here has no files: nothing limits that resource.
    ASSIGN_OR_RETURN(std::optional<std::string> memory, ReadIfPresent(dir + "/memory.max"));
    if (memory) {
      ASSIGN_OR_RETURN(limits.memory_max_bytes, ParseMaxOrUint(*memory));
    }
    ASSIGN_OR_RETURN(std::optional<std::string> pids, ReadIfPresent(dir + "/pids.max"));
    if (pids) {
      ASSIGN_OR_RETURN(limits.pids_max, ParseMaxOrUint(*pids));
    }
    ASSIGN_OR_RETURN(std::optional<std::string> cpu, ReadIfPresent(dir + "/cpu.max"));
    if (cpu) {
      // "<quota|max> <period>\n"
      const std::string_view text(*cpu);
      const size_t space = text.find(' ');
      if (space == std::string_view::npos) return Status::Error(dir + "/cpu.max: no period in \"" + *cpu + "\"");
      ASSIGN_OR_RETURN(limits.cpu_quota_us, ParseMaxOrUint(text.substr(0, space)));
      ASSIGN_OR_RETURN(limits.cpu_period_us, ParseCgroupUint(text.substr(space + 1)));
    }
    return limits;
  }

  Status Attach(const std::string& name, pid_t pid) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    return WriteExistingFile(PathOf(name) + "/cgroup.procs", std::to_string(pid));
  }

  // mkdir <name>/<leaf> (no controllers enabled on the way), pid into its cgroup.procs, then
  // memory/cpu/pids into <name>/cgroup.subtree_control.
  Status AttachToNewLeaf(const std::string& name, const std::string& leaf, pid_t pid) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    RETURN_IF_ERROR(ValidateCgroupName(name + "/" + leaf));
    if (leaf.find('/') != std::string::npos) return Status::Error("leaf " + leaf + ": one component", EINVAL);
    const std::string dir = PathOf(name + "/" + leaf);
    // Create() would enable the controllers in `name` first, which the kernel refuses (EBUSY)
    // while `pid` is still in it.
    if (::mkdir(dir.c_str(), 0755) != 0) return ErrnoError("mkdir " + dir);
    RETURN_IF_ERROR(WriteExistingFile(dir + "/cgroup.procs", std::to_string(pid)));
    return EnableControllers(PathOf(name));
  }

  // {<root>/<name>, ""}.
  StatusOr<std::vector<CgroupViewDir>> ViewDirs(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    return std::vector<CgroupViewDir>{{PathOf(name), ""}};
  }

  // open(O_PATH|O_DIRECTORY|O_CLOEXEC): clone3 resolves CLONE_INTO_CGROUP's fd with
  // fdget_raw(), so an O_PATH descriptor is enough (checked on 6.1 and 6.18).
  StatusOr<UniqueFd> OpenForClone(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    const std::string dir = PathOf(name);
    UniqueFd fd(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!fd) return ErrnoError("open " + dir);
    return fd;
  }

  // Its cgroup.procs.
  StatusOr<std::vector<UniqueFd>> OpenSelfJoin(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    const std::string path = PathOf(name) + "/cgroup.procs";
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd) return ErrnoError("open " + path);
    std::vector<UniqueFd> fds;
    fds.push_back(std::move(fd));
    return fds;
  }

  StatusOr<CgroupStats> Stats(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    const std::string dir = PathOf(name);
    CgroupStats stats;
    // cpu.stat's usage, user and system lines come from the cgroup core (rstat), so they are
    // there even where the cpu controller is not enabled.
    ASSIGN_OR_RETURN(std::string cpu_stat, ReadFileToString(dir + "/cpu.stat"));
    std::optional<uint64_t> usage = FindKeyedValue(cpu_stat, "usage_usec");
    if (!usage.has_value()) return Status::Error(dir + "/cpu.stat: no usage_usec");
    stats.cpu_usage_usec = *usage;
    stats.cpu_user_usec = FindKeyedValue(cpu_stat, "user_usec").value_or(0);
    stats.cpu_system_usec = FindKeyedValue(cpu_stat, "system_usec").value_or(0);
    RETURN_IF_ERROR(ReadCounters({dir + "/memory.current", dir + "/memory.peak", dir + "/memory.events",
                                   dir + "/pids.current", dir + "/pids.events", /*absent_is_zero=*/true},
                                  &stats));
    return stats;
  }

  StatusOr<uint64_t> CpuUsageUsec(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    const std::string path = PathOf(name) + "/cpu.stat";
    ASSIGN_OR_RETURN(std::string cpu_stat, ReadFileToString(path));
    std::optional<uint64_t> usage = FindKeyedValue(cpu_stat, "usage_usec");
    if (!usage.has_value()) return Status::Error(path + ": no usage_usec");
    return *usage;
  }

  StatusOr<std::vector<pid_t>> Procs(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    const std::string dir = PathOf(name);
    ASSIGN_OR_RETURN(bool exists, PathExists(dir));
    if (!exists) return ErrnoError("cgroup " + dir, ENOENT);
    std::vector<pid_t> pids;
    RETURN_IF_ERROR(CollectTreePids(dir, &pids));
    SortUnique(&pids);
    return pids;
  }

  // Writes cgroup.freeze=1 and waits until cgroup.events reports "frozen 1". On timeout the
  // cgroup is thawed again and an error returned.
  Status Freeze(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    const std::string dir = PathOf(name);
    RETURN_IF_ERROR(WriteExistingFile(dir + "/cgroup.freeze", "1"));
    // The write only starts freezing: each task stops when it next leaves the kernel, and
    // cgroup.events says "frozen 1" once all of them (in every descendant) have.
    Status status = PollUntil(
        [&]() -> StatusOr<bool> {
          ASSIGN_OR_RETURN(uint64_t frozen, ReadKeyedValue(dir + "/cgroup.events", "frozen", false));
          return frozen == 1;
        },
        kSettleTimeout, "freeze " + dir);
    if (!status.ok()) (void)WriteExistingFile(dir + "/cgroup.freeze", "0");
    return status;
  }

  Status Thaw(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    return WriteExistingFile(PathOf(name) + "/cgroup.freeze", "0");
  }

  // cgroup.kill (Linux 5.14+); on older kernels: freeze, SIGKILL each listed pid, thaw. Then
  // waits until cgroup.events reports "populated 0".
  Status Kill(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    const std::string dir = PathOf(name);
    ASSIGN_OR_RETURN(bool exists, PathExists(dir));
    if (!exists) return ErrnoError("kill cgroup " + dir, ENOENT);
    // cgroup.kill (5.14+) SIGKILLs the whole subtree atomically, forks in flight included.
    Status status = WriteExistingFile(dir + "/cgroup.kill", "1");
    bool fallback = !status.ok() && status.error_number() == ENOENT;
    if (fallback) {
      RETURN_IF_ERROR(KillByFreezing(name));
    } else if (!status.ok()) {
      return status;
    }
    return PollUntil(
        [&]() -> StatusOr<bool> {
          ASSIGN_OR_RETURN(bool populated, IsPopulated(name));
          if (populated && fallback) {
            // Without cgroup.kill a task that forked before the freeze took hold may have a
            // child we have not signalled yet.
            StatusOr<std::vector<pid_t>> pids = Procs(name);
            if (pids.ok()) {
              for (pid_t pid : *pids) (void)::kill(pid, SIGKILL);
            }
          }
          return !populated;
        },
        kSettleTimeout, "kill " + dir + ": waiting for \"populated 0\"");
  }

  Status Destroy(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    const std::string dir = PathOf(name);
    ASSIGN_OR_RETURN(bool exists, PathExists(dir));
    if (!exists) return Status();
    RETURN_IF_ERROR(Kill(name).WithContext("destroy " + name));
    auto deadline = std::chrono::steady_clock::now() + kSettleTimeout;
    ASSIGN_OR_RETURN(std::vector<std::string> tree, ListTreeDeepestFirst(dir));
    for (const std::string& cgroup : tree) RETURN_IF_ERROR(RemoveCgroupDir(cgroup, deadline));
    return Status();
  }

  StatusOr<std::vector<std::string>> ListChildren(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    ASSIGN_OR_RETURN(std::vector<std::string> children, ListSubdirectories(PathOf(name)));
    for (std::string& child : children) child = name + "/" + child;
    return children;
  }

  Status RemoveIfEmpty(const std::string& name) override {
    RETURN_IF_ERROR(ValidateCgroupName(name));
    return RemoveCgroupDirIfEmpty(PathOf(name));
  }

 private:
  std::string PathOf(const std::string& name) const { return root_ + "/" + name; }

  // Enables memory/cpu/pids in `dir`/cgroup.subtree_control where offered and not yet enabled.
  Status EnableControllers(const std::string& dir) {
    ASSIGN_OR_RETURN(std::string available, ReadFileToString(dir + "/cgroup.controllers"));
    ASSIGN_OR_RETURN(std::string enabled, ReadFileToString(dir + "/cgroup.subtree_control"));
    std::string request;
    for (std::string_view controller : kWantedControllers) {
      if (!ListHasWord(available, controller) || ListHasWord(enabled, controller)) continue;
      if (!request.empty()) request += ' ';
      request += '+';
      request += controller;
    }
    // Nothing to write when every offered controller is already on: this keeps Create() working
    // under a parent that has processes of its own, where any write would fail (below).
    if (request.empty()) return Status();
    Status status = WriteExistingFile(dir + "/cgroup.subtree_control", request);
    if (!status.ok() && status.error_number() == EBUSY) {
      // The "no internal processes" rule: a non-root cgroup that has member processes cannot
      // hand controllers to its children.
      return status.WithContext("enable \"" + request + "\" in " + dir +
                                " (the cgroup holds processes of its own)");
    }
    return status;
  }

  // The pre-5.14 path of Kill(): freeze, SIGKILL every pid in the tree, thaw.
  Status KillByFreezing(const std::string& name) {
    const std::string dir = PathOf(name);
    // A frozen tree cannot fork new tasks between our reading cgroup.procs and the kills. If the
    // freeze times out (a task stuck in the kernel) we kill anyway; Kill() re-kills while it waits.
    RETURN_IF_ERROR(WriteExistingFile(dir + "/cgroup.freeze", "1"));
    (void)PollUntil(
        [&]() -> StatusOr<bool> {
          ASSIGN_OR_RETURN(uint64_t frozen, ReadKeyedValue(dir + "/cgroup.events", "frozen", false));
          return frozen == 1;
        },
        std::chrono::milliseconds(500), "freeze " + dir);
    StatusOr<std::vector<pid_t>> pids = Procs(name);
    if (pids.ok()) {
      for (pid_t pid : *pids) (void)::kill(pid, SIGKILL);
    }
    // v2 lets SIGKILL through to frozen tasks, but a tree left frozen would be a surprise.
    RETURN_IF_ERROR(WriteExistingFile(dir + "/cgroup.freeze", "0"));
    return pids.status();
  }

  StatusOr<bool> IsPopulated(const std::string& name) {
    const std::string path = PathOf(name) + "/cgroup.events";
    ASSIGN_OR_RETURN(std::string events, ReadFileToString(path));
    std::optional<uint64_t> populated = FindKeyedValue(events, "populated");
    if (!populated.has_value()) return Status::Error(path + ": no \"populated\" line");
    return *populated != 0;
  }

  std::string root_;
};

}  // namespace

std::unique_ptr<CgroupBackend> MakeV2Backend(std::string root) {
  return std::make_unique<V2Backend>(std::move(root));
}

}  // namespace corral::cgroups
