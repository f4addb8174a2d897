#include "cgroups/cgroup_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <memory>

#include "common/file_util.h"
#include "common/unique_fd.h"

namespace corral::cgroups {
namespace {

std::string_view Trim(std::string_view text) {
  constexpr std::string_view kSpace = " \t\r\n";
  size_t begin = text.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  size_t end = text.find_last_not_of(kSpace);
  return text.substr(begin, end - begin + 1);
}

struct DirCloser {
  void operator()(DIR* dir) const { ::closedir(dir); }
};
using UniqueDir = std::unique_ptr<DIR, DirCloser>;

// Opens `dir` for listing. A missing directory gives a null handle and OK.
StatusOr<UniqueDir> OpenDir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return UniqueDir();
    return ErrnoError("open " + dir);
  }
  DIR* handle = ::fdopendir(fd.get());
  if (handle == nullptr) return ErrnoError("fdopendir " + dir);
  fd.release();
  return UniqueDir(handle);
}

Status AppendTreeDeepestFirst(const std::string& dir, int depth, std::vector<std::string>* out) {
  // cgroupfs nests at most a few levels in practice; a bound keeps a pathological (or
  // maliciously deep) tree from exhausting the stack.
  if (depth > 64) return Status::Error("cgroup tree too deep at " + dir);
  ASSIGN_OR_RETURN(std::vector<std::string> children, ListSubdirectories(dir));
  for (const std::string& child : children) {
    RETURN_IF_ERROR(AppendTreeDeepestFirst(dir + "/" + child, depth + 1, out));
  }
  out->push_back(dir);
  return Status();
}

}  // namespace

Status ValidateCgroupName(const std::string& name) {
  if (name.empty()) return Status::Error("invalid cgroup name: empty");
  if (name.front() == '/') {
    return Status::Error("invalid cgroup name \"" + name + "\": must be relative");
  }
  if (name.find('\0') != std::string::npos || name.find('\n') != std::string::npos) {
    return Status::Error("invalid cgroup name: contains NUL or newline");
  }
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    std::string_view part(name.data() + start, end - start);
    if (part.empty()) {
      return Status::Error("invalid cgroup name \"" + name + "\": empty component");
    }
    if (part == "." || part == "..") {
      return Status::Error("invalid cgroup name \"" + name + "\": \".\" or \"..\" component");
    }
    start = end + 1;
  }
  return Status();
}

Status ValidateLimits(const CgroupLimits& limits) {
  constexpr uint64_t kMinCfsUs = 1000;
  constexpr uint64_t kMaxCfsPeriodUs = 1000000;
  if (!limits.cpu_quota_us.has_value()) return Status();
  if (limits.cpu_period_us < kMinCfsUs || limits.cpu_period_us > kMaxCfsPeriodUs) {
    return Status::Error("cpu period " + std::to_string(limits.cpu_period_us) +
                         " us out of range [1000, 1000000]");
  }
  if (*limits.cpu_quota_us < kMinCfsUs) {
    return Status::Error("cpu quota " + std::to_string(*limits.cpu_quota_us) +
                         " us below the kernel's minimum of 1000");
  }
  return Status();
}

std::vector<std::string> SplitCgroupName(const std::string& name) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    parts.emplace_back(name, start, end - start);
    start = end + 1;
  }
  return parts;
}

StatusOr<uint64_t> ParseCgroupUint(std::string_view text) {
  std::string_view trimmed = Trim(text);
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(trimmed.data(), trimmed.data() + trimmed.size(), value);
  if (trimmed.empty() || ec != std::errc() || ptr != trimmed.data() + trimmed.size()) {
    return Status::Error("not an unsigned integer: \"" + std::string(trimmed) + "\"");
  }
  return value;
}

StatusOr<uint64_t> ReadUintFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string content, ReadFileToString(path));
  StatusOr<uint64_t> value = ParseCgroupUint(content);
  if (!value.ok()) return value.status().WithContext(path);
  return value;
}

StatusOr<uint64_t> ReadOptionalUintFile(const std::string& path, uint64_t absent_value) {
  StatusOr<std::string> content = ReadFileToString(path);
  if (!content.ok()) {
    if (content.status().error_number() == ENOENT) return absent_value;
    return content.status();
  }
  StatusOr<uint64_t> value = ParseCgroupUint(*content);
  if (!value.ok()) return value.status().WithContext(path);
  return value;
}

