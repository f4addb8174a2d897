#include "supervisor/sandboxes/sandbox_host.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

#include "common/file_util.h"
#include "common/log.h"
#include "isolation/launcher.h"
#include "isolation/sandbox_launch.h"
#include "supervisor/sandboxes/cgroup_placement.h"
#include "supervisor/sandboxes/claude_runtime.h"

namespace corral::supervisor {
namespace {

Status WaitForExit(int pidfd, int timeout_ms) {
  struct pollfd pfd = {pidfd, POLLIN, 0};
  int n;
  do {
    n = poll(&pfd, 1, timeout_ms);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoError("poll pidfd");
  if (n == 0) return Status::Error("sandbox init did not exit", ETIMEDOUT);
  return Status();
}

// A control socket's two ends: a SOCK_SEQPACKET socket (close-on-exec) and its address.
struct ControlEnd {
  UniqueFd fd;
  struct sockaddr_un addr = {};
};

StatusOr<ControlEnd> ControlEndFor(const std::string& path) {
  ControlEnd end;
  end.addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(end.addr.sun_path)) return Status::Error("control socket path too long: " + path);
  memcpy(end.addr.sun_path, path.c_str(), path.size() + 1);
  end.fd.reset(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!end.fd) return ErrnoError("control socket");
  return end;
}

StatusOr<UniqueFd> ListenControl(const std::string& path) {
  ASSIGN_OR_RETURN(ControlEnd end, ControlEndFor(path));
  UniqueFd& fd = end.fd;
  const struct sockaddr_un& addr = end.addr;
  if (unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoError("unlink " + path);
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) return ErrnoError("bind " + path);
  if (chmod(path.c_str(), 0600) != 0) return ErrnoError("chmod " + path);
  if (listen(fd.get(), 4) != 0) return ErrnoError("listen " + path);
  return std::move(fd);
}

// /proc/PID/stat from field 3 on ("S 1 ..."); empty when the process is gone. The command name
// (field 2) may hold spaces and parentheses: the fields start after the last ')'.
std::string StatFieldsFrom3(pid_t pid) {
  auto stat = ReadFileToString("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return "";
  const size_t close = stat->rfind(')');
  if (close == std::string::npos || close + 2 >= stat->size()) return "";
  return stat->substr(close + 2);
}

}  // namespace

uint64_t SandboxOpenFiles() {
  struct rlimit files;
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_max < kSandboxOpenFiles) return files.rlim_max;
  return kSandboxOpenFiles;
}

uint64_t ProcessStartTime(pid_t pid) {
  const std::string fields = StatFieldsFrom3(pid);
  if (fields.empty()) return 0;
  const char* p = fields.c_str();
  // Field 22 is the 20th from field 3: skip 19 spaces.
  for (int field = 3; field < 22; ++field) {
    p = strchr(p, ' ');
    if (p == nullptr) return 0;
    ++p;
  }
  return strtoull(p, nullptr, 10);
}

char ProcessState(pid_t pid) {
  const std::string fields = StatFieldsFrom3(pid);
  return fields.empty() ? '?' : fields[0];
}

StatusOr<UniqueFd> ConnectControl(const std::string& path) {
  ASSIGN_OR_RETURN(ControlEnd end, ControlEndFor(path));
  if (connect(end.fd.get(), reinterpret_cast<const sockaddr*>(&end.addr), sizeof(end.addr)) != 0) {
    return ErrnoError("connect " + path);
  }
  return std::move(end.fd);
}

SandboxHost::SandboxHost(const DaemonConfig& config, cgroups::CgroupBackend& backend,
                         std::string init_path)
    : config_(config),
      backend_(backend),
      cgroup_parent_(config.cgroup_parent.empty() ? kDefaultCgroupParent : config.cgroup_parent),
      init_path_(std::move(init_path)) {}

void SandboxHost::SetCgroupPlacement(std::string parent, std::vector<std::string> legacy_parents,
                                     bool remove_empty_parent) {
  cgroup_parent_ = std::move(parent);
  legacy_cgroup_parents_ = std::move(legacy_parents);
  remove_empty_parent_ = remove_empty_parent;
}

std::string SandboxHost::SandboxCgroup(const std::string& id) const {
  {
    std::lock_guard lock(placed_mu_);
    if (auto it = placed_.find(id); it != placed_.end()) return it->second;
  }
  return cgroup_parent_ + "/" + id;
}

Status SandboxHost::RemoveLegacyCgroups(const std::string& id, const std::string& except) {
  for (const std::string& parent : legacy_cgroup_parents_) {
    const std::string cgroup = parent + "/" + id;
    if (cgroup == except) continue;
    RETURN_IF_ERROR(backend_.Destroy(cgroup));
    (void)backend_.RemoveIfEmpty(parent);
  }
  return Status();
}

std::string SandboxHost::CommandCgroup(const std::string& id, uint64_t seq) const {
  return SandboxCgroup(id) + "/cmd-" + std::to_string(seq);
}

WritableLayer SandboxHost::SandboxLayer(const std::string& id, std::optional<LayerKind> kind) const {
  const std::string dir = config_.state_dir + "/sandboxes/" + id;
  const WritableLayer image{LayerKind::kImage, dir + "/disk.img"}, quota_dir{LayerKind::kQuotaDir, dir + "/layer"};
  struct stat st;
  if (lstat(quota_dir.path.c_str(), &st) == 0) return quota_dir;
  if (lstat(image.path.c_str(), &st) == 0) return image;
  return kind.value_or(new_layer_kind_) == LayerKind::kImage ? image : quota_dir;
}

WritableLayer SandboxHost::SnapshotLayer(const std::string& snapshot_id, LayerKind kind) const {
  const std::string base = config_.state_dir + "/snapshots/" + snapshot_id;
  struct stat st;
  if (lstat((base + ".img").c_str(), &st) == 0) return {LayerKind::kImage, base + ".img"};
  if (lstat((base + ".layer").c_str(), &st) == 0) return {LayerKind::kQuotaDir, base + ".layer"};
  return kind == LayerKind::kImage ? WritableLayer{kind, base + ".img"} : WritableLayer{kind, base + ".layer"};
}

std::string SandboxHost::ControlPath(const std::string& id) const {
  return config_.run_dir + "/sandboxes/" + id + "/ctl";
}

void SandboxHost::SetMcpBinary(const std::string& path) {
  mcp_binary_ = path;
  if (path.empty()) return;
  std::unique_ptr<char, decltype(&free)> real(realpath(path.c_str(), nullptr), &free);
  if (real) mcp_binary_ = real.get();
}

std::optional<isolation::BindMount> SandboxHost::McpBind() const {
  if (mcp_binary_.empty()) return std::nullopt;
  return isolation::BindMount{mcp_binary_, "/run/corral/bin/corral-mcp", /*read_only=*/true};
}

void SandboxHost::SetClaudeRuntime(std::string runtime_dir, std::string binary) {
  claude_runtime_ = std::move(runtime_dir);
  claude_binary_ = std::move(binary);
  if (claude_binary_.empty()) claude_runtime_.clear();
}

std::vector<isolation::BindMount> SandboxHost::ClaudeBinds() const {
  if (claude_runtime_.empty()) return {};
  return {isolation::BindMount{claude_runtime_, kClaudeRuntimeInSandbox, /*read_only=*/true},
          isolation::BindMount{claude_binary_, kClaudeBinaryInSandbox, /*read_only=*/true}};
}

Status SandboxHost::Prepare(const isolation::SandboxSpec& spec) {
  if (!spec.host_uid_base() || (!spec.layer_image() && !spec.workspace())) {
    return Status::Error("sandbox spec without a writable layer or a host uid range", EINVAL);
  }
  const WritableLayer layer = spec.layer_image() ? WritableLayer{LayerKind::kImage, *spec.layer_image()}
                                                 : WritableLayer{LayerKind::kQuotaDir, *spec.workspace()};
  return MakeLayer(layer, *spec.host_uid_base(), spec.limits().disk_bytes.value_or(0));
}

StatusOr<int> SandboxHost::InitProgram() {
  std::lock_guard lock(init_mu_);
  if (!init_fd_) {
    ASSIGN_OR_RETURN(init_fd_, isolation::LoadSealedExecutable(init_path_));
  }
  return init_fd_.get();
}

StatusOr<SandboxProcess> SandboxHost::Start(const std::string& id, const isolation::SandboxSpec& spec) {
  RETURN_IF_ERROR(Prepare(spec));
  RETURN_IF_ERROR(isolation::MakeRunDirs(config_.run_dir));
  RETURN_IF_ERROR(MakeDirs(config_.run_dir + "/sandboxes/" + id, 0700));

  if (keep_parent_) RETURN_IF_ERROR(keep_parent_());
  {
    std::lock_guard lock(placed_mu_);
    placed_.erase(id);  // an adopted sandbox starts again at the current place
  }
  const std::string cgroup = SandboxCgroup(id);
  // A cgroup left by a sandbox that died with the previous daemon goes first, also at an older
  // corrald's place; a new start is always at the current one.
  RETURN_IF_ERROR(RemoveLegacyCgroups(id, cgroup));
  RETURN_IF_ERROR(backend_.Destroy(cgroup));

  ASSIGN_OR_RETURN(UniqueFd listener, ListenControl(ControlPath(id)));
  ASSIGN_OR_RETURN(int init_fd, InitProgram());
  // The child starts in the sandbox's cgroup itself, so that the cgroup namespace it makes is
  // rooted there (commands see "/cmd-N", and /sys/fs/cgroup is the whole sandbox); once it has
  // made it, init moves to its own leaf, <cgroup>/init. CPU-limited sandboxes are spread over
  // the host's CPUs by their uid slot.
  isolation::LaunchSite site;
  site.cgroup = cgroup;
  site.run_dir = config_.run_dir;
  site.cpu_slot = static_cast<uint64_t>((static_cast<int64_t>(*spec.host_uid_base()) - kUidFirst) / kUidStep);
  site.init_fd = init_fd;
  site.status_fd = listener.get();
  site.leaf = "init";
  ASSIGN_OR_RETURN(isolation::PreparedLaunch prepared, isolation::PrepareLaunch(spec, site, backend_));
  // The overlay makes its work/work directory anew at each mount, with its own credentials (no
  // CAP_SYS_RESOURCE: it never overrides a quota), and XFS reserves blocks for a mkdir against
  // the project: a project-quota layer filled to its cap would mount read-only. Its cap is
  // raised by kMountSlack for the launch (nothing of the sandbox's runs yet) and set back after.
  const uint64_t cap = spec.limits().disk_bytes.value_or(0);
  const bool slack = spec.workspace() && cap > 0;
  const WritableLayer layer{LayerKind::kQuotaDir, spec.workspace().value_or("")};
  if (slack) RETURN_IF_ERROR(ResizeLayer(layer, *spec.host_uid_base(), cap + kMountSlack));
  auto launched = isolation::LaunchPrepared(prepared);
  if (slack) {
    Status reset = ResizeLayer(layer, *spec.host_uid_base(), cap);
    if (!reset.ok()) {
      LogWarn("sandbox", "the disk cap stays raised by the mount's slack", {{"sandbox", id}, {"error", reset.ToString()}});
    }
  }
  listener.reset();  // init holds it now
  if (!launched.ok()) {
    (void)backend_.Destroy(cgroup);
    return launched.status();
  }

  SandboxProcess process;
  process.pid = launched->pid;
  process.pidfd = std::move(launched->pidfd);
  process.child = true;
  process.start_time = ProcessStartTime(process.pid);
  auto control = ConnectControl(ControlPath(id));
  if (!control.ok()) {
    (void)Stop(id, &process);
    return control.status();
  }
  process.control = std::move(*control);
  return process;
}

StatusOr<std::optional<SandboxProcess>> SandboxHost::Adopt(const std::string& id, pid_t pid,
                                                           uint64_t start_time) {
  if (pid <= 0 || start_time == 0) return std::optional<SandboxProcess>();
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd) {
    if (errno == ESRCH) return std::optional<SandboxProcess>();
    return ErrnoError("pidfd_open");
  }
  // The pidfd pins this pid: if the start time matches now, it is the same process for as long
  // as we hold the fd.
  if (ProcessStartTime(pid) != start_time) return std::optional<SandboxProcess>();
  auto control = ConnectControl(ControlPath(id));
  if (!control.ok()) return control.status();
  // Where it runs: an older corrald may have put it elsewhere than we would now.
  auto where = backend_.ProcessCgroup(pid);
  const std::string suffix = "/" + id + "/init";
  if (!where.ok()) {
    LogWarn("sandbox", "cannot read init's cgroup; assuming the current place",
            {{"sandbox", id}, {"error", where.status().ToString()}});
  } else if (where->size() > suffix.size() && where->compare(where->size() - suffix.size(), suffix.size(), suffix) == 0) {
    const std::string cgroup = where->substr(0, where->size() - 5);  // without "/init"
    if (cgroup != cgroup_parent_ + "/" + id) {
      LogInfo("sandbox", "adopted where it runs, not under the current cgroup parent",
              {{"sandbox", id}, {"cgroup", cgroup}});
      std::lock_guard lock(placed_mu_);
      placed_[id] = cgroup;
    }
  } else {
    LogWarn("sandbox", "init is not in a cgroup <parent>/<id>/init; assuming the current place",
            {{"sandbox", id}, {"cgroup", *where}});
  }
  SandboxProcess process;
  process.pid = pid;
  process.start_time = start_time;
  process.pidfd = std::move(pidfd);
  process.control = std::move(*control);
  process.child = false;
  return std::optional<SandboxProcess>(std::move(process));
}

