// The parts of CgroupBackend that are the same code over both versions, and the few places
// where the version decides (the callers above cgroups/ never branch on it).
#include "cgroups/cgroup_backend.h"

#include <sys/stat.h>

#include "cgroups/proc_cgroup.h"
#include "common/file_util.h"

namespace corral::cgroups {

Status ClonePlacement::AfterNamespace(pid_t pid) const {
  // v1 (join fds): the child moved itself; no leaf: nothing to move.
  if (backend_ == nullptr || leaf_.empty() || !leaf_join_.empty()) return Status();
  return backend_->AttachToNewLeaf(name_, leaf_, pid);
}

const char* CgroupBackend::name() const { return version() == CgroupVersion::kV2 ? "v2" : "v1"; }

StatusOr<ClonePlacement> CgroupBackend::PrepareClone(const std::string& name, const std::string& leaf) {
  if (leaf.find('/') != std::string::npos) return Status::Error("leaf " + leaf + ": one component", EINVAL);
  UniqueFd fd;
  std::vector<UniqueFd> join, leaf_join;
  if (version() == CgroupVersion::kV2) {
    ASSIGN_OR_RETURN(fd, OpenForClone(name));
  } else {
    ASSIGN_OR_RETURN(join, OpenSelfJoin(name));
    if (!leaf.empty()) {
      RETURN_IF_ERROR(Create(name + "/" + leaf));
      ASSIGN_OR_RETURN(leaf_join, OpenSelfJoin(name + "/" + leaf));
    }
  }
  return ClonePlacement(this, name, leaf, std::move(fd), std::move(join), std::move(leaf_join));
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