std::optional<uint64_t> FindKeyedValue(std::string_view content, std::string_view key) {
  size_t pos = 0;
  while (pos < content.size()) {
    size_t end = content.find('\n', pos);
    if (end == std::string_view::npos) end = content.size();
    std::string_view line = Trim(content.substr(pos, end - pos));
    pos = end + 1;
    size_t space = line.find_first_of(" \t");
    if (space == std::string_view::npos || line.substr(0, space) != key) continue;
    StatusOr<uint64_t> value = ParseCgroupUint(line.substr(space + 1));
    if (!value.ok()) return std::nullopt;
    return *value;
  }
  return std::nullopt;
}

StatusOr<uint64_t> ReadKeyedValue(const std::string& path, std::string_view key,
                                  bool missing_file_ok, uint64_t absent_value) {
  StatusOr<std::string> content = ReadFileToString(path);
  if (!content.ok()) {
    if (missing_file_ok && content.status().error_number() == ENOENT) return absent_value;
    return content.status();
  }
  return FindKeyedValue(*content, key).value_or(absent_value);
}

StatusOr<std::vector<pid_t>> ReadPidList(const std::string& path) {
  ASSIGN_OR_RETURN(std::string content, ReadFileToString(path));
  std::vector<pid_t> pids;
  size_t pos = 0;
  while (pos < content.size()) {
    size_t end = content.find('\n', pos);
    if (end == std::string::npos) end = content.size();
    std::string_view line = Trim(std::string_view(content).substr(pos, end - pos));
    pos = end + 1;
    if (line.empty()) continue;
    pid_t pid = 0;
    auto [ptr, ec] = std::from_chars(line.data(), line.data() + line.size(), pid);
    if (ec != std::errc() || ptr != line.data() + line.size() || pid <= 0) {
      return Status::Error(path + ": not a pid: \"" + std::string(line) + "\"");
    }
    pids.push_back(pid);
  }
  return pids;
}

StatusOr<bool> PathExists(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return true;
  if (errno == ENOENT || errno == ENOTDIR) return false;
  return ErrnoError("stat " + path);
}

StatusOr<std::vector<std::string>> ListSubdirectories(const std::string& dir) {
  ASSIGN_OR_RETURN(UniqueDir handle, OpenDir(dir));
  std::vector<std::string> names;
  if (!handle) return names;
  for (;;) {
    errno = 0;
    struct dirent* entry = ::readdir(handle.get());
    if (entry == nullptr) {
      if (errno != 0) return ErrnoError("readdir " + dir);
      break;
    }
    std::string_view child = entry->d_name;
    if (child == "." || child == "..") continue;
    bool is_dir = entry->d_type == DT_DIR;
    if (entry->d_type == DT_UNKNOWN) {
      struct stat st;
      is_dir = ::fstatat(::dirfd(handle.get()), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
               S_ISDIR(st.st_mode);
    }
    if (is_dir) names.emplace_back(child);
  }
  std::sort(names.begin(), names.end());
  return names;
}

StatusOr<bool> HasSubdirectories(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return false;
    return ErrnoError("stat " + dir);
  }
  if (!S_ISDIR(st.st_mode)) return Status::Error(dir + " is not a directory", ENOTDIR);
  if (st.st_nlink >= 2) return st.st_nlink > 2;
  ASSIGN_OR_RETURN(std::vector<std::string> children, ListSubdirectories(dir));
  return !children.empty();
}

StatusOr<std::vector<std::string>> ListTreeDeepestFirst(const std::string& dir) {
  std::vector<std::string> out;
  ASSIGN_OR_RETURN(bool exists, PathExists(dir));
  if (!exists) return out;
  RETURN_IF_ERROR(AppendTreeDeepestFirst(dir, 0, &out));
  return out;
}

Status CollectTreePids(const std::string& dir, std::vector<pid_t>* pids) {
  ASSIGN_OR_RETURN(std::vector<std::string> tree, ListTreeDeepestFirst(dir));
  for (const std::string& cgroup : tree) {
    StatusOr<std::vector<pid_t>> listed = ReadPidList(cgroup + "/cgroup.procs");
    if (!listed.ok()) {
      // A child cgroup removed between the listing and the read (by a concurrent Destroy or
      // RemoveIfEmpty) has no processes left to report.
      if (listed.status().error_number() == ENOENT && cgroup != dir) continue;
      return listed.status();
    }
    pids->insert(pids->end(), listed->begin(), listed->end());
  }
  return Status();
}

