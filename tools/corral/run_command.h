// `corral run`: one sandbox, from spec to outcome, with nothing left behind.
#pragma once

#include <string>
#include <vector>

#include "tools/corral/run_options.h"

namespace corral::cli {

// Where a run keeps its host-side state. Defaults, each overridable by an environment variable:
//   run_dir       /run/corral        CORRAL_RUN_DIR     (records, uid slots, scratch mountpoint)
//   state_dir     /var/lib/corral    CORRAL_STATE_DIR   (workspace uid registry)
//   cgroup_mount  /sys/fs/cgroup     CORRAL_CGROUP_MOUNT
//   cgroup_parent corral             CORRAL_CGROUP_PARENT (absolute under the mount, never
//                                    relative to the caller's own cgroup)
//   init_path     corral-init next to the corral binary, else /usr/libexec/corral/corral-init
//                                    CORRAL_INIT
struct RunEnvironment {
  std::string run_dir;
  std::string state_dir;
  std::string cgroup_mount;
  std::string cgroup_parent;
  std::string init_path;
};

RunEnvironment DefaultRunEnvironment();

// Runs the sandbox, streams its stdio, writes the outcome, and returns the exit code.
int RunSandbox(const RunOptions& options, const RunEnvironment& env);

// `corral gc`: returns the exit code.
int RunGc(const RunEnvironment& env);

// `corral run ARGS...` as a whole: --help, the options (a bad one: its error and 125), the run.
int RunMain(const std::vector<std::string>& args);

}  // namespace corral::cli
