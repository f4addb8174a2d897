// Capturing a sandbox's writable layer as an image layer: the overlayfs upper directory written
// as an OCI layer tar (what rootfs::UnpackLayer reads back), for `corral image build`'s RUN steps.
//
// The walk (fts, physical, one file system) writes, in order, each entry of `upper`:
//  - directories, regular files (hard links within the layer as tar hard links), symlinks and
//    FIFOs as they are, with their mode (& 07777) and modification time;
//  - an overlayfs whiteout (a character device 0:0) as `dir/.wh.NAME`, an empty file owned by
//    root (overlayfs makes whiteouts as its mounter, host root, whoever deleted the file);
//  - a directory marked opaque (xattr trusted.overlay.opaque or user.overlay.opaque = "y") as
//    the directory followed by `dir/.wh..wh..opq`;
//  - owners shifted from the sandbox's host range to the image's: uid - uid_base, which must lie
//    in [0, 65536) (an id outside the range is an error naming the file: nothing in a sandbox
//    can own one);
//  - sockets are skipped (a tar cannot hold them, as Docker's); other device nodes are an error
//    (a sandbox cannot make them); files overlayfs marked as redirects or metacopies (features
//    corral's overlay mounts do not enable) are an error rather than a wrong layer.
//  No extended attributes are written: file capabilities in an image grant nothing anyway.
//  `skip` names top-level entries of `upper` that are the sandbox's plumbing, not the image's
//  (the mount points corral-init makes).
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "common/status.h"
#include "supervisor/sandboxes/writable_layer.h"

namespace corral::supervisor {

struct CaptureCounts {
  uint64_t entries = 0;    // tar entries written
  uint64_t whiteouts = 0;  // .wh. entries among them (opaque markers included)
  uint64_t bytes = 0;      // regular files' content
};

// Writes the tar at `tar_path` (created 0600, must not exist) from the directory `upper`.
StatusOr<CaptureCounts> WriteLayerTar(const std::string& upper, const std::string& tar_path, int64_t uid_base,
                                      const std::set<std::string>& skip = {});

// The same from a stopped sandbox's writable layer (writable_layer.h), on a thread of its own
// (the walk changes its working directory). An ext4 image is mounted read-only (nosuid, nodev,
// noexec) at `mount_dir` in that thread's own mount namespace, and goes with it; a project-quota
// directory's upper/ is read where it is.
StatusOr<CaptureCounts> CaptureLayer(const WritableLayer& layer, const std::string& mount_dir,
                                     const std::string& tar_path, int64_t uid_base,
                                     const std::set<std::string>& skip = {});

}  // namespace corral::supervisor