void SortUnique(std::vector<pid_t>* pids) {
  std::sort(pids->begin(), pids->end());
  pids->erase(std::unique(pids->begin(), pids->end()), pids->end());
}

Status MakeCgroupDirs(const std::string& base, const std::string& relative) {
  // The parents usually exist already (a command's cgroup in its sandbox's): one mkdir.
  const std::string full = base + "/" + relative;
  if (::mkdir(full.c_str(), 0755) == 0) return Status();
  if (errno != ENOENT) return ErrnoError("mkdir " + full);
  std::vector<std::string> parts = SplitCgroupName(relative);
  // A concurrent run may remove a shared parent (RemoveIfEmpty) between our mkdir of it and
  // of its child: the child's mkdir then fails with ENOENT, and we start again from the top.
  for (int attempt = 0;; ++attempt) {
    std::string path = base;
    Status status;
    for (size_t i = 0; i < parts.size() && status.ok(); ++i) {
      path += "/" + parts[i];
      bool last = i + 1 == parts.size();
      if (::mkdir(path.c_str(), 0755) != 0 && (errno != EEXIST || last)) {
        status = ErrnoError("mkdir " + path);
      }
    }
    if (status.ok() || status.error_number() != ENOENT || attempt >= 16) return status;
  }
}

Status RemoveCgroupDir(const std::string& path, std::chrono::steady_clock::time_point deadline) {
  std::chrono::microseconds pause(500);
  for (;;) {
    if (::rmdir(path.c_str()) == 0 || errno == ENOENT) return Status();
    // EBUSY: a task killed a moment ago still populates the cgroup until do_exit() reaches
    // cgroup_exit(), which can be after kill(2), cgroup.kill and the last cgroup.procs read
    // have returned.
    if (errno != EBUSY || std::chrono::steady_clock::now() >= deadline) {
      return ErrnoError("rmdir " + path);
    }
    SleepFor(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10000));
  }
}

std::string WithoutTrailingSlashes(std::string root) {
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  return root;
}

Status ReadCounters(const CounterFiles& files, CgroupStats* stats) {
  auto read = [&](const std::string& path) {
    return files.absent_is_zero ? ReadOptionalUintFile(path) : ReadUintFile(path);
  };
  ASSIGN_OR_RETURN(stats->memory_current_bytes, read(files.memory_current));
  ASSIGN_OR_RETURN(stats->memory_peak_bytes, read(files.memory_peak));
  // v1's "oom_kill" line appeared in Linux 4.13 (older kernels read as 0); v2's memory.events
  // is hierarchical (unless mounted with memory_localevents): an OOM kill in a command's child
  // cgroup also counts in the sandbox's.
  ASSIGN_OR_RETURN(stats->oom_kill_count, ReadKeyedValue(files.memory_events, "oom_kill", files.absent_is_zero));
  ASSIGN_OR_RETURN(stats->pids_current, read(files.pids_current));
  ASSIGN_OR_RETURN(stats->pids_max_events, ReadKeyedValue(files.pids_events, "max", /*missing_file_ok=*/true));
  return Status();
}

Status RemoveCgroupDirIfEmpty(const std::string& path) {
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT && errno != ENOTEMPTY && errno != EBUSY) {
    return ErrnoError("rmdir " + path);
  }
  return Status();
}

Status PollUntil(const std::function<StatusOr<bool>()>& done, std::chrono::milliseconds timeout,
                 std::string_view what) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::chrono::microseconds pause(1000);
  for (;;) {
    ASSIGN_OR_RETURN(bool finished, done());
    if (finished) return Status();
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::Error(std::string(what) + ": timed out after " +
                           std::to_string(timeout.count()) + " ms");
    }
    SleepFor(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10000));
  }
}

void SleepFor(std::chrono::microseconds duration) {
  struct timespec request;
  request.tv_sec = static_cast<time_t>(duration.count() / 1000000);
  request.tv_nsec = static_cast<long>((duration.count() % 1000000) * 1000);
  while (::nanosleep(&request, &request) != 0 && errno == EINTR) {
  }
}

}  // namespace corral::cgroups
