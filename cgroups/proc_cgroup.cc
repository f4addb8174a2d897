#include "cgroups/proc_cgroup.h"

#include <string>

#include "common/file_util.h"

namespace corral::cgroups {
namespace {

// True when `word` is one of the comma-separated names of a v1 line's controller list
// ("cpu,cpuacct", "memory", "name=systemd").
bool ListsController(std::string_view list, std::string_view word) {
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string_view::npos) end = list.size();
    if (list.substr(start, end - start) == word) return true;
    start = end + 1;
  }
  return false;
}

StatusOr<std::string> RelativePath(std::string_view path, std::string_view line) {
  const std::string quoted = "\"" + std::string(line) + "\"";
  if (path.empty() || path.front() != '/') {
    return Status::Error("/proc/PID/cgroup: not an absolute path in " + quoted, EINVAL);
  }
  // The v2 kernel marks a removed cgroup so; a process cannot be in one for long, but a reader
  // racing its exit can see it.
  if (path.size() > 10 && path.substr(path.size() - 10) == " (deleted)") {
    return Status::Error("/proc/PID/cgroup: a removed cgroup in " + quoted, ENOENT);
  }
  std::string relative(path.substr(1));
  while (!relative.empty() && relative.back() == '/') relative.pop_back();
  size_t start = 0;
  while (!relative.empty() && start <= relative.size()) {
    size_t end = relative.find('/', start);
    if (end == std::string::npos) end = relative.size();
    std::string_view part = std::string_view(relative).substr(start, end - start);
    // Outside the reader's cgroup namespace the kernel writes "/.." steps: no name under our
    // mount reaches there.
    if (part.empty() || part == "." || part == "..") {
      return Status::Error("/proc/PID/cgroup: a path outside this cgroup namespace in " + quoted, EXDEV);
    }
    start = end + 1;
  }
  return relative;
}

}  // namespace

StatusOr<std::string> ParseProcCgroup(std::string_view text, CgroupVersion version) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    // The path may itself hold ':' (cgroup names may), so split at the first two only.
    size_t first = line.find(':');
    if (first == std::string_view::npos) continue;
    size_t second = line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    std::string_view id = line.substr(0, first);
    std::string_view controllers = line.substr(first + 1, second - first - 1);
    std::string_view path = line.substr(second + 1);
    const bool match = version == CgroupVersion::kV2 ? (id == "0" && controllers.empty())
                                                     : ListsController(controllers, "memory");
    if (match) return RelativePath(path, line);
  }
  return Status::Error(version == CgroupVersion::kV2 ? "/proc/PID/cgroup: no cgroup v2 (\"0::\") line"
                                                     : "/proc/PID/cgroup: no line of the v1 memory hierarchy",
                       ENOENT);
}

StatusOr<std::string> ProcessCgroup(pid_t pid, CgroupVersion version) {
  const std::string path = pid == 0 ? "/proc/self/cgroup" : "/proc/" + std::to_string(pid) + "/cgroup";
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto parsed = ParseProcCgroup(text, version);
  if (!parsed.ok()) return parsed.status().WithContext(path);
  return parsed;
}

}  // namespace corral::cgroups
