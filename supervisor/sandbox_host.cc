#include "supervisor/sandbox_host.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/fs.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
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

#include "cgroups/proc_cgroup.h"
#include "common/file_util.h"
#include "common/log.h"
#include "isolation/cpu_affinity.h"
#include "isolation/launcher.h"
#include "isolation/sandbox_spec.h"
#include "isolation/seccomp_program.h"
#include "rootfs/disk_image.h"
#include "rootfs/mount_plan.h"
#include "supervisor/cgroup_placement.h"

namespace corral::supervisor {
namespace {

constexpr uint64_t kInitCapabilities =
    (1ull << CAP_SETUID) | (1ull << CAP_SETGID) | (1ull << CAP_KILL);

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

StatusOr<UniqueFd> ListenControl(const std::string& path) {
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return Status::Error("control socket path too long: " + path);
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoError("control socket");
  if (unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoError("unlink " + path);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return ErrnoError("bind " + path);
  if (chmod(path.c_str(), 0600) != 0) return ErrnoError("chmod " + path);
  if (listen(fd.get(), 4) != 0) return ErrnoError("listen " + path);
  return fd;
}

}  // namespace

uint64_t ProcessStartTime(pid_t pid) {
  auto stat = ReadFileToString("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return 0;
  // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
  size_t close = stat->rfind(')');
  if (close == std::string::npos) return 0;
  const char* p = stat->c_str() + close + 1;
  // Fields 3..22: skip 19 fields, then read the 20th.
  for (int field = 3; field < 22; ++field) {
    p = strchr(p + 1, ' ');
    if (p == nullptr) return 0;
  }
  return strtoull(p + 1, nullptr, 10);
}

StatusOr<UniqueFd> ConnectControl(const std::string& path) {
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return Status::Error("control socket path too long: " + path);
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoError("control socket");
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return ErrnoError("connect " + path);
  }
  return fd;
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

std::string SandboxHost::LayerPath(const std::string& id) const {
  return config_.state_dir + "/sandboxes/" + id + "/disk.img";
}

std::string SandboxHost::SnapshotPath(const std::string& snapshot_id) const {
  return config_.state_dir + "/snapshots/" + snapshot_id + ".img";
}

std::string SandboxHost::ControlPath(const std::string& id) const {
  return config_.run_dir + "/sandboxes/" + id + "/ctl";
}

Status SandboxHost::Prepare(const SandboxShape& shape) {
  const std::string dir = config_.state_dir + "/sandboxes/" + shape.id;
  RETURN_IF_ERROR(MakeDirs(dir, 0700));
  const uid_t base = static_cast<uid_t>(shape.uid_base);
  return rootfs::EnsureDiskImage(LayerPath(shape.id), shape.disk_bytes, base, base);
}

namespace {

// What corral-init is launched with, but its mounts: root inside over the sandbox's uid range,
// the precompiled seccomp policy, the CPUs it is pinned to, its rlimits, argv and environment.
isolation::LaunchPlan InitLaunchPlan(const SandboxShape& shape, const std::vector<int>& cpus) {
  const uid_t base = static_cast<uid_t>(shape.uid_base);
  isolation::LaunchPlan plan;
  plan.cpu_mask = isolation::CpuMask(cpus);
  plan.seccomp = isolation::PrecompiledSeccompPolicy();
  plan.hostname = shape.hostname;
  plan.host_uid_base = base;
  plan.host_gid_base = base;
  plan.uid = 0;
  plan.gid = 0;
  plan.cwd = "/";
  plan.rlimits.push_back({RLIMIT_CORE, 0});
  // Not the daemon's own (raised) limit: a fixed one, plenty for compilers and package managers,
  // unless the daemon's hard limit is lower (raising it needs CAP_SYS_RESOURCE on the host).
  struct rlimit files;
  rlim_t open_files = kSandboxOpenFiles;
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_max < open_files) open_files = files.rlim_max;
  plan.rlimits.push_back({RLIMIT_NOFILE, open_files});
  plan.argv = {"corral-init", "--control"};
  if (!shape.loopback_ports.empty()) {
    plan.argv.push_back("--listeners=" + std::to_string(shape.loopback_ports.size()));
    plan.loopback_ports = shape.loopback_ports;
  }
  plan.env = {"PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"};
  plan.die_with_parent = false;
  plan.init_capabilities = kInitCapabilities;
  return plan;
}

// The sandbox's cgroup limits: memory, pids, and the CPU quota of its millicores.
cgroups::CgroupLimits CgroupLimitsOf(const SandboxShape& shape) {
  cgroups::CgroupLimits limits;
  if (shape.memory_bytes > 0) limits.memory_max_bytes = shape.memory_bytes;
  if (shape.pids > 0) limits.pids_max = shape.pids;
  if (shape.cpu_millicores > 0) limits.cpu_quota_us = shape.cpu_millicores * limits.cpu_period_us / 1000;
  return limits;
}

}  // namespace

StatusOr<SandboxProcess> SandboxHost::Start(const SandboxShape& shape) {
  const uid_t base = static_cast<uid_t>(shape.uid_base);
  RETURN_IF_ERROR(Prepare(shape));
  const std::string run_dir = config_.run_dir + "/sandboxes/" + shape.id;
  // The sandbox's child builds its skeleton as the sandbox's own host uid in a tmpfs mounted on
  // <run_dir>/scratch (in its own mount namespace): the path must be searchable by it.
  for (const std::string& dir : {config_.run_dir, config_.run_dir + "/scratch"}) {
    RETURN_IF_ERROR(MakeDirs(dir, 0755));
    if (chmod(dir.c_str(), 0755) != 0) return ErrnoError("chmod " + dir);
  }
  RETURN_IF_ERROR(MakeDirs(run_dir, 0700));

  ASSIGN_OR_RETURN(rootfs::LoopDevice disk, rootfs::AttachLoopDevice(LayerPath(shape.id)));
  rootfs::MountPlanInput input;
  input.scratch_dir = config_.run_dir + "/scratch";
  input.scratch_bytes = std::min<uint64_t>(shape.disk_bytes, 1ull << 30);
  input.workspace_device = disk.path;
  input.hostname = shape.hostname;
  input.nameservers = shape.nameservers;
  input.host_uid_base = base;
  input.host_gid_base = base;
  input.agent_uid = isolation::kAgentUid;
  if (!mcp_binary_.empty()) {
    input.binds.push_back({mcp_binary_, "/run/corral/bin/corral-mcp", /*read_only=*/true, /*is_dir=*/false});
  }

  if (keep_parent_) RETURN_IF_ERROR(keep_parent_());
  {
    std::lock_guard lock(placed_mu_);
    placed_.erase(shape.id);  // an adopted sandbox starts again at the current place
  }
  const std::string cgroup = SandboxCgroup(shape.id);
  // What programs inside read to learn their limits: the sandbox's cgroup, and the CPUs a
  // CPU limit pins it to (spread over the host by the sandbox's uid slot).
  ASSIGN_OR_RETURN(std::vector<cgroups::CgroupViewDir> view, backend_.ViewDirs(cgroup));
  for (const auto& dir : view) input.cgroup_dirs.push_back({dir.host_dir, dir.name});
  std::vector<int> cpus;
  if (shape.cpu_millicores > 0) {
    ASSIGN_OR_RETURN(std::vector<int> allowed, isolation::AllowedCpus());
    const uint64_t slot = static_cast<uint64_t>((shape.uid_base - kUidFirst) / kUidStep);
    cpus = isolation::ChooseCpus(shape.cpu_millicores, allowed, slot);
    input.cpus_online = isolation::CpuListText(cpus);
  }

  isolation::LaunchPlan plan = InitLaunchPlan(shape, cpus);
  ASSIGN_OR_RETURN(plan.mounts, rootfs::BuildMountPlan(input));

  // A cgroup left by a sandbox that died with the previous daemon goes first, also at an older
  // corrald's place; a new start is always at the current one.
  RETURN_IF_ERROR(RemoveLegacyCgroups(shape.id, cgroup));
  RETURN_IF_ERROR(backend_.Destroy(cgroup));
  // The child starts in the sandbox's cgroup itself, so that the cgroup namespace it makes is
  // rooted there (commands see "/cmd-N", and /sys/fs/cgroup is the whole sandbox); once it has
  // made it, init moves to its own leaf, <cgroup>/init.
  RETURN_IF_ERROR(backend_.Create(cgroup));
  const cgroups::CgroupLimits limits = CgroupLimitsOf(shape);
  auto fail = [&](Status status) {
    (void)backend_.Destroy(cgroup);
    return status;
  };
  Status limited = backend_.SetLimits(cgroup, limits);
  if (!limited.ok()) return fail(limited);
  UniqueFd cgroup_fd;
  if (backend_.version() == cgroups::CgroupVersion::kV2) {
    auto opened = backend_.OpenForClone(cgroup);
    if (!opened.ok()) return fail(opened.status());
    cgroup_fd = std::move(*opened);
  }

  auto listener = ListenControl(ControlPath(shape.id));
  if (!listener.ok()) return fail(listener.status());
  auto init_fd = isolation::LoadSealedExecutable(init_path_);
  if (!init_fd.ok()) return fail(init_fd.status());
  plan.init_fd = init_fd->get();
  plan.status_fd = listener->get();
  plan.cgroup_fd = cgroup_fd ? cgroup_fd.get() : -1;
  isolation::AttachFn attach;
  if (backend_.version() == cgroups::CgroupVersion::kV1) {
    attach = [&](pid_t pid) { return backend_.Attach(cgroup, pid); };
  }
  auto to_leaf = [&](pid_t pid) { return backend_.AttachToNewLeaf(cgroup, "init", pid); };
  auto launched = isolation::Launch(plan, attach, to_leaf);
  // The sandbox's mount holds the loop device now (autoclear); init holds the listener.
  disk.fd.reset();
  listener->reset();
  if (!launched.ok()) return fail(launched.status());

  SandboxProcess process;
  process.pid = launched->pid;
  process.pidfd = std::move(launched->pidfd);
  process.child = true;
  process.start_time = ProcessStartTime(process.pid);
  auto control = ConnectControl(ControlPath(shape.id));
  if (!control.ok()) {
    (void)Stop(shape.id, &process);
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
  auto where = cgroups::ProcessCgroup(pid, backend_.version());
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

Status SandboxHost::CopyLayer(const std::string& from_image, const std::string& to_image) {
  const size_t slash = to_image.rfind('/');
  if (slash != std::string::npos) RETURN_IF_ERROR(MakeDirs(to_image.substr(0, slash), 0700));
  UniqueFd from(open(from_image.c_str(), O_RDONLY | O_CLOEXEC));
  if (!from) return ErrnoError("open " + from_image);
  struct stat st;
  if (fstat(from.get(), &st) != 0) return ErrnoError("stat " + from_image);
  const std::string partial = to_image + ".partial";
  UniqueFd to(open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!to) return ErrnoError("create " + partial);
  auto fail = [&](Status status) {
    unlink(partial.c_str());
    return status;
  };
  if (ioctl(to.get(), FICLONE, from.get()) != 0) {
    if (errno != EOPNOTSUPP && errno != EXDEV && errno != EINVAL && errno != ENOTTY) {
      return fail(ErrnoError("reflink " + from_image));
    }
    // No reflinks here: copy the data extents only, so the copy stays as sparse as the source.
    if (ftruncate(to.get(), st.st_size) != 0) return fail(ErrnoError("truncate " + partial));
    off_t offset = 0;
    while (offset < st.st_size) {
      off_t data = lseek(from.get(), offset, SEEK_DATA);
      if (data < 0) {
        if (errno == ENXIO) break;  // only a hole is left
        return fail(ErrnoError("seek " + from_image));
      }
      off_t hole = lseek(from.get(), data, SEEK_HOLE);
      if (hole < 0) return fail(ErrnoError("seek " + from_image));
      loff_t in = data, out = data;
      size_t left = static_cast<size_t>(hole - data);
      while (left > 0) {
        ssize_t n = copy_file_range(from.get(), &in, to.get(), &out, left, 0);
        if (n < 0) return fail(ErrnoError("copy " + from_image));
        if (n == 0) break;
        left -= static_cast<size_t>(n);
      }
      offset = hole;
    }
  }
  if (fsync(to.get()) != 0) return fail(ErrnoError("fsync " + partial));
  if (rename(partial.c_str(), to_image.c_str()) != 0) return fail(ErrnoError("rename " + partial));
  return Status();
}

Status SandboxHost::CopySandboxLayer(const std::string& id, pid_t init_pid, const std::string& to_image) {
  if (init_pid <= 0) return CopyLayer(LayerPath(id), to_image);
  const std::string cgroup = SandboxCgroup(id);
  RETURN_IF_ERROR(backend_.Freeze(cgroup));
  Status copied = [&]() -> Status {
    // The sandbox's root is an overlay whose upper layer is the image's file system: syncfs on
    // it writes that back through the loop device into the image file.
    const std::string root = "/proc/" + std::to_string(init_pid) + "/root";
    UniqueFd fd(open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) return ErrnoError("open " + root);
    if (syncfs(fd.get()) != 0) return ErrnoError("syncfs " + root);
    return CopyLayer(LayerPath(id), to_image);
  }();
  Status thawed = backend_.Thaw(cgroup);
  if (!copied.ok()) return copied;
  return thawed;
}

Status SandboxHost::Thaw(const std::string& id) { return backend_.Thaw(SandboxCgroup(id)); }

Status SandboxHost::CreateCommandCgroup(const std::string& id, uint64_t seq) {
  const std::string cgroup = CommandCgroup(id, seq);
  Status made = backend_.Create(cgroup);
  if (!made.ok() && made.error_number() == EEXIST) {
    // A leftover from a command that a crashed daemon never finished: it goes, with anything in it.
    RETURN_IF_ERROR(backend_.Destroy(cgroup));
    made = backend_.Create(cgroup);
  }
  RETURN_IF_ERROR(made);
  // The command's own cgroup repeats the sandbox's limits (which still bound the whole): a
  // program that reads the limits of the cgroup /proc/self/cgroup names (libuv, the JVM) finds
  // the sandbox's there, not "max".
  ASSIGN_OR_RETURN(cgroups::CgroupLimits limits, backend_.ReadLimits(SandboxCgroup(id)));
  return backend_.SetLimits(cgroup, limits);
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
