#include "tools/corral/doctor_command.h"

#include <unistd.h>

#include <cstdio>
#include <toml++/toml.h>

namespace corral::cli {
namespace {

constexpr char kDefaultConfig[] = CORRAL_CONFIG_FILE;

}  // namespace

Status ReadDaemonConfig(const std::string& given, supervisor::DoctorOptions& doctor) {
  const std::string path = !given.empty() ? given : access(kDefaultConfig, R_OK) == 0 ? kDefaultConfig : "";
  if (path.empty()) return Status();
  toml::table table;
  try {
    table = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return Status::Error(path + ": " + std::string(e.description()), EINVAL);
  }
  for (auto [key, field] : {std::pair{"state_dir", &doctor.state_dir}, std::pair{"cgroup_mount", &doctor.cgroup_mount},
                            std::pair{"cgroup_parent", &doctor.cgroup_parent}}) {
    if (auto value = table["daemon"][key].value<std::string>()) *field = *value;
  }
  if (auto value = table["sandbox"]["max_sandboxes"].value<int64_t>(); value && *value > 0) {
    doctor.max_sandboxes = static_cast<uint64_t>(*value);
  }
  if (auto value = table["sandbox"]["disk_quota"].value<std::string>()) {
    if (*value == "project") doctor.disk_quota = supervisor::DiskQuotaMode::kProject;
    else if (*value == "image") doctor.disk_quota = supervisor::DiskQuotaMode::kImage;
    else if (*value != "auto") {
      return Status::Error(path + ": sandbox.disk_quota: expected \"auto\", \"project\" or \"image\"", EINVAL);
    }
  }
  return Status();
}

const char* DoctorUsage() {
  return "usage: corral doctor [--json] [--config FILE] [--state-dir DIR] [--cgroup-mount DIR]\n"
         "                     [--cgroup-parent NAME] [--claude PATH]\n"
         "\n"
         "Checks that this host can run corrald: kernel, user and network namespaces, overlayfs,\n"
         "cgroups and the daemon's subtree, seccomp, openat2, Landlock, pidfd and clone3, free space\n"
         "and inodes in the state directory, room for sandbox.max_sandboxes (open files, namespace\n"
         "sysctls, how disk caps are made and the loop devices), Claude Code. Each line is OK, WARN\n"
         "(works, degraded: what is lost) or FAIL (what to do). Exits 1 when a check fails; corrald\n"
         "runs the same checks when it starts and refuses to start on a FAIL. Run it as root.\n";
}

int RunDoctorCommand(const DoctorCommandOptions& options) {
  if (geteuid() != 0) fprintf(stderr, "corral doctor: not root: the namespace and cgroup checks will fail as they would for corrald\n");
  auto results = supervisor::RunDoctor(options.doctor);
  if (options.json) {
    printf("%s\n", supervisor::DoctorJson(results).c_str());
  } else {
    fputs(supervisor::FormatDoctor(results).c_str(), stdout);
  }
  return supervisor::AnyFailed(results) ? 1 : 0;
}

}  // namespace corral::cli