Status SandboxHost::Stop(const std::string& id, SandboxProcess* process) {
  const std::string cgroup = SandboxCgroup(id);
  if (process != nullptr && process->pidfd) {
    // SIGKILL to PID 1 takes its whole pid namespace down; the cgroup kill below catches any
    // process on its way out.
    syscall(SYS_pidfd_send_signal, process->pidfd.get(), SIGKILL, nullptr, 0);
    Status waited = WaitForExit(process->pidfd.get(), 10000);
    if (!waited.ok()) LogWarn("sandbox", "init did not exit after SIGKILL", {{"sandbox", id}});
    if (process->child) {
      siginfo_t info;
      while (waitid(P_PIDFD, static_cast<id_t>(process->pidfd.get()), &info, WEXITED) != 0 &&
             errno == EINTR) {
      }
    }
    process->pidfd.reset();
    process->control.reset();
  }
  RETURN_IF_ERROR(backend_.Destroy(cgroup));
  // Its parent too once empty, when it is corrald's: the current one (not systemd's scope), or an
  // older corrald's (RemoveLegacyCgroups). Another place it was adopted at stays.
  if (remove_empty_parent_ && cgroup == cgroup_parent_ + "/" + id) (void)backend_.RemoveIfEmpty(cgroup_parent_);
  RETURN_IF_ERROR(RemoveLegacyCgroups(id, ""));
  {
    std::lock_guard lock(placed_mu_);
    placed_.erase(id);
  }
  const std::string run_dir = config_.run_dir + "/sandboxes/" + id;
  return RemoveTree(run_dir);
}

