// `corral doctor`'s density checks: can this host hold sandbox.max_sandboxes running at once?
// Each is about a limit that a host reaches only with many sandboxes, and that then fails every
// create alike: corrald's descriptors, the kernel's namespace counts and pids, and the disk that
// writable layers take.
#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "supervisor/doctor.h"

namespace corral::supervisor {
namespace {

// A sysctl's value under <proc_root>/sys, or -1 when it cannot be read.
int64_t SysctlNumber(const DoctorOptions& options, const std::string& name) {
  auto text = ReadFileToString(options.proc_root + "/sys/" + name);
  if (!text.ok()) return -1;
  try {
    return std::stoll(*text);
  } catch (const std::exception&) {
    return -1;
  }
}

std::string Count(uint64_t n) { return std::to_string(n); }

}  // namespace

bool HasCapSysResource() {
  auto status = ReadFileToString("/proc/self/status");
  if (!status.ok()) return false;
  const size_t at = status->find("\nCapEff:");
  if (at == std::string::npos) return false;
  const uint64_t effective = std::strtoull(status->c_str() + at + 8, nullptr, 16);
  return (effective >> 24) & 1;  // CAP_SYS_RESOURCE
}

CheckResult CheckOpenFiles(const DoctorOptions& options) {
  // corrald raises its own limits at start (to kDaemonOpenFiles, or fs.nr_open when that is
  // lower); its unit's LimitNOFILE and this shell's limits do not bound it. Unless it may not
  // raise a hard limit (no CAP_SYS_RESOURCE, as in some containers): then the hard limit it is
  // given is what it has, and this process's is taken for it.
  uint64_t most = kDaemonOpenFiles;
  const int64_t nr_open = SysctlNumber(options, "fs/nr_open");
  if (nr_open > 0) most = std::min<uint64_t>(most, static_cast<uint64_t>(nr_open));
  std::string figures = "corrald raises its limit to " + Count(most) + " (fs.nr_open " +
                        (nr_open > 0 ? Count(static_cast<uint64_t>(nr_open)) : std::string("unknown")) + ")";
  struct rlimit files {};
  if (!options.may_raise_limits && getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_max < most) {
    most = files.rlim_max;
    figures = "hard limit " + Count(most) + " (without CAP_SYS_RESOURCE corrald cannot raise it)";
  }
  figures += ", about " + Count(kDescriptorsPerSandbox) + " per running sandbox";
  const uint64_t needed = options.max_sandboxes * kDescriptorsPerSandbox + 1024;
  if (most < needed) {
    return {"open_files", CheckLevel::kWarn,
            figures + ": room for about " + Count(most > 1024 ? (most - 1024) / kDescriptorsPerSandbox : 0) +
                " sandboxes, fewer than sandbox.max_sandboxes (" + Count(options.max_sandboxes) +
                "): creates past that fail with EMFILE; raise fs.nr_open (sysctl), or the hard limit"};
  }
  return {"open_files", CheckLevel::kOk, figures};
}

CheckResult CheckNamespaceLimits(const DoctorOptions& options) {
  struct Limit {
    const char* sysctl;
    uint64_t per_sandbox;
  };
  const Limit limits[] = {{"user/max_user_namespaces", kUserNamespacesPerSandbox},
                          {"user/max_mnt_namespaces", 1},
                          {"user/max_net_namespaces", 1},
                          {"user/max_pid_namespaces", 1},
                          {"user/max_ipc_namespaces", 1},
                          {"user/max_uts_namespaces", 1},
                          {"user/max_cgroup_namespaces", 1},
                          {"kernel/pid_max", 4}};
  std::string short_of;
  uint64_t room = UINT64_MAX;
  for (const Limit& limit : limits) {
    const int64_t value = SysctlNumber(options, limit.sysctl);
    if (value < 0) continue;  // an older kernel without it
    const uint64_t fits = static_cast<uint64_t>(value) / limit.per_sandbox;
    room = std::min(room, fits);
    if (fits < options.max_sandboxes) {
      std::string name = limit.sysctl;
      for (char& c : name) c = c == '/' ? '.' : c;
      short_of += (short_of.empty() ? "" : ", ") + name + " = " + Count(static_cast<uint64_t>(value));
    }
  }
  if (!short_of.empty()) {
    return {"namespace_limits", CheckLevel::kWarn,
            short_of + ": room for about " + Count(room) + " sandboxes, fewer than sandbox.max_sandboxes (" +
                Count(options.max_sandboxes) + "); raise them with sysctl (and in /etc/sysctl.d)"};
  }
  return {"namespace_limits", CheckLevel::kOk,
          room == UINT64_MAX ? std::string("no limits to read") : "room for " + Count(room) + " sandboxes"};
}

CheckResult CheckCgroupJoin(const DoctorOptions& options) {
  // The line of /proc/self/mountinfo for the cgroup mount: "... <mount point> <opts> ... - <fstype>
  // <source> <super options>".
  auto mountinfo = ReadFileToString(options.proc_root + "/self/mountinfo");
  std::string fstype, super_options;
  if (mountinfo.ok()) {
    size_t start = 0;
    while (start < mountinfo->size()) {
      size_t end = mountinfo->find('\n', start);
      if (end == std::string::npos) end = mountinfo->size();
      const std::string line = mountinfo->substr(start, end - start);
      start = end + 1;
      std::vector<std::string> fields;
      size_t at = 0;
      while (at < line.size()) {
        size_t space = line.find(' ', at);
        if (space == std::string::npos) space = line.size();
        fields.push_back(line.substr(at, space - at));
        at = space + 1;
      }
      const auto dash = std::find(fields.begin(), fields.end(), "-");
      if (fields.size() < 5 || fields[4] != options.cgroup_mount || dash == fields.end() || fields.end() - dash < 4) {
        continue;
      }
      fstype = dash[1];
      super_options = "," + dash[3] + ",";
    }
  }
  if (fstype.empty()) {
    return {"cgroup_join", CheckLevel::kOk, "no mount at " + options.cgroup_mount + " (see cgroups)"};
  }
  if (fstype != "cgroup2") {
    return {"cgroup_join", CheckLevel::kOk,
            "cgroup v1: sandboxes and commands join their cgroups themselves (a thread writing 0 to `tasks`), "
            "without waiting for an RCU grace period"};
  }
  if (super_options.find(",favordynmods,") != std::string::npos) {
    return {"cgroup_join", CheckLevel::kOk,
            "cgroup v2 with favordynmods: a command joining its cgroup (a write to cgroup.procs) does not wait for an "
            "RCU grace period"};
  }
  return {"cgroup_join", CheckLevel::kOk,
          "cgroup v2 without favordynmods: sandboxes start in their cgroup (CLONE_INTO_CGROUP), but a command "
          "joining its own (a write to cgroup.procs) waits for an RCU grace period (8-25 ms) when no other "
          "cgroup write happened just before; `mount -o remount,favordynmods " +
              options.cgroup_mount + "` (kernel 6.0 or later) removes that wait, for slightly costlier forks and exits"};
}

CheckResult CheckLayers(const DoctorOptions& options) {
  // A new sandbox's writable layer (sandboxes/writable_layer.h): a directory capped by a project
  // quota where the state dir's file system enforces them, else a sparse ext4 image on a loop
  // device. Loop devices are made on demand (LOOP_CTL_GET_FREE); the loop driver's max_loop only
  // says how many exist at boot.
  size_t attached = 0;
  if (DIR* block = opendir((options.sys_root + "/block").c_str())) {
    while (struct dirent* entry = readdir(block)) {
      const std::string name = entry->d_name;
      if (name.rfind("loop", 0) != 0) continue;
      auto backing = ReadFileToString(options.sys_root + "/block/" + name + "/loop/backing_file");
      if (backing.ok() && !backing->empty()) ++attached;
    }
    closedir(block);
  }
  const std::string loops = Count(attached) + " loop devices attached now";
  auto choice = ChooseLayerKind(options.disk_quota, NearestExistingDir(options.state_dir + "/sandboxes"));
  if (!choice.ok()) return {"layers", CheckLevel::kFail, choice.status().message()};
  if (choice->kind == LayerKind::kQuotaDir) {
    return {"layers", CheckLevel::kOk,
            "writable layers are directories capped by project quotas (" + choice->why +
                "): no mkfs, loop device or file system per sandbox; " + loops};
  }
  return {"layers", CheckLevel::kOk,
          "writable layers are sparse ext4 images on loop devices (about 300 KiB of host disk each until written; "
          "made by mkfs at create): " + choice->why + "; " + loops};
}

}  // namespace corral::supervisor
