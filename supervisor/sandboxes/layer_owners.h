// Moving a writable layer from one sandbox's uid range to another's.
//
// A sandbox's files belong to host uids of its own range (root inside is uid_base). A fork or a
// sandbox made from a snapshot gets a new range, so its copy of the layer must be re-owned:
// every inode whose uid or gid lies in [from_base, from_base + count) moves to the same offset
// in [to_base, to_base + count). What chown would lose comes along: setuid/setgid bits (chown
// clears them), file capabilities (chown removes security.capability; a v3 one's root id is
// shifted too) and the ids named in POSIX ACLs. Ids outside the range are left alone.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "supervisor/sandboxes/writable_layer.h"

namespace corral::supervisor {

struct ShiftCounts {
  uint64_t inodes = 0;   // entries visited
  uint64_t shifted = 0;  // entries whose owner, group, capability or ACL changed
};

// Re-owns the tree under `dir` (a directory nobody else is changing). Symlinks are not
// followed; the walk stays on dir's file system. Uses the calling thread's working directory
// (fts(3) descends with fchdir, so no path is ever too long).
StatusOr<ShiftCounts> ShiftTreeOwners(const std::string& dir, int64_t from_base, int64_t to_base,
                                      int64_t count);

// Re-owns a writable layer (writable_layer.h; not in use by a sandbox), on a thread of its own.
// An ext4 image: the thread unshares its mount namespace, mounts the image at `mount_dir` there
// (nosuid, nodev, noexec) and walks it; the mount exists only in that namespace and goes with
// it, also when the daemon dies during the walk. A project-quota directory is walked where it is.
StatusOr<ShiftCounts> ShiftLayerOwners(const WritableLayer& layer, const std::string& mount_dir,
                                       int64_t from_base, int64_t to_base, int64_t count);

}  // namespace corral::supervisor