Status SandboxHost::Destroy(const std::string& id) {
  RETURN_IF_ERROR(Stop(id, nullptr));
  return RemoveTree(config_.state_dir + "/sandboxes/" + id);
}

Status SandboxHost::CopySandboxLayer(const std::string& id, pid_t init_pid, const WritableLayer& to) {
  const WritableLayer from = SandboxLayer(id);
  if (init_pid <= 0) return CopyLayer(from, to);
  const std::string cgroup = SandboxCgroup(id);
  RETURN_IF_ERROR(backend_.Freeze(cgroup));
  Status copied = [&]() -> Status {
    // The sandbox's root is an overlay whose upper layer is the image's file system (or the
    // state dir's): syncfs on it writes that back, through the loop device into the image file.
    const std::string root = "/proc/" + std::to_string(init_pid) + "/root";
    UniqueFd fd(open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) return ErrnoError("open " + root);
    if (syncfs(fd.get()) != 0) return ErrnoError("syncfs " + root);
    return CopyLayer(from, to);
  }();
  Status thawed = backend_.Thaw(cgroup);
  if (!copied.ok()) return copied;
  return thawed;
}

Status SandboxHost::Thaw(const std::string& id) { return backend_.Thaw(SandboxCgroup(id)); }

Status SandboxHost::SetLimits(const std::string& id, int64_t uid_base, const isolation::ResourceLimits& limits) {
  RETURN_IF_ERROR(backend_.SetLimits(SandboxCgroup(id), isolation::CgroupLimitsOf(limits)));
  if (!limits.disk_bytes) return Status();
  return ResizeLayer(SandboxLayer(id), uid_base, *limits.disk_bytes);
}

