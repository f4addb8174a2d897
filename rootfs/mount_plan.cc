#include "rootfs/mount_plan.h"

#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "rootfs/host_image.h"

namespace corral::rootfs {
namespace {

constexpr uint64_t kLockedDown = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
constexpr uint64_t kMiB = 1ull << 20;
// In the scratch: the empty directory that masks directories (bound read-only over them).
constexpr char kEmptyDir[] = "empty";

// The minimal /dev: harmless character devices (major, minor per Documentation/admin-guide/devices.txt).
const std::pair<const char*, dev_t> kDevices[] = {
    {"null", makedev(1, 3)},   {"zero", makedev(1, 5)},    {"full", makedev(1, 7)},
    {"random", makedev(1, 8)}, {"urandom", makedev(1, 9)}, {"tty", makedev(5, 0)}};

MountOp Bind(std::string source, std::string target, bool read_only, MountOp::Create create) {
  MountOp op;
  op.kind = MountOp::Kind::kBind;
  op.description = "bind " + source + " on /" + target;
  op.source = std::move(source);
  op.target = std::move(target);
  op.flags = MS_BIND | MS_REC;
  op.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (read_only ? MOUNT_ATTR_RDONLY : 0);
  op.recursive = true;
  op.create = create;
  return op;
}

MountOp Fs(std::string fstype, std::string source, std::string target, unsigned long flags,
           std::string data) {
  MountOp op;
  op.kind = MountOp::Kind::kFs;
  op.description = "mount " + fstype + " on /" + target;
  op.fstype = std::move(fstype);
  op.source = std::move(source);
  op.target = std::move(target);
  op.flags = flags;
  op.data = std::move(data);
  return op;
}

MountOp Simple(MountOp::Kind kind, std::string target, std::string what) {
  MountOp op;
  op.kind = kind;
  op.description = what + " /" + target;
  op.target = std::move(target);
  return op;
}

std::string Join(const std::string& dir, const std::string& name) {
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

// What a program reads to learn its own limits: the sandbox's cgroup at /sys/fs/cgroup (read-
// only, its own subtree only) and the CPUs it is pinned to at /sys/devices/system/cpu/online.
Status PlanSandboxView(const MountPlanInput& in, MountPlan& plan) {
  const bool single = in.cgroup_dirs.size() == 1 && in.cgroup_dirs[0].name.empty();
  if (!single) {
    for (const MountPlanCgroupDir& dir : in.cgroup_dirs) {
      if (dir.name.empty() || dir.name.find('/') != std::string::npos || dir.name == "." || dir.name == "..") {
        return Status::Error("mount plan: cgroup directory name '" + dir.name + "' (v2: one unnamed, v1: controllers)");
      }
    }
  }
  for (const MountPlanCgroupDir& dir : in.cgroup_dirs) {
    if (dir.source.empty() || dir.source[0] != '/') {
      return Status::Error("mount plan: cgroup directory must be absolute: " + dir.source);
    }
  }
  constexpr uint64_t kViewAttrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
  if (single) {
    MountOp cgroup = Bind(in.cgroup_dirs[0].source, "sys/fs/cgroup", /*read_only=*/true, MountOp::Create::kNone);
    cgroup.attr_set = kViewAttrs;
    plan.mounts.push_back(cgroup);
  } else if (!in.cgroup_dirs.empty()) {
    // Room for the controllers' mountpoints: a directory of the scratch holding one per
    // controller (made in the skeleton, as the sandbox's root, and bound read-only once they are
    // in place; no tmpfs of its own, see KernelFileSystems' /dev/shm).
    const std::string room = Join(in.scratch_dir, "cgroup");
    plan.skeleton.push_back({FileOp::Kind::kDir, room, "", 0755, in.host_uid_base, in.host_gid_base});
    for (const MountPlanCgroupDir& dir : in.cgroup_dirs) {
      plan.skeleton.push_back(
          {FileOp::Kind::kDir, Join(room, dir.name), "", 0755, in.host_uid_base, in.host_gid_base});
    }
    MountOp view = Bind(room, "sys/fs/cgroup", /*read_only=*/false, MountOp::Create::kNone);
    view.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
    plan.mounts.push_back(view);
    for (const MountPlanCgroupDir& dir : in.cgroup_dirs) {
      MountOp controller = Bind(dir.source, "sys/fs/cgroup/" + dir.name, /*read_only=*/true, MountOp::Create::kDir);
      controller.attr_set = kViewAttrs;
      plan.mounts.push_back(controller);
    }
    MountOp read_only = Simple(MountOp::Kind::kSetAttr, "sys/fs/cgroup", "make read-only");
    read_only.attr_set = MOUNT_ATTR_RDONLY;
    plan.mounts.push_back(read_only);
  }
  if (!in.cpus_online.empty()) {
    const std::string online = Join(in.scratch_dir, "cpus-online");
    plan.skeleton.push_back({FileOp::Kind::kFile, online, in.cpus_online, 0444, in.host_uid_base, in.host_gid_base});
    MountOp bind = Bind(online, "sys/devices/system/cpu/online", /*read_only=*/true, MountOp::Create::kNone);
    bind.attr_set = kViewAttrs;
    plan.mounts.push_back(bind);
  }
  return Status();
}

// Builds a plan in steps; each appends to the skeleton and the mounts in the order the child
// carries them out. Root inside is the sandbox's host uid/gid base.
class Planner {
 public:
  Planner(const MountPlanInput& in, MountPlan& plan)
      : in_(in), plan_(plan), root_uid_(in.host_uid_base), root_gid_(in.host_gid_base),
        lower_(Join(in.scratch_dir, "lower")) {}

  void Dir(const std::string& path, mode_t mode, uid_t uid, gid_t gid) {
    plan_.skeleton.push_back({FileOp::Kind::kDir, path, "", mode, uid, gid});
  }
  void RootDir(const std::string& path, mode_t mode) { Dir(path, mode, root_uid_, root_gid_); }
  void File(const std::string& path, std::string content) {
    plan_.skeleton.push_back({FileOp::Kind::kFile, path, std::move(content), 0644, root_uid_, root_gid_});
  }
  void Symlink(const std::string& path, std::string target) {
    plan_.skeleton.push_back({FileOp::Kind::kSymlink, path, std::move(target), 0777, root_uid_, root_gid_});
  }

  // The scratch tmpfs and the writable layer (a directory, a device, or dirs in the scratch).
  // Returns the overlay's upper and work directories.
  StatusOr<std::pair<std::string, std::string>> Scratch() {
    plan_.scratch_dir = in_.scratch_dir;
    // One inode per 16 KiB of cap bounds file-count attacks (10^6 empty files) as well as bytes.
    uint64_t inodes = std::max<uint64_t>(in_.scratch_bytes / 16384, 4096);
    plan_.scratch_options = "size=" + std::to_string(in_.scratch_bytes) +
                            ",nr_inodes=" + std::to_string(inodes) + ",mode=0755" +
                            ",uid=" + std::to_string(in_.host_uid_base) +
                            ",gid=" + std::to_string(in_.host_gid_base);
    plan_.skeleton_uid = in_.host_uid_base;
    plan_.skeleton_gid = in_.host_gid_base;
    plan_.root_dir = Join(in_.scratch_dir, "root");
    // Scratch: root-owned (inside) directories of the sandbox's own.
    RootDir(lower_, 0755);
    RootDir(Join(in_.scratch_dir, "tmp"), 01777);
    RootDir(Join(in_.scratch_dir, "run"), 0755);
    RootDir(Join(in_.scratch_dir, "shm"), 01777);
    RootDir(Join(in_.scratch_dir, kEmptyDir), 0555);
    RootDir(plan_.root_dir, 0755);
    std::string upper = in_.workspace_upper, work = in_.workspace_work;
    if (!in_.workspace_device.empty()) {
      if (!upper.empty()) return Status::Error("mount plan: a workspace is a directory or a device, not both");
      plan_.layer_device = in_.workspace_device;
      plan_.layer_dir = Join(in_.scratch_dir, "layer");
      plan_.layer_uid = root_uid_;
      plan_.layer_gid = root_gid_;
      RootDir(plan_.layer_dir, 0755);
      upper = Join(plan_.layer_dir, "upper");
      work = Join(plan_.layer_dir, "work");
    } else if (upper.empty()) {
      upper = Join(in_.scratch_dir, "upper");
      work = Join(in_.scratch_dir, "work");
      RootDir(upper, 0755);
      RootDir(work, 0700);
    }
    return std::make_pair(upper, work);
  }

  // The skeleton: mountpoints, homes and the generated /etc.
  void Skeleton() {
    for (const char* name : {"proc", "dev", "sys", "tmp", "run", "etc"}) RootDir(Join(lower_, name), 0755);
    // Homes exist in every image: the agent's default cwd is its home.
    RootDir(Join(lower_, "home"), 0755);
    Dir(Join(lower_, "home/agent"), 0755, root_uid_ + in_.agent_uid, root_gid_ + in_.agent_uid);
    RootDir(Join(lower_, "root"), 0700);
    if (in_.host_image) {
      RootDir(Join(lower_, "var"), 0755);
      RootDir(Join(lower_, "var/tmp"), 01777);
      for (const char* name : {"opt", "srv", "mnt"}) RootDir(Join(lower_, name), 0755);
      File(Join(lower_, "etc/passwd"), GeneratedPasswd());
      File(Join(lower_, "etc/group"), GeneratedGroup());
      File(Join(lower_, "etc/nsswitch.conf"), GeneratedNsswitch(!in_.nameservers.empty()));
    }
    File(Join(lower_, "etc/hostname"), in_.hostname + "\n");
    File(Join(lower_, "etc/hosts"), GeneratedHosts(in_.hostname));
    File(Join(lower_, "etc/resolv.conf"), GeneratedResolvConf(in_.nameservers));
  }

  // The image's layers at l/0, l/1, ... of the scratch; returns their part of lowerdir
  // (":l/0:l/1..."), relative to the scratch dir.
  std::string ImageLayers() {
    if (in_.image_layers.empty()) return "";
    RootDir(Join(in_.scratch_dir, "l"), 0755);
    std::string lower;
    for (size_t i = 0; i < in_.image_layers.size(); ++i) {
      const std::string name = "l/" + std::to_string(i);
      RootDir(Join(in_.scratch_dir, name), 0755);
      plan_.layers.push_back({in_.image_layers[i], Join(in_.scratch_dir, name)});
      lower += ":" + name;
    }
    return lower;
  }

  // The host image: its /usr trees bound read-only (or their merged-usr links), and the /etc
  // entries of the allowlist (directories bound, small files copied, links kept).
  Status HostImage() {
    for (const std::string& tree : HostImageTrees()) {
      const std::string host_path = Join(in_.host_root, tree);
      struct stat st;
      if (lstat(host_path.c_str(), &st) != 0) continue;
      if (S_ISLNK(st.st_mode)) {
        RETURN_IF_ERROR(CopyLink(host_path, Join(lower_, tree)));
      } else if (S_ISDIR(st.st_mode)) {
        RootDir(Join(lower_, tree), 0755);
        plan_.mounts.push_back(Bind(host_path, tree, /*read_only=*/true, MountOp::Create::kNone));
      }
    }
    for (const std::string& entry : HostEtcAllowlist()) {
      const std::string host_path = Join(in_.host_root, "etc/" + entry);
      struct stat st;
      if (lstat(host_path.c_str(), &st) != 0) continue;
      const std::string skeleton_path = Join(lower_, "etc/" + entry);
      if (S_ISLNK(st.st_mode)) {
        RETURN_IF_ERROR(CopyLink(host_path, skeleton_path));
      } else if (S_ISDIR(st.st_mode)) {
        RootDir(skeleton_path, 0755);
        plan_.mounts.push_back(Bind(host_path, "etc/" + entry, true, MountOp::Create::kNone));
      } else if (S_ISREG(st.st_mode) && st.st_size <= static_cast<off_t>(4 * kMiB)) {
        // Copied by the child, in the kernel (sendfile): the launcher never reads the bytes.
        plan_.skeleton.push_back({FileOp::Kind::kCopy, skeleton_path, host_path, 0644, root_uid_, root_gid_});
      }
    }
    return Status();
  }

  // /proc (runc's masks and read-only paths), /dev (tmpfs, mknod'd devices, devpts, shm, the
  // std* links) and /sys read-only.
  void KernelFileSystems() {
    // /proc: a fresh instance for the sandbox's pid namespace, with runc's masks.
    plan_.mounts.push_back(Fs("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, ""));
    // /dev: a small tmpfs with the minimal device set, a private devpts and /dev/shm.
    plan_.mounts.push_back(Fs("tmpfs", "tmpfs", "dev", MS_NOSUID | MS_NOEXEC, "mode=0755,size=65536,nr_inodes=64"));
    // The devices are made with mknod in the sandbox's own /dev tmpfs (which is therefore not
    // nodev): one syscall each instead of a bind mount. Their numbers are the kernel's fixed ABI.
    for (const auto& [name, device] : kDevices) {
      MountOp op = Simple(MountOp::Kind::kDevice, std::string("dev/") + name, "mknod");
      op.device = device;
      plan_.mounts.push_back(op);
    }
    MountOp devpts = Fs("devpts", "devpts", "dev/pts", MS_NOSUID | MS_NOEXEC,
                        "newinstance,ptmxmode=0666,mode=0620");
    // /dev/shm is a directory of the scratch tmpfs (its cap, its memory charge), not a tmpfs of
    // its own: every superblock registers a memcg-aware shrinker, and each memory cgroup made
    // on the host allocates room for all of them (see MaskedPaths' masks, below).
    MountOp shm = Bind(Join(in_.scratch_dir, "shm"), "dev/shm", /*read_only=*/false, MountOp::Create::kDir);
    shm.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
    // No /dev/mqueue: mq_open(3) works without it (the ipc namespace is the sandbox's own).
    for (MountOp* op : {&devpts, &shm}) {
      op->create = MountOp::Create::kDir;
      plan_.mounts.push_back(*op);
    }
    for (auto [link, target] : {std::pair<const char*, const char*>{"dev/ptmx", "pts/ptmx"},
                                {"dev/fd", "/proc/self/fd"},
                                {"dev/stdin", "/proc/self/fd/0"},
                                {"dev/stdout", "/proc/self/fd/1"},
                                {"dev/stderr", "/proc/self/fd/2"},
                                {"dev/core", "/proc/kcore"}}) {
      MountOp op = Simple(MountOp::Kind::kSymlink, link, "symlink");
      op.source = target;
      plan_.mounts.push_back(op);
    }
    // /sys read-only (it shows only the sandbox's own network devices), with masks below.
    plan_.mounts.push_back(Fs("sysfs", "sysfs", "sys", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, ""));
    for (const std::string& path : MaskedPaths()) {
      bool is_file = path.rfind("proc/", 0) == 0 && path != "proc/acpi" && path != "proc/asound" &&
                     path != "proc/scsi";
      MountOp mask = Simple(is_file ? MountOp::Kind::kMaskFile : MountOp::Kind::kMaskDir, path, "mask");
      // A directory is masked by a read-only bind of one empty directory of the scratch.
      if (!is_file) mask.source = Join(in_.scratch_dir, kEmptyDir);
      plan_.mounts.push_back(mask);
    }
    for (const std::string& path : ReadOnlyPaths()) {
      plan_.mounts.push_back(Simple(MountOp::Kind::kReadOnly, path, "read-only"));
    }
  }

  // /tmp and /run in the scratch tmpfs (bounded by the same cap as the writable layer), then the
  // caller's binds.
  Status ScratchAndBinds() {
    plan_.mounts.push_back(Bind(Join(in_.scratch_dir, "tmp"), "tmp", false, MountOp::Create::kNone));
    plan_.mounts.push_back(Bind(Join(in_.scratch_dir, "run"), "run", false, MountOp::Create::kNone));
    for (const MountPlanBind& bind : in_.binds) {
      if (bind.target.size() < 2 || bind.target[0] != '/') {
        return Status::Error("mount plan: bind target must be absolute: " + bind.target);
      }
      MountOp op = Bind(bind.source, bind.target.substr(1), bind.read_only,
                        bind.if_exists      ? MountOp::Create::kNone
                        : bind.is_dir       ? MountOp::Create::kDir
                                            : MountOp::Create::kFile);
      op.if_exists = bind.if_exists;
      plan_.mounts.push_back(std::move(op));
    }
    return Status();
  }

 private:
  // A symlink of the host's, made again in the skeleton with the same target.
  Status CopyLink(const std::string& host_path, const std::string& skeleton_path) {
    char target[4096];
    ssize_t n = readlink(host_path.c_str(), target, sizeof(target) - 1);
    if (n < 0) return ErrnoError("readlink " + host_path);
    Symlink(skeleton_path, std::string(target, static_cast<size_t>(n)));
    return Status();
  }

  const MountPlanInput& in_;
  MountPlan& plan_;
  const uid_t root_uid_;
  const gid_t root_gid_;
  const std::string lower_;
};

Status ValidateInput(const MountPlanInput& in) {
  if (in.scratch_dir.empty() || in.scratch_dir[0] != '/') {
    return Status::Error("mount plan: scratch dir must be absolute");
  }
  if (!in.host_image && in.image_layers.empty()) return Status::Error("mount plan: an image needs layers");
  if (in.host_image && !in.image_layers.empty()) return Status::Error("mount plan: the host image has no layers");
  if (in.image_layers.size() > kMaxImageLayers) {
    return Status::Error("mount plan: " + std::to_string(in.image_layers.size()) + " image layers (at most " +
                         std::to_string(kMaxImageLayers) + ")");
  }
  for (const std::string& layer : in.image_layers) {
    if (layer.empty() || layer[0] != '/') return Status::Error("mount plan: image layer must be absolute: " + layer);
  }
  if (in.workspace_upper.empty() != in.workspace_work.empty()) {
    return Status::Error("mount plan: workspace needs both upper and work dirs");
  }
  // overlayfs splits its options at ',' and ':' (and treats '\\' as an escape).
  for (const std::string* path : {&in.scratch_dir, &in.workspace_upper, &in.workspace_work}) {
    if (path->find_first_of(",:\\") != std::string::npos) {
      return Status::Error("mount plan: path '" + *path + "' contains ',', ':' or '\\'");
    }
  }
  return Status();
}

}  // namespace

const std::vector<std::string>& MaskedPaths() {
  // runc's defaults (libcontainer/specconv/example.go) plus the powercap tree.
  static const std::vector<std::string> paths = {
      "proc/acpi",       "proc/asound",      "proc/kcore",         "proc/keys",
      "proc/latency_stats", "proc/timer_list", "proc/timer_stats", "proc/sched_debug",
      "proc/scsi",
      "sys/firmware",    "sys/devices/virtual/powercap", "sys/kernel/debug",
      "sys/kernel/security",
  };
  return paths;
}

const std::vector<std::string>& ReadOnlyPaths() {
  // sysrq-trigger is read-only rather than masked: a /dev/null over it would take writes.
  static const std::vector<std::string> paths = {"proc/bus", "proc/fs", "proc/irq", "proc/sys",
                                                 "proc/sysrq-trigger"};
  return paths;
}

StatusOr<MountPlan> BuildMountPlan(const MountPlanInput& in) {
  RETURN_IF_ERROR(ValidateInput(in));
  MountPlan plan;
  Planner planner(in, plan);
  auto upper_work = planner.Scratch();
  if (!upper_work.ok()) return upper_work.status();
  planner.Skeleton();
  if (in.host_image) RETURN_IF_ERROR(planner.HostImage());
  // The overlay: the skeleton on top of the image's layers (if any), the writable layer above.
  plan.overlay_options = "lowerdir=lower" + planner.ImageLayers() + ",upperdir=" + upper_work->first +
                         ",workdir=" + upper_work->second;
  planner.KernelFileSystems();
  RETURN_IF_ERROR(PlanSandboxView(in, plan));
  RETURN_IF_ERROR(planner.ScratchAndBinds());
  return plan;
}

}  // namespace corral::rootfs
