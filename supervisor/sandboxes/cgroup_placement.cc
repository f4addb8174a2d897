#include "supervisor/sandboxes/cgroup_placement.h"

#include <cstdlib>
#include <utility>

#include "common/log.h"

namespace corral::supervisor {

bool StartedByServiceManager(std::string_view invocation_id, std::string_view notify_socket) {
  return !invocation_id.empty() || !notify_socket.empty();
}

CgroupPlacement PlanCgroupPlacement(std::string_view configured_parent, const std::optional<std::string>& scope_cgroup) {
  CgroupPlacement placement;
  if (!configured_parent.empty()) {
    placement.sandboxes_parent = std::string(configured_parent);
    placement.reason = "daemon.cgroup_parent";
  } else if (scope_cgroup.has_value()) {
    placement.sandboxes_parent = *scope_cgroup;
    placement.legacy_parents = {kDefaultCgroupParent};
    placement.parent_is_corralds = false;
    placement.reason = "the systemd scope delegated to corrald";
  } else {
    placement.sandboxes_parent = kDefaultCgroupParent;
    placement.reason = "not a systemd service";
  }
  return placement;
}

StatusOr<PlacedSandboxes> PlaceSandboxes(const DaemonConfig& config, cgroups::CgroupBackend& backend) {
  PlacedSandboxes placed;
  const char* invocation = getenv("INVOCATION_ID");
  const char* notify = getenv("NOTIFY_SOCKET");
  if (config.cgroup_parent.empty() &&
      StartedByServiceManager(invocation != nullptr ? invocation : "", notify != nullptr ? notify : "")) {
    auto scope = SandboxScope::ForThisService(backend, config.stop_grace_s);
    if (scope.ok()) {
      ASSIGN_OR_RETURN(std::string cgroup, (*scope)->Ensure());
      placed.scope = std::move(*scope);
      placed.placement = PlanCgroupPlacement(config.cgroup_parent, cgroup);
      return placed;
    }
    LogWarn("cgroups", "started by a service manager, but not as a systemd service corrald can ask; sandboxes under corral/",
            {{"error", scope.status().ToString()}});
  }
  placed.placement = PlanCgroupPlacement(config.cgroup_parent, std::nullopt);
  return placed;
}

}  // namespace corral::supervisor
