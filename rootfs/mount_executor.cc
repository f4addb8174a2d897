#include "rootfs/mount_executor.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <sys/fsuid.h>
#include <sys/mount.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace corral::rootfs {
namespace {

// Every lookup below the new root: no symlink may take part, and ".." cannot leave the root.
constexpr uint64_t kResolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;

int OpenInRoot(int root_fd, const char* path, uint64_t flags) {
  struct open_how how = {};
  // No O_NOFOLLOW: with it a trailing symlink would be opened as itself; without it,
  // RESOLVE_NO_SYMLINKS refuses the symlink with ELOOP.
  how.flags = flags | O_CLOEXEC;
  how.resolve = kResolve;
  return static_cast<int>(syscall(SYS_openat2, root_fd, path, &how, sizeof(how)));
}

// "/proc/self/fd/<fd>" into buf (at least 32 bytes), without printf.
void FdPath(int fd, char* buf) {
  static constexpr char kPrefix[] = "/proc/self/fd/";
  char* p = buf;
  for (const char* s = kPrefix; *s != '\0'; ++s) *p++ = *s;
  char digits[12];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + fd % 10);
    fd /= 10;
  } while (fd > 0 && n < 11);
  while (n > 0) *p++ = digits[--n];
  *p = '\0';
}

// Splits `path` at its last '/': copies the parent into `parent` (size PATH_MAX) and returns the
// last component (a pointer into `path`). A path without '/' has parent ".".
const char* SplitParent(const char* path, char* parent) {
  const char* last = nullptr;
  for (const char* p = path; *p != '\0'; ++p) {
    if (*p == '/') last = p;
  }
  if (last == nullptr) {
    parent[0] = '.';
    parent[1] = '\0';
    return path;
  }
  size_t len = static_cast<size_t>(last - path);
  if (len >= PATH_MAX) len = PATH_MAX - 1;
  for (size_t i = 0; i < len; ++i) parent[i] = path[i];
  parent[len] = '\0';
  return last + 1;
}

// Creates the mountpoint of `op` if it is missing, with any missing parent directories
// (mkdir -p, one component at a time, each resolved again below the root). Fails closed on a
// symlink anywhere.
int CreateMountpoint(int root_fd, const MountOp& op) {
  const char* path = op.target.c_str();
  int dir_fd = OpenInRoot(root_fd, ".", O_PATH | O_DIRECTORY);
  if (dir_fd < 0) return errno;
  char name[NAME_MAX + 1];
  const char* p = path;
  while (*p != '\0') {
    size_t len = 0;
    while (p[len] != '\0' && p[len] != '/') ++len;
    if (len == 0 || len > NAME_MAX) {
      close(dir_fd);
      return EINVAL;
    }
    for (size_t i = 0; i < len; ++i) name[i] = p[i];
    name[len] = '\0';
    const bool last = p[len] == '\0';
    int rc = 0;
    if (!last || op.create == MountOp::Create::kDir) {
      if (mkdirat(dir_fd, name, 0755) != 0 && errno != EEXIST) rc = errno;
    } else {
      int fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
      if (fd < 0) rc = errno;  // ELOOP for a planted symlink
      else close(fd);
    }
    if (rc == 0 && !last) {
      // Re-resolve from the root: the component just made (or found) must be a real directory.
      char prefix[PATH_MAX];
      size_t end = static_cast<size_t>(p - path) + len;
      if (end >= sizeof(prefix)) rc = ENAMETOOLONG;
      for (size_t i = 0; rc == 0 && i < end; ++i) prefix[i] = path[i];
      if (rc == 0) {
        prefix[end] = '\0';
        int next = OpenInRoot(root_fd, prefix, O_PATH | O_DIRECTORY);
        if (next < 0) {
          rc = errno;
        } else {
          close(dir_fd);
          dir_fd = next;
        }
      }
    }
    if (rc != 0) {
      close(dir_fd);
      return rc;
    }
    p += len;
    while (*p == '/') ++p;
  }
  close(dir_fd);
  return 0;
}

