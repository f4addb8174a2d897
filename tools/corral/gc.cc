#include "tools/corral/gc.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <set>

#include "common/file_util.h"

namespace corral::cli {
namespace {

std::string CgroupOfRecord(const std::string& content) {
  const std::string key = "cgroup=";
  size_t pos = content.find(key);
  if (pos == std::string::npos) return "";
  size_t end = content.find('\n', pos);
  return content.substr(pos + key.size(), end == std::string::npos ? std::string::npos : end - pos - key.size());
}

}  // namespace

StatusOr<RunRecord> RunRecord::Create(const std::string& run_dir, const std::string& id,
                                      const std::string& cgroup) {
  const std::string dir = run_dir + "/runs";
  RETURN_IF_ERROR(MakeDirs(dir, 0700));
  const std::string path = dir + "/" + id;
  const std::string temp = dir + "/." + id + ".new";
  UniqueFd fd(open(temp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd) return ErrnoError("create " + temp);
  if (flock(fd.get(), LOCK_EX) != 0) return ErrnoError("flock " + temp);
  std::string content = "pid=" + std::to_string(getpid()) + "\ncgroup=" + cgroup + "\n";
  if (write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    unlink(temp.c_str());
    return ErrnoError("write " + temp);
  }
  if (rename(temp.c_str(), path.c_str()) != 0) {
    unlink(temp.c_str());
    return ErrnoError("rename " + temp);
  }
  RunRecord record;
  record.path_ = path;
  record.lock_ = std::move(fd);
  return record;
}

RunRecord::~RunRecord() {
  if (!path_.empty()) unlink(path_.c_str());
}

StatusOr<GcReport> CollectGarbage(const std::string& run_dir, cgroups::CgroupBackend& backend,
                                  const std::string& cgroup_parent, bool scan_cgroups) {
  GcReport report;
  std::set<std::string> live_cgroups;
  const std::string dir = run_dir + "/runs";
  if (DIR* d = opendir(dir.c_str())) {
    while (struct dirent* entry = readdir(d)) {
      std::string name = entry->d_name;
      if (name == "." || name == "..") continue;
      const std::string path = dir + "/" + name;
      // A record being created sits at .<id>.new, unlocked for a moment between its open and
      // its flock: leave young ones alone (a run that died there left an old one).
      struct stat st;
      if (name[0] == '.' && (lstat(path.c_str(), &st) != 0 || time(nullptr) - st.st_mtime < 60)) continue;
      UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
      if (!fd) continue;
      auto content = ReadFileToString(path);
      std::string cgroup = content.ok() ? CgroupOfRecord(*content) : "";
      if (flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
        if (!cgroup.empty()) live_cgroups.insert(cgroup);
        continue;  // A live run (or one being created): not ours to touch.
      }
      if (!cgroup.empty() && cgroup.rfind(cgroup_parent + "/" + kRunCgroupPrefix, 0) == 0) {
        Status destroyed = backend.Destroy(cgroup);
        if (!destroyed.ok()) return destroyed.WithContext("gc " + cgroup);
        ++report.cgroups_removed;
      }
      unlink(path.c_str());
      ++report.records_removed;
    }
    closedir(d);
  }
  if (!scan_cgroups) {
    if (report.cgroups_removed > 0) (void)backend.RemoveIfEmpty(cgroup_parent);
    return report;
  }
  auto children = backend.ListChildren(cgroup_parent);
  if (children.ok()) {
    for (const std::string& child : *children) {
      const std::string base = child.substr(child.rfind('/') + 1);
      if (base.rfind(kRunCgroupPrefix, 0) != 0 || live_cgroups.count(child) > 0) continue;
      // Re-check under the record's lock: a run that started after the scan above has a record.
      const std::string record = dir + "/" + base.substr(std::string(kRunCgroupPrefix).size());
      if (access(record.c_str(), F_OK) == 0) continue;
      Status destroyed = backend.Destroy(child);
      if (!destroyed.ok()) return destroyed.WithContext("gc " + child);
      ++report.cgroups_removed;
    }
  }
  (void)backend.RemoveIfEmpty(cgroup_parent);
  return report;
}

}  // namespace corral::cli
