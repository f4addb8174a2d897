// Where a process sits in the cgroup hierarchy the backends use, from its /proc/PID/cgroup.
//
// /proc/PID/cgroup has one line per mounted hierarchy, "ID:CONTROLLERS:PATH":
//   v2 (unified)       0::/system.slice/corrald.service/daemon
//   v1 (one per hier.) 4:memory:/system.slice/corrald.service
//                      1:name=systemd:/system.slice/corrald.service
// A hybrid host has both kinds; which line counts follows the backend: on v2 the "0::" line, on
// v1 the memory hierarchy's line (the v1 backend keeps one relative name in every hierarchy it
// uses, and systemd realizes a unit at the same path in each one it manages, memory included).
//
// Paths come back relative to the mount root, as backend names are: "system.slice/x.service", and
// "" for the root itself. A path the reader cannot name from its mount (outside its cgroup
// namespace: "/../..") or the v2 "(deleted)" suffix is an error, never a guess.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "cgroups/cgroup_backend.h"
#include "common/status.h"

namespace corral::cgroups {

// The cgroup of the process whose /proc/PID/cgroup is `text`, in `version`'s hierarchy.
StatusOr<std::string> ParseProcCgroup(std::string_view text, CgroupVersion version);

// Reads /proc/<pid>/cgroup ("self" for pid 0) and parses it. ENOENT when the process is gone.
StatusOr<std::string> ProcessCgroup(pid_t pid, CgroupVersion version);

}  // namespace corral::cgroups