int SetAttr(int root_fd, const MountOp& op, uint64_t attr_set) {
  int fd = OpenInRoot(root_fd, op.target.c_str(), O_PATH);
  if (fd < 0) return errno;
  struct mount_attr attr = {};
  attr.attr_set = attr_set;
  unsigned flags = AT_EMPTY_PATH | (op.recursive ? AT_RECURSIVE : 0);
  int rc = syscall(SYS_mount_setattr, fd, "", flags, &attr, sizeof(attr)) == 0 ? 0 : errno;
  close(fd);
  return rc;
}

int ApplyMount(int root_fd, const MountOp& op) {
  const bool optional = op.kind == MountOp::Kind::kMaskFile || op.kind == MountOp::Kind::kMaskDir ||
                        op.kind == MountOp::Kind::kReadOnly || op.if_exists;
  if (op.kind == MountOp::Kind::kSymlink || op.kind == MountOp::Kind::kDevice) {
    char parent[PATH_MAX];
    const char* name = SplitParent(op.target.c_str(), parent);
    int dir_fd = OpenInRoot(root_fd, parent, O_PATH | O_DIRECTORY);
    if (dir_fd < 0) return errno;
    int rc = op.kind == MountOp::Kind::kSymlink
                 ? symlinkat(op.source.c_str(), dir_fd, name)
                 : mknodat(dir_fd, name, S_IFCHR | 0666, op.device);
    rc = rc == 0 ? 0 : errno;
    close(dir_fd);
    return rc;
  }
  if (op.create != MountOp::Create::kNone) {
    int rc = CreateMountpoint(root_fd, op);
    if (rc != 0) return rc;
  }
  int target_fd = OpenInRoot(root_fd, op.target.c_str(), O_PATH);
  if (target_fd < 0) return (optional && errno == ENOENT) ? 0 : errno;
  char target[32];
  FdPath(target_fd, target);
  int rc = 0;
  switch (op.kind) {
    case MountOp::Kind::kBind:
      if (mount(op.source.c_str(), target, nullptr, op.flags, nullptr) != 0) rc = errno;
      break;
    case MountOp::Kind::kFs:
      if (mount(op.source.c_str(), target, op.fstype.c_str(), op.flags,
                op.data.empty() ? nullptr : op.data.c_str()) != 0) {
        rc = errno;
      }
      break;
    case MountOp::Kind::kMaskFile:
      if (mount("/dev/null", target, nullptr, MS_BIND, nullptr) != 0) rc = errno;
      break;
    case MountOp::Kind::kMaskDir:
      // The plan's empty directory (a bind: no superblock of its own), made read-only below.
      if (mount(op.source.c_str(), target, nullptr, MS_BIND, nullptr) != 0) rc = errno;
      break;
    case MountOp::Kind::kReadOnly:
      if (mount(target, target, nullptr, MS_BIND | MS_REC, nullptr) != 0) rc = errno;
      break;
    case MountOp::Kind::kSymlink:
    case MountOp::Kind::kDevice:
    case MountOp::Kind::kSetAttr:
      break;
  }
  close(target_fd);
  if (rc != 0) return rc;
  uint64_t attr_set = op.attr_set;
  if (op.kind == MountOp::Kind::kMaskFile || op.kind == MountOp::Kind::kReadOnly) {
    // Not nodev: a mask is the /dev/null device, which must still open (and read empty).
    attr_set |= MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC;
  } else if (op.kind == MountOp::Kind::kMaskDir) {
    attr_set |= MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
  }
  return attr_set != 0 ? SetAttr(root_fd, op, attr_set) : 0;
}

