// A user namespace that only describes an id mapping, for idmapped mounts.
//
// An image's layers are stored once, with the image's own ids on disk (root-owned files owned by
// host uid 0), and shared by every sandbox of the image. Each sandbox sees them through an
// idmapped bind (mount_setattr MOUNT_ATTR_IDMAP): a file of on-disk uid k shows as host uid
// base + k, so the image's root is the sandbox's root inside and the sandbox's own unprivileged
// range on the host, with no per-sandbox copy or chown of the layers. The kernel takes the
// mapping from a user namespace fd: this makes one with the sandbox's mapping (inside 0..count-1
// -> host base..base+count-1, the same as the sandbox's own namespace) and no process left in it.
//
// Requires Linux 5.12 (idmapped mounts) and, for overlayfs lower layers, 5.19.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "common/status.h"
#include "common/unique_fd.h"

namespace corral::isolation {

// A new user namespace (owned by the caller's, which must be the initial one with CAP_SETUID
// and CAP_SETGID) with uid_map "0 uid_base count" and gid_map "0 gid_base count". The process
// made to hold it has exited when this returns; the fd keeps the namespace alive.
StatusOr<UniqueFd> MakeIdmapUserns(uid_t uid_base, gid_t gid_base, uint32_t count);

}  // namespace corral::isolation
