// A persistent sandbox's writable layer on the host, in one of two kinds:
//
//   kImage      <dir>/disk.img: a sparse ext4 image of the disk cap (rootfs/disk_image.h), on a
//               loop device while the sandbox runs. Works on any file system.
//   kQuotaDir   <dir>/layer/{upper,work}: plain directories of the state dir's file system, the
//               cap a project quota (rootfs/project_quota.h). No mkfs, no loop device, no ext4
//               superblock per sandbox; needs XFS or ext4 with project quotas enforced.
//
// A new sandbox's layer gets the host's kind (corrald picks it at start: [sandbox] disk_quota);
// an existing one keeps the kind it was made with, and so does a copy (a snapshot, a fork): the
// kind is what is on disk, never a column of the store.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/status.h"
#include "supervisor/sandboxes/layer_kind.h"

namespace corral::supervisor {

struct WritableLayer {
  LayerKind kind = LayerKind::kImage;
  std::string path;  // the image file, or the directory holding upper/ and work/
};

// The project id of the sandbox whose root is host uid `uid_base` (a multiple of 65536): its
// range's number, unique among sandboxes as their ranges are (49152 and up for corrald's).
uint32_t LayerProjectId(int64_t uid_base);

// Makes `layer` if it does not exist yet, its root owned by uid_base (root inside), of
// `disk_bytes` (0: uncapped). A kQuotaDir's caps (re)applied also when it exists: one inode per
// 16 KiB of cap, as mkfs.ext4 gives an image.
Status MakeLayer(const WritableLayer& layer, int64_t uid_base, uint64_t disk_bytes);

// What a kQuotaDir's cap is raised by while its overlay mounts (SandboxHost::Start): room for the
// work directory the overlay makes anew, when the sandbox had filled its cap.
inline constexpr uint64_t kMountSlack = 16ull << 20;

// Changes a kQuotaDir's cap (an image's size is fixed: nothing to do).
Status ResizeLayer(const WritableLayer& layer, int64_t uid_base, uint64_t disk_bytes);

// Copies `from` (not being written: stopped or frozen) to `to`, of the same kind:
//   kImage: reflink where the file system has it, else a sparse copy; `to` is replaced.
//   kQuotaDir: `to` must exist (MakeLayer: the copy is charged to its project) or is made as a
//     plain directory (a snapshot's); upper/ is copied with cp -a (reflinks where the file
//     system has them), so owners, modes, xattrs and the overlay's whiteouts come along.
// A copy that fails leaves no partial `to` behind for a plain destination.
Status CopyLayer(const WritableLayer& from, const WritableLayer& to);

// Removes a layer of either kind (a missing one is no error).
Status RemoveLayer(const WritableLayer& layer);

// The host disk the layer takes: the image's allocated blocks, or the sum of the tree's.
StatusOr<uint64_t> LayerDiskBytes(const WritableLayer& layer);

}  // namespace corral::supervisor
