#include "rootfs/project_quota.h"

#include <fcntl.h>
#include <linux/dqblk_xfs.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <linux/quota.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/unique_fd.h"

#ifndef SYS_quotactl_fd
#define SYS_quotactl_fd 443
#endif

namespace corral::rootfs {
namespace {

constexpr long kXfsMagic = 0x58465342;  // XFS_SUPER_MAGIC ("XFSB")

int QuotactlFd(int fd, unsigned cmd, uint32_t id, void* addr) {
  return static_cast<int>(syscall(SYS_quotactl_fd, fd, QCMD(cmd, PRJQUOTA), id, addr));
}

std::string FsTypeName(long magic) {
  switch (magic) {
    case kXfsMagic: return "xfs";
    case EXT4_SUPER_MAGIC: return "ext4";
    case BTRFS_SUPER_MAGIC: return "btrfs";
    case TMPFS_MAGIC: return "tmpfs";
    case OVERLAYFS_SUPER_MAGIC: return "overlay";
    default: return "magic 0x" + [&] {
      char hex[17];
      snprintf(hex, sizeof(hex), "%lx", static_cast<unsigned long>(magic));
      return std::string(hex);
    }();
  }
}

StatusOr<UniqueFd> OpenDir(const std::string& dir) {
  UniqueFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + dir);
  return fd;
}

Status SetLimitsOn(int fd, const std::string& dir, uint32_t project_id, const ProjectLimits& limits) {
  struct if_dqblk quota = {};
  // Block limits are in 1 KiB units (QIF_DQBLKSIZE), rounded up so a cap is never below its bytes.
  quota.dqb_bhardlimit = (limits.bytes + QIF_DQBLKSIZE - 1) / QIF_DQBLKSIZE;
  quota.dqb_bsoftlimit = quota.dqb_bhardlimit;
  quota.dqb_ihardlimit = limits.inodes;
  quota.dqb_isoftlimit = limits.inodes;
  quota.dqb_valid = QIF_LIMITS;
  if (QuotactlFd(fd, Q_SETQUOTA, project_id, &quota) != 0) {
    return ErrnoError("set the project quota " + std::to_string(project_id) + " of " + dir);
  }
  return Status();
}

}  // namespace

StatusOr<ProjectQuotaSupport> ProbeProjectQuota(const std::string& dir) {
  ASSIGN_OR_RETURN(UniqueFd fd, OpenDir(dir));
  ProjectQuotaSupport support;
  struct statfs fs;
  if (fstatfs(fd.get(), &fs) != 0) return ErrnoError("statfs " + dir);
  support.fs_type = FsTypeName(static_cast<long>(fs.f_type));
  struct fs_quota_statv state = {};
  state.qs_version = FS_QSTATV_VERSION1;
  const std::string without = support.fs_type +
                              " without project quotas (XFS: mount with prjquota; ext4: mkfs -O quota,project, "
                              "mount with prjquota)";
  if (QuotactlFd(fd.get(), Q_XGETQSTATV, 0, &state) != 0) {
    const int error = errno;
    // ENOSYS is also what a file system without quota support answers: a call on no fd tells a
    // missing system call apart (EBADF: it is there).
    if (error == ENOSYS && QuotactlFd(-1, Q_XGETQSTATV, 0, nullptr) != 0 && errno == ENOSYS) {
      support.reason = "a kernel without quotactl_fd (Linux 5.14 or later has it)";
    } else if (error == ENOSYS || error == ESRCH || error == ENOENT || error == EOPNOTSUPP || error == ENOTTY ||
               error == EINVAL) {
      // XFS and ext4 can have them, with a mount option (and ext4 a feature at mkfs).
      const bool could = support.fs_type == "xfs" || support.fs_type == "ext4";
      support.reason = could ? without : support.fs_type + ", which has no project quotas";
    } else {
      support.reason = support.fs_type + " (quotactl: " + strerror(error) + ")";
    }
    return support;
  }
  const bool accounted = (state.qs_flags & FS_QUOTA_PDQ_ACCT) != 0;
  const bool enforced = (state.qs_flags & FS_QUOTA_PDQ_ENFD) != 0;
  if (!accounted) {
    support.reason = without;
  } else if (!enforced) {
    support.reason = support.fs_type + ", which accounts project quotas but does not enforce them (mount with prjquota, not pqnoenforce)";
  } else {
    support.enforced = true;
  }
  return support;
}

Status MakeProjectDir(const std::string& dir, uint32_t project_id, const ProjectLimits& limits, uid_t uid, gid_t gid,
                      mode_t mode) {
  if (project_id == 0) return Status::Error("project id 0 is the file system's default, not a sandbox's", EINVAL);
  if (mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) return ErrnoError("mkdir " + dir);
  ASSIGN_OR_RETURN(UniqueFd fd, OpenDir(dir));
  if (fchown(fd.get(), uid, gid) != 0) return ErrnoError("chown " + dir);
  if (fchmod(fd.get(), mode) != 0) return ErrnoError("chmod " + dir);
  struct fsxattr attr = {};
  if (ioctl(fd.get(), FS_IOC_FSGETXATTR, &attr) != 0) return ErrnoError("FS_IOC_FSGETXATTR " + dir);
  attr.fsx_projid = project_id;
  attr.fsx_xflags |= FS_XFLAG_PROJINHERIT;
  if (ioctl(fd.get(), FS_IOC_FSSETXATTR, &attr) != 0) return ErrnoError("set the project id of " + dir);
  return SetLimitsOn(fd.get(), dir, project_id, limits);
}

Status SetProjectLimits(const std::string& dir, uint32_t project_id, const ProjectLimits& limits) {
  ASSIGN_OR_RETURN(UniqueFd fd, OpenDir(dir));
  return SetLimitsOn(fd.get(), dir, project_id, limits);
}

StatusOr<uint32_t> ProjectIdOf(const std::string& dir) {
  ASSIGN_OR_RETURN(UniqueFd fd, OpenDir(dir));
  struct fsxattr attr = {};
  if (ioctl(fd.get(), FS_IOC_FSGETXATTR, &attr) != 0) return ErrnoError("FS_IOC_FSGETXATTR " + dir);
  return attr.fsx_projid;
}

StatusOr<ProjectUsage> ProjectUsageOf(const std::string& dir, uint32_t project_id) {
  ASSIGN_OR_RETURN(UniqueFd fd, OpenDir(dir));
  struct if_dqblk quota = {};
  ProjectUsage usage;
  if (QuotactlFd(fd.get(), Q_GETQUOTA, project_id, &quota) != 0) {
    // A project nothing was ever charged to has no record yet (XFS): it uses nothing. ESRCH (no
    // quotas on this file system) stays an error.
    if (errno == ENOENT) return usage;
    return ErrnoError("read the project quota " + std::to_string(project_id) + " of " + dir);
  }
  usage.bytes = quota.dqb_curspace;
  usage.inodes = quota.dqb_curinodes;
  usage.limits.bytes = quota.dqb_bhardlimit * QIF_DQBLKSIZE;
  usage.limits.inodes = quota.dqb_ihardlimit;
  return usage;
}

}  // namespace corral::rootfs
