// Host uid ranges for sandboxes: each sandbox owns 65536 host uids and gids, none of them 0.
//
// Ephemeral runs take a slot from <run_dir>/slots/<n> by holding an flock on it for their
// lifetime (the kernel drops the lock when the process dies, so a killed run frees its slot).
// A workspace keeps one slot forever, recorded in <state_dir>/workspaces/<n> (holding the
// workspace's path) and in <workspace>/slot, so the files it wrote in one run belong to the same
// users in the next. Concurrent runs on one workspace are refused (flock on <workspace>/lock).
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"
#include "common/unique_fd.h"

namespace corral::cli {

inline constexpr uid_t kEphemeralUidBase = 0x40000000;  // slots 0..16383
inline constexpr uid_t kWorkspaceUidBase = 0x80000000;  // slots 0..16383
inline constexpr int kSlotCount = 16384;

class UidSlot {
 public:
  UidSlot() = default;
  UidSlot(uid_t base, UniqueFd lock) : base_(base), lock_(std::move(lock)) {}
  uid_t base() const { return base_; }

 private:
  uid_t base_ = 0;
  UniqueFd lock_;  // the flock that owns the slot (ephemeral) or the workspace
};

StatusOr<UidSlot> AcquireEphemeralSlot(const std::string& run_dir);

// Locks the workspace and returns its slot. With `make_layer_dirs`, also creates the layout of
// a directory workspace (<dir>/upper owned by the slot's root, <dir>/work); a disk-capped
// workspace keeps its layer in <dir>/disk.img instead (rootfs/disk_image.h).
StatusOr<UidSlot> AcquireWorkspaceSlot(const std::string& state_dir, const std::string& workspace,
                                       bool make_layer_dirs = true);

}  // namespace corral::cli