StatusOr<uint64_t> SandboxHost::CpuUsageUsec(const std::string& id) { return backend_.CpuUsageUsec(SandboxCgroup(id)); }

StatusOr<std::vector<UniqueFd>> SandboxHost::CreateCommandCgroup(const std::string& id, uint64_t seq) {
  const std::string cgroup = CommandCgroup(id, seq);
  Status made = backend_.Create(cgroup);
  if (!made.ok() && made.error_number() == EEXIST) {
    // A leftover from a command that a crashed daemon never finished: it goes, with anything in it.
    RETURN_IF_ERROR(backend_.Destroy(cgroup));
    made = backend_.Create(cgroup);
  }
  RETURN_IF_ERROR(made);
  // The command's own cgroup repeats the sandbox's memory and pids limits (which still bound the
  // whole): a program that reads the limits of the cgroup /proc/self/cgroup names (libuv, the
  // JVM) finds the sandbox's there, not "max". Not its CPU quota: a write of cpu.max (v1
  // cpu.cfs_quota_us) walks every task group of the host under cgroup_mutex
  // (tg_set_cfs_bandwidth), which at 1,500 sandboxes was a fifth of corrald's time in a loop of
  // commands, and stalled every other cgroup change meanwhile. A CPU-limited sandbox's CPUs
  // (its affinity) are what thread pools size themselves by.
  ASSIGN_OR_RETURN(cgroups::CgroupLimits limits, backend_.ReadLimits(SandboxCgroup(id)));
  limits.cpu_quota_us.reset();
  RETURN_IF_ERROR(backend_.SetLimits(cgroup, limits));
  return backend_.OpenSelfJoin(cgroup);
}

