// Disk caps by project quota: a sandbox's writable layer as a plain directory of the state dir's
// file system, its bytes and inodes bounded by the kernel's project quota, where that file
// system enforces them (XFS mounted with `prjquota`, ext4 made with `-O quota,project` and
// mounted with `prjquota`).
//
// Against an ext4 image per sandbox (disk_image.h) this saves, per sandbox: the mkfs at create,
// a loop device, an ext4 superblock with its journal thread and shrinkers, and the unmount at
// stop; the layer's files are the host's own (a snapshot copies files, a capture reads them).
//
// The directory gets the project id and FS_XFLAG_PROJINHERIT: everything made below it (the
// overlay's upper and work dirs, and all the sandbox writes) inherits the id, and the kernel
// counts it against the project's limit. A process in a user namespace other than the host's
// cannot change a file's project id or the inherit flag (fileattr_set_prepare), so the sandbox's
// root cannot move its files out of the quota.
//
// What a writer past the cap sees: EDQUOT on ext4, ENOSPC on XFS (the project is its "device").
// ext4 may go a few KiB over a byte cap (extent blocks allocated at writeback), and lets a holder
// of CAP_SYS_RESOURCE in the host's namespace past it; XFS does neither.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/status.h"

namespace corral::rootfs {

// What the file system under a directory offers.
struct ProjectQuotaSupport {
  bool enforced = false;  // project quotas are accounted and enforced: caps can be project quotas
  std::string fs_type;    // "xfs", "ext4", ... (from statfs)
  std::string reason;     // why not, when !enforced, as what the directory is on: "ext4 without
                          // project quotas (...)" (for corral doctor and the log)
};

// Asks the file system of `dir` (quotactl_fd Q_XGETQSTATV, PRJQUOTA) whether it accounts and
// enforces project quotas. An error only when `dir` cannot be opened.
StatusOr<ProjectQuotaSupport> ProbeProjectQuota(const std::string& dir);

// The caps of one project.
struct ProjectLimits {
  uint64_t bytes = 0;   // 0: none
  uint64_t inodes = 0;  // 0: none
};

// Makes `dir` (its parent must exist; an existing directory is reused) owned by uid:gid with
// `mode`, gives it project `project_id` and the inherit flag, and sets the project's limits.
// Every file system call here is on an fd of `dir`: a symlink put in its place is refused.
Status MakeProjectDir(const std::string& dir, uint32_t project_id, const ProjectLimits& limits, uid_t uid, gid_t gid,
                      mode_t mode);

// Sets (or, with zeros, clears) the limits of project `project_id` on the file system of `dir`.
Status SetProjectLimits(const std::string& dir, uint32_t project_id, const ProjectLimits& limits);

// The project id `dir` carries (0 when it has none).
StatusOr<uint32_t> ProjectIdOf(const std::string& dir);

// The project's use so far, as the kernel counts it.
struct ProjectUsage {
  uint64_t bytes = 0;
  uint64_t inodes = 0;
  ProjectLimits limits;
};
StatusOr<ProjectUsage> ProjectUsageOf(const std::string& dir, uint32_t project_id);

}  // namespace corral::rootfs
