// corral doctor: checks that this host can run corrald (supervisor/doctor.h), before installing
// it or when something fails. Reads the state directory and cgroup settings from corrald's
// config (--config, default /etc/corral/corrald.toml when it exists); flags override them.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "supervisor/doctor.h"
#include "tools/corral/remote_options.h"

namespace corral::cli {

struct DoctorCommandOptions {
  bool help = false;
  bool json = false;
  supervisor::DoctorOptions doctor;
};

// daemon.state_dir, cgroup_mount and cgroup_parent from corrald's config at `path` ("" = the
// default /etc/corral/corrald.toml when it exists), over what `doctor` holds.
Status ReadDaemonConfig(const std::string& path, supervisor::DoctorOptions& doctor);

const char* DoctorUsage();
// In remote_options.cc, with the CLI's other parsers.
StatusOr<DoctorCommandOptions> ParseDoctorOptions(const std::vector<std::string>& args, const EnvLookup& env);
// Prints the checks; 0 when none failed, 1 when one did, 2 for a bad config.
int RunDoctorCommand(const DoctorCommandOptions& options);

}  // namespace corral::cli
