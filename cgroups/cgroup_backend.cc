// The parts of CgroupBackend that are the same code over both versions, and the few places
// where the version decides (the callers above cgroups/ never branch on it).
#include "cgroups/cgroup_backend.h"

#include <sys/stat.h>

#include "cgroups/proc_cgroup.h"
#include "common/file_util.h"

namespace corral::cgroups {

Status ClonePlacement::PlaceChild(pid_t pid) const {
  if (clone_fd_ || backend_ == nullptr) return Status();  // clone3 put it there
  return backend_->Attach(name_, pid);
}

const char* CgroupBackend::name() const { return version() == CgroupVersion::kV2 ? "v2" : "v1"; }

StatusOr<ClonePlacement> CgroupBackend::PrepareClone(const std::string& name) {
  UniqueFd fd;
  if (version() == CgroupVersion::kV2) {
    ASSIGN_OR_RETURN(fd, OpenForClone(name));
  }
  return ClonePlacement(this, name, std::move(fd));
}

StatusOr<std::string> CgroupBackend::ProcessCgroup(pid_t pid) const {
  return cgroups::ProcessCgroup(pid, version());
}

std::vector<std::string> CgroupBackend::MissingControllers(const std::string& mount_root) const {
  std::vector<std::string> missing;
  if (version() == CgroupVersion::kV2) {
    auto controllers = ReadFileToString(mount_root + "/cgroup.controllers");
    std::string list = " ";
    if (controllers.ok()) {
      for (char c : *controllers) list += (c == '\n' || c == '\t') ? ' ' : c;
      list += " ";
    }
    for (const char* c : {"cpu", "memory", "pids"}) {
      if (list.find(std::string(" ") + c + " ") == std::string::npos) missing.push_back(c);
    }
  } else {
    for (const char* c : {"cpu", "cpuacct", "memory", "pids", "freezer"}) {
      struct stat st {};
      if (stat((mount_root + "/" + c).c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) missing.push_back(c);
    }
  }
  return missing;
}

const char* CgroupBackend::CreateFailureHint() const {
  if (version() == CgroupVersion::kV1) return "";
  return ": the subtree is not delegated to corrald (under systemd its scope corrald-sandboxes.scope has "
         "Delegate=yes; elsewhere the parents' cgroup.subtree_control must offer the controllers)";
}

}  // namespace corral::cgroups
