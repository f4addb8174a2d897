// Carries out a MountPlan in the sandbox's child process, between clone and exec.
//
// Runs only raw system calls on the plan's already-built strings: no allocation, no exceptions,
// no logging. The caller is the child in its new mount namespace, still holding the host's root
// credentials (so the overlay's copy-up keeps the sandbox's host uids), before it enters its user
// namespace. On return the child's root is the sandbox's root (pivot_root done, old root
// detached) and its cwd is "/".
#pragma once

#include "rootfs/mount_plan.h"

namespace corral::rootfs {

enum class MountStep : int {
  kNone = 0,
  kMakePrivate,   // mount --make-rprivate /
  kScratch,       // the scratch tmpfs
  kSkeleton,      // plan.skeleton[index]
  kLayer,         // the disk-capped workspace's file system
  kImageLayer,    // plan.layers[index]: its idmapped bind
  kOverlay,       // the overlay on root_dir
  kOpenRoot,
  kMount,         // plan.mounts[index]
  kPivotRoot,
};

struct MountFailure {
  MountStep step = MountStep::kNone;
  int index = -1;  // into skeleton or mounts, for kSkeleton and kMount
  int error = 0;   // errno
};

// Returns true on success; on failure fills `failure` and returns false. Async-signal-safe.
bool ExecuteMountPlan(const MountPlan& plan, MountFailure* failure);

}  // namespace corral::rootfs