// dir + "/" + name into out (PATH_MAX); false if it does not fit.
bool JoinPath(const char* dir, const char* name, char* out) {
  size_t n = 0;
  for (const char* p = dir; *p != '\0'; ++p) {
    if (n + 1 >= PATH_MAX) return false;
    out[n++] = *p;
  }
  if (n + 1 >= PATH_MAX) return false;
  out[n++] = '/';
  for (const char* p = name; *p != '\0'; ++p) {
    if (n + 1 >= PATH_MAX) return false;
    out[n++] = *p;
  }
  out[n] = '\0';
  return true;
}

bool Fail(MountFailure* failure, MountStep step, int index, int error) {
  failure->step = step;
  failure->index = index;
  failure->error = error;
  return false;
}

// Makes one skeleton entry; 0 or the errno. Runs with the sandbox root's fsuid.
int ApplyFileOp(const FileOp& op) {
  const char* path = op.path.c_str();
  switch (op.kind) {
    case FileOp::Kind::kDir:
      return mkdir(path, op.mode) != 0 && errno != EEXIST ? errno : 0;
    case FileOp::Kind::kFile: {
      int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, op.mode);
      if (fd < 0) return errno;
      int error = 0;
      const char* data = op.content.data();
      size_t left = op.content.size();
      while (left > 0 && error == 0) {
        ssize_t n = write(fd, data, left);
        if (n < 0 && errno != EINTR) error = errno;
        if (n > 0) {
          data += n;
          left -= static_cast<size_t>(n);
        }
      }
      close(fd);
      return error;
    }
    case FileOp::Kind::kSymlink:
      return symlink(op.content.c_str(), path) != 0 ? errno : 0;
    case FileOp::Kind::kCopy: {
      // Still the host root's view of the host (before pivot_root); O_NOFOLLOW: the plan
      // chose a regular file, a symlink swapped in since is refused.
      int src = open(op.content.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      if (src < 0) return errno;
      int error = 0;
      int dst = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, op.mode);
      if (dst < 0) {
        error = errno;
      } else {
        ssize_t n;
        while ((n = sendfile(dst, src, nullptr, 1 << 20)) > 0) {
        }
        if (n < 0) error = errno;
        close(dst);
      }
      close(src);
      return error;
    }
  }
  return EINVAL;
}

// The writable layer's ext4 image on its directory, with upper (owned by the sandbox's root)
// and work inside. noinit_itable: the kernel does not zero the inode tables in the background
// (the image is a sparse file: they read as zeros already, and writing them would cost host disk
// and I/O for every idle sandbox).
bool MountLayer(const MountPlan& plan, MountFailure* failure) {
  char upper[PATH_MAX], work[PATH_MAX];
  if (!JoinPath(plan.layer_dir.c_str(), "upper", upper) || !JoinPath(plan.layer_dir.c_str(), "work", work)) {
    return Fail(failure, MountStep::kLayer, -1, ENAMETOOLONG);
  }
  if (mount(plan.layer_device.c_str(), plan.layer_dir.c_str(), "ext4", MS_NOSUID | MS_NODEV, "noinit_itable") != 0 ||
      (mkdir(upper, 0755) != 0 && errno != EEXIST) || lchown(upper, plan.layer_uid, plan.layer_gid) != 0 ||
      (mkdir(work, 0700) != 0 && errno != EEXIST)) {
    return Fail(failure, MountStep::kLayer, -1, errno);
  }
  return true;
}

// Each image layer's shared directory as a detached bind (open_tree), made read-only, nosuid,
// nodev and idmapped into the sandbox's range, then attached at its place in the scratch.
bool MountImageLayers(const MountPlan& plan, MountFailure* failure) {
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const LayerMount& layer = plan.layers[i];
    int tree = static_cast<int>(syscall(SYS_open_tree, AT_FDCWD, layer.source.c_str(),
                                        OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW));
    if (tree < 0) return Fail(failure, MountStep::kImageLayer, static_cast<int>(i), errno);
    struct mount_attr attr = {};
    attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    attr.userns_fd = static_cast<uint64_t>(plan.idmap_userns_fd);
    int rc = 0;
    if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) != 0 ||
        syscall(SYS_move_mount, tree, "", AT_FDCWD, layer.target.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0) {
      rc = errno;
    }
    close(tree);
    if (rc != 0) return Fail(failure, MountStep::kImageLayer, static_cast<int>(i), rc);
  }
  return true;
}

}  // namespace

