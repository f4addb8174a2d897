// MountPlan: the sandbox's root file system as pure data.
//
// BuildMountPlan() decides every directory, file, overlay and mount of a sandbox's root from a
// MountPlanInput, without touching the kernel, so the plan is unit-tested without privileges.
// ExecuteMountPlan() (mount_executor.h) carries it out in the child, with raw syscalls only.
//
// Layout while the child builds the root (all inside the child's private mount namespace):
//   <scratch_dir>            a tmpfs sized by the disk cap
//     lower/                 the generated skeleton: mountpoints, /etc, /home/agent
//     upper/ work/           the writable layer when there is no workspace
//     tmp/ run/              bound to /tmp and /run of the sandbox
//     l/0 l/1 ...            the image's layers (top first), each an idmapped read-only bind of
//                            its shared host directory (see isolation/idmap_userns.h)
//     root/                  the overlay: lower = skeleton (+ image), upper = workspace or upper/
// Every mount after the overlay targets a path relative to root/, resolved with openat2
// (RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS), so a symlink planted in an image or a workspace can
// never redirect a mount to a host path: the step fails closed instead.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace corral::rootfs {

// A directory, file or symlink created in the scratch tmpfs before the overlay is mounted.
struct FileOp {
  enum class Kind { kDir, kFile, kSymlink, kCopy };
  Kind kind = Kind::kDir;
  std::string path;     // absolute host path under the scratch dir
  std::string content;  // file content, the symlink's target, or (kCopy) the host file to copy
  mode_t mode = 0755;
  uid_t uid = 0;        // host ids
  gid_t gid = 0;
};

// One step applied to the new root (before pivot_root).
struct MountOp {
  enum class Kind {
    kBind,      // bind `source` (a host path) on target
    kFs,        // mount a fresh `fstype` with `data` on target
    kMaskFile,  // bind /dev/null on target (read-only); skipped when the target is missing
    kMaskDir,   // a read-only bind of source (an empty directory) on target; skipped when the target is missing
    kReadOnly,  // make the mount at target read-only (bind onto itself); skipped when missing
    kSymlink,   // create a symlink at target pointing to `source`
    kDevice,    // mknod a character device `device` at target (mode 0666)
    kSetAttr,   // apply attr_set to the mount already at target (no new mount)
  };
  enum class Create { kNone, kDir, kFile };

  Kind kind = Kind::kBind;
  std::string source;
  std::string target;          // relative to the new root, no leading '/', normalized
  std::string fstype;
  unsigned long flags = 0;     // mount(2) flags
  std::string data;            // mount(2) data
  uint64_t attr_set = 0;       // MOUNT_ATTR_* applied afterwards with mount_setattr
  bool recursive = false;      // apply attr_set to submounts too
  Create create = Create::kNone;  // create a missing mountpoint first
  bool if_exists = false;      // kBind with kNone: skipped when the target is missing
  dev_t device = 0;            // kDevice only
  std::string description;     // "mount /proc": names the step in errors
};

// An image layer: its shared host directory, bound idmapped and read-only at `target` (in the
// scratch tmpfs) before the overlay takes it as a lower layer.
struct LayerMount {
  std::string source;  // absolute host path of the unpacked layer
  std::string target;  // absolute path under the scratch dir
};

// The most layers an image may stack (overlayfs allows 500 lowers, the skeleton is one more).
inline constexpr size_t kMaxImageLayers = 128;

struct MountPlan {
  std::string scratch_dir;       // host directory the scratch tmpfs is mounted on
  std::string scratch_options;   // tmpfs data
  // The skeleton is created with these as fsuid/fsgid (so it needs no chown per entry); entries
  // whose uid/gid differ are chowned afterwards.
  uid_t skeleton_uid = 0;
  gid_t skeleton_gid = 0;
  std::vector<FileOp> skeleton;  // created in order, after the scratch mount
  // A disk-capped workspace: this block device (a loop device over the workspace's ext4 image)
  // is mounted on layer_dir, and the overlay's upper and work dirs are made inside it.
  std::string layer_device;
  std::string layer_dir;
  uid_t layer_uid = 0;           // owner of <layer>/upper: the sandbox's root
  gid_t layer_gid = 0;
  // The image's layers, bound in this order. Their ids on disk are shifted into the sandbox's
  // range by the user namespace `idmap_userns_fd`, which the launcher sets (isolation/
  // idmap_userns.h): it is not part of the plan's data, and must be valid when layers exist.
  std::vector<LayerMount> layers;
  int idmap_userns_fd = -1;
  std::string root_dir;          // <scratch>/root: the overlay's mountpoint
  // lowerdir=...,upperdir=...,workdir=...; the lower dirs are relative to scratch_dir, where
  // the child mounts the overlay from (so that 128 layers fit in a page of options).
  std::string overlay_options;
  std::vector<MountOp> mounts;   // applied in order on root_dir
};

struct MountPlanBind {
  std::string source;  // absolute host path
  std::string target;  // absolute path inside
  bool read_only = false;
  bool is_dir = true;
  bool if_exists = false;  // only over a target the root has (never made); skipped otherwise
};

// A host directory of the sandbox's own cgroup, shown read-only at /sys/fs/cgroup/<name>
// ("" : /sys/fs/cgroup itself, the v2 case; v1: one per controller, "memory", "cpu", ...).
struct MountPlanCgroupDir {
  std::string source;  // absolute host path
  std::string name;
};

struct MountPlanInput {
  std::string scratch_dir;               // e.g. /run/corral/mnt
  uint64_t scratch_bytes = 1ull << 30;   // tmpfs size: the cap on writes without a workspace
  bool host_image = true;
  // When !host_image: the image's layer directories, top first (at most kMaxImageLayers), each
  // an absolute host path with the image's own ids on disk.
  std::vector<std::string> image_layers;
  std::string workspace_upper;           // empty: ephemeral writable layer in the scratch tmpfs
  std::string workspace_work;
  std::string workspace_device;          // a disk-capped workspace's block device (instead of
                                         // workspace_upper/work)
  std::string hostname = "corral";
  std::vector<std::string> nameservers;  // /etc/resolv.conf's; none: names from /etc/hosts only
  uid_t host_uid_base = 0;               // host uid of root inside; the range is 65536 ids
  gid_t host_gid_base = 0;
  uid_t agent_uid = 1000;
  std::vector<MountPlanBind> binds;
  // The sandbox's own cgroup at /sys/fs/cgroup, read-only; empty: /sys/fs/cgroup stays
  // sysfs's empty directory. Either one directory named "" (v2), or named ones (v1), which sit
  // in a small read-only tmpfs there, as runc lays out a v1 host.
  std::vector<MountPlanCgroupDir> cgroup_dirs;
  // What /sys/devices/system/cpu/online reads inside ("0-1\n"): the CPUs the sandbox is pinned
  // to, so that sysconf(_SC_NPROCESSORS_ONLN) (glibc reads this file; Python's os.cpu_count())
  // counts them. Empty: the host's.
  std::string cpus_online;
  std::string host_root = "/";           // where host trees (/usr, /etc/...) are read from
};

StatusOr<MountPlan> BuildMountPlan(const MountPlanInput& input);

// Paths runc masks (/proc/kcore, /sys/firmware, ...) and makes read-only (/proc/sys, ...),
// relative to the root.
const std::vector<std::string>& MaskedPaths();
const std::vector<std::string>& ReadOnlyPaths();

}  // namespace corral::rootfs
