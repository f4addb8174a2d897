#include "tools/corral/doctor_command.h"

#include <unistd.h>

#include <cstdio>
#include <toml++/toml.h>

namespace corral::cli {
namespace {

constexpr char kDefaultConfig[] = "/etc/corral/corrald.toml";

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
  return Status();
}

const char* DoctorUsage() {
  return "usage: corral doctor [--json] [--config FILE] [--state-dir DIR] [--cgroup-mount DIR]\n"
         "                     [--cgroup-parent NAME] [--claude PATH]\n"
         "\n"
         "Checks that this host can run corrald: kernel, user and network namespaces, overlayfs,\n"
         "cgroups and the daemon's subtree, seccomp, openat2, Landlock, pidfd and clone3, free space\n"
         "and inodes in the state directory, Claude Code. Each line is OK, WARN (works, degraded:\n"
         "what is lost) or FAIL (what to do). Exits 1 when a check fails; corrald runs the same\n"
         "checks when it starts and refuses to start on a FAIL. Run it as root.\n";
}

StatusOr<DoctorCommandOptions> ParseDoctorOptions(const std::vector<std::string>& args) {
  DoctorCommandOptions options;
  options.doctor.claude_version = supervisor::TestedClaudeCodeVersion();
  std::string config;
  std::vector<std::pair<std::string*, std::string>> overrides;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&]() -> StatusOr<std::string> {
      if (i + 1 >= args.size()) return Status::Error(arg + " needs a value", EINVAL);
      return args[++i];
    };
    if (arg == "--help" || arg == "-h") {
      options.help = true;
    } else if (arg == "--json") {
      options.json = true;
    } else if (arg == "--config") {
      ASSIGN_OR_RETURN(config, value());
    } else if (arg == "--state-dir" || arg == "--cgroup-mount" || arg == "--cgroup-parent" || arg == "--claude") {
      ASSIGN_OR_RETURN(std::string v, value());
      std::string* field = arg == "--state-dir"      ? &options.doctor.state_dir
                           : arg == "--cgroup-mount" ? &options.doctor.cgroup_mount
                           : arg == "--cgroup-parent" ? &options.doctor.cgroup_parent
                                                      : &options.doctor.claude;
      overrides.emplace_back(field, v);
    } else {
      return Status::Error("unknown argument " + arg, EINVAL);
    }
  }
  RETURN_IF_ERROR(ReadDaemonConfig(config, options.doctor));
  for (auto& [field, v] : overrides) *field = v;
  return options;
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