StatusOr<cgroups::CgroupStats> SandboxHost::CommandCgroupStats(const std::string& id, uint64_t seq) {
  return backend_.Stats(CommandCgroup(id, seq));
}

Status SandboxHost::RemoveCommandCgroup(const std::string& id, uint64_t seq) {
  const std::string cgroup = CommandCgroup(id, seq);
  RETURN_IF_ERROR(backend_.RemoveIfEmpty(cgroup));
  // Whatever is still there (a task that appeared after the check, a leftover) goes for good.
  return backend_.Destroy(cgroup);
}

StatusOr<cgroups::CgroupStats> SandboxHost::FinishCommandCgroup(const std::string& id, uint64_t seq) {
  const std::string cgroup = CommandCgroup(id, seq);
  ASSIGN_OR_RETURN(cgroups::CgroupStats stats, backend_.Stats(cgroup));
  if (stats.pids_current != 0) {
    // A command is its whole process tree: what its main process left running goes with it
    // (and its figures are read again once it is gone).
    RETURN_IF_ERROR(backend_.Kill(cgroup));
    ASSIGN_OR_RETURN(stats, backend_.Stats(cgroup));
  }
  // The figures are read: a cgroup that cannot be removed now goes with the sandbox's.
  Status removed = RemoveCommandCgroup(id, seq);
  if (!removed.ok()) {
    LogWarn("sandbox", "cannot remove a command's cgroup", {{"cgroup", cgroup}, {"error", removed.ToString()}});
  }
  return stats;
}

}  // namespace corral::supervisor
