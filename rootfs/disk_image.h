// Disk caps for persistent workspaces: the writable layer lives in an ext4 image of the cap's
// size, attached to a loop device for the life of the sandbox.
//
// A sandbox without a workspace writes to its scratch tmpfs, whose size is the cap. A workspace
// on the host's file system would be unbounded, so `--disk` with `--workspace` keeps the
// workspace's layer in <workspace>/disk.img instead: sparse (it takes host space only as the
// sandbox writes), formatted once, mounted by the sandbox's child in its own mount namespace.
// The loop device is attached with LO_FLAGS_AUTOCLEAR, so it detaches by itself when the
// sandbox's mount namespace goes away, also when the launcher was killed.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/status.h"
#include "common/unique_fd.h"

namespace corral::rootfs {

// What a new image needs free on its file system: its metadata, its journal as it is used, and
// some room for its first writes.
inline constexpr uint64_t kMinFreeForImage = 64ull << 20;

// Creates `path` as a sparse file of `bytes` holding an empty ext4 file system whose root
// directory belongs to root_uid:root_gid (mkfs.ext4 from e2fsprogs); ENOSPC, saying how much is
// free, when its file system has less than kMinFreeForImage. An existing image is checked
// instead: its size must be `bytes`.
Status EnsureDiskImage(const std::string& path, uint64_t bytes, uid_t root_uid, gid_t root_gid);

// The size of an existing image (what `--disk` was when the workspace was made).
StatusOr<uint64_t> DiskImageSize(const std::string& path);

struct LoopDevice {
  std::string path;  // /dev/loopN
  UniqueFd fd;       // holds the device until the sandbox has mounted it
};

// Attaches `image` to a free loop device (LOOP_CTL_GET_FREE + LOOP_CONFIGURE, retried when
// another process takes the same device first), with autoclear.
StatusOr<LoopDevice> AttachLoopDevice(const std::string& image);

}  // namespace corral::rootfs
