// The one assembly that turns a SandboxSpec into a launch, for `corral run` and the daemon alike:
// the mount plan, the LaunchPlan, and the sandbox's cgroup (made, limited, and prepared for the
// clone). Everything the child needs is built here, before clone (launcher.h's rule).
//
//   MakeRunDirs(run_dir)                      the scratch mount point, searchable by the child
//   PrepareLaunch(spec, site, backend)        layer image on a loop device, CPUs, mounts, cgroup
//   LaunchPrepared(prepared)                  clone3 and the child's recipe (launcher.h)
//
// What the caller brings (LaunchSite) is what the host allocated for this sandbox and the
// caller's ends of fd 3: its cgroup's name, the CPU spread slot, corral-init's sealed memfd and
// the status pipe or control socket.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "cgroups/cgroup_backend.h"
#include "common/status.h"
#include "isolation/launcher.h"
#include "isolation/sandbox_spec.h"
#include "rootfs/disk_image.h"

namespace corral::isolation {

struct LaunchSite {
  std::string cgroup;   // the sandbox's cgroup (a backend name); PrepareLaunch makes it: must not exist
  std::string leaf;     // "": the sandbox stays in `cgroup`; else its init moves on into <cgroup>/<leaf>
                        // once its cgroup namespace is rooted at `cgroup` (the daemon's "init")
  std::string run_dir;  // the child mounts its scratch tmpfs on <run_dir>/scratch (MakeRunDirs)
  uint64_t cpu_slot = 0;  // spreads CPU-limited sandboxes over the host's CPUs (ChooseCpus)
  int init_fd = -1;     // corral-init, sealed (LoadSealedExecutable)
  int status_fd = -1;   // fd 3 inside: the status pipe (kCommand) or the listening control socket (kControl)
};

// A launch made ready: the plan (every byte the child reads), how the child gets into its
// cgroup, and the layer image's loop device until the sandbox's mount holds it.
struct PreparedLaunch {
  LaunchPlan plan;
  cgroups::ClonePlacement placement;
  rootfs::LoopDevice layer;
  UniqueFd idmap_userns;  // the mapping of the image layers' binds (none for the host image)
};

// A sandbox's cgroup limits: memory, pids, and the CPU quota of its millicores.
cgroups::CgroupLimits CgroupLimitsOf(const ResourceLimits& limits);

// Makes <run_dir> and <run_dir>/scratch, mode 0755: the child builds the sandbox's skeleton as
// the sandbox's own (unprivileged) host uid in a tmpfs mounted on <run_dir>/scratch.
Status MakeRunDirs(const std::string& run_dir);

// The spec's launch at `site`: attaches the layer image (spec.layer_image(), which must exist) to
// a loop device, chooses the CPUs a CPU limit pins the sandbox to, plans the mounts (with the
// cgroup's view and the chosen CPUs, what programs inside read to learn their limits), creates
// site.cgroup with the spec's memory, CPU and pids limits and prepares the child's placement
// there, and fills the LaunchPlan for the spec's init mode. Needs spec.host_uid_base(). On
// error the cgroup, if made, is destroyed again.
StatusOr<PreparedLaunch> PrepareLaunch(const SandboxSpec& spec, const LaunchSite& site,
                                       cgroups::CgroupBackend& backend);

// Launches it (launcher.h's Launch: the child placed in its cgroup, then its leaf, as the
// placement says) and lets go of the layer's loop device (autoclear: it goes with the sandbox's
// mount).
StatusOr<LaunchedSandbox> LaunchPrepared(PreparedLaunch& prepared);

}  // namespace corral::isolation