bool ExecuteMountPlan(const MountPlan& plan, MountFailure* failure) {
  // Nothing below may propagate back to the host's mount namespace.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return Fail(failure, MountStep::kMakePrivate, -1, errno);
  }
  if (mount("corral", plan.scratch_dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
            plan.scratch_options.c_str()) != 0) {
    return Fail(failure, MountStep::kScratch, -1, errno);
  }
  // The scratch tmpfs is fresh and ours: plain paths are safe in it. Everything is created with
  // the sandbox's root as fsuid (and umask 0), so only the exceptions need a chown afterwards.
  const mode_t old_umask = umask(0);
  // setfsuid/setfsgid return the previous value, never an error: a call with -1 reads the
  // current one back, which is how a refused change shows.
  setfsgid(plan.skeleton_gid);
  setfsuid(plan.skeleton_uid);
  if (static_cast<uid_t>(setfsuid(static_cast<uid_t>(-1))) != plan.skeleton_uid ||
      static_cast<gid_t>(setfsgid(static_cast<gid_t>(-1))) != plan.skeleton_gid) {
    return Fail(failure, MountStep::kSkeleton, -1, EPERM);
  }
  int skeleton_error = 0, failed_index = -1;
  for (size_t i = 0; i < plan.skeleton.size() && skeleton_error == 0; ++i) {
    failed_index = static_cast<int>(i);
    skeleton_error = ApplyFileOp(plan.skeleton[i]);
  }
  // Back to the host root's fsuid: it brings back the file capabilities chown needs.
  (void)setfsuid(0);
  (void)setfsgid(0);
  if (skeleton_error != 0) return Fail(failure, MountStep::kSkeleton, failed_index, skeleton_error);
  for (size_t i = 0; i < plan.skeleton.size(); ++i) {
    const FileOp& op = plan.skeleton[i];
    if (op.uid == plan.skeleton_uid && op.gid == plan.skeleton_gid) continue;
    if (lchown(op.path.c_str(), op.uid, op.gid) != 0) {
      return Fail(failure, MountStep::kSkeleton, static_cast<int>(i), errno);
    }
  }
  if (!plan.layer_device.empty() && !MountLayer(plan, failure)) return false;
  if (!MountImageLayers(plan, failure)) return false;
  // The overlay's lower dirs are relative to the scratch dir.
  if (chdir(plan.scratch_dir.c_str()) != 0 ||
      mount("overlay", plan.root_dir.c_str(), "overlay", MS_NOSUID | MS_NODEV, plan.overlay_options.c_str()) != 0) {
    return Fail(failure, MountStep::kOverlay, -1, errno);
  }
  int root_fd = open(plan.root_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) return Fail(failure, MountStep::kOpenRoot, -1, errno);
  for (size_t i = 0; i < plan.mounts.size(); ++i) {
    int rc = ApplyMount(root_fd, plan.mounts[i]);
    if (rc != 0) {
      close(root_fd);
      umask(old_umask);
      return Fail(failure, MountStep::kMount, static_cast<int>(i), rc);
    }
  }
  close(root_fd);
  umask(old_umask);
  // pivot_root(".", "."): the old root ends up on top of the new one and is detached at once.
  if (chdir(plan.root_dir.c_str()) != 0 || syscall(SYS_pivot_root, ".", ".") != 0 ||
      umount2(".", MNT_DETACH) != 0 || chdir("/") != 0) {
    return Fail(failure, MountStep::kPivotRoot, -1, errno);
  }
  return true;
}

}  // namespace corral::rootfs
