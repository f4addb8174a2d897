// Where corrald puts the sandboxes' cgroups (daemon.cgroup_parent).
//
// Three cases, decided once at start:
//   - daemon.cgroup_parent set: sandboxes at <mount>/<cgroup_parent>/<id>, as before this layout.
//   - unset (""), and systemd started corrald as a service (dist/corrald.service): a transient
//     scope beside the service, delegated to corrald (sandbox_scope.h), e.g.
//     system.slice/corrald-sandboxes.scope/<id>. systemd's single-writer rule holds: nothing of
//     corrald's is in a cgroup that systemd writes, and a restart of corrald.service never meets
//     its own cgroup turned into an inner node.
//   - unset, not a systemd service (a shell, a container, systemd out of reach): corral/<id>.
//
// Sandboxes made by an older corrald sit at corral/<id> (the old default). They keep running and
// are adopted where they are: SandboxHost finds a running sandbox's cgroup from its init's
// /proc/PID/cgroup, and removes what a dead one left under each "legacy" parent. Stopped and
// started again, a sandbox moves to the scope.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cgroups/cgroup_backend.h"
#include "common/status.h"
#include "supervisor/config.h"
#include "supervisor/sandboxes/sandbox_scope.h"

namespace corral::supervisor {

// The parent of sandboxes when neither daemon.cgroup_parent nor systemd names one, and the
// parent every corrald before the scope used.
inline constexpr char kDefaultCgroupParent[] = "corral";

// True when a service manager started this process: $INVOCATION_ID (systemd sets it for every unit
// it starts, since v232) or $NOTIFY_SOCKET (Type=notify). Only then is systemd asked.
bool StartedByServiceManager(std::string_view invocation_id, std::string_view notify_socket);

struct CgroupPlacement {
  std::string sandboxes_parent;              // <sandboxes_parent>/<id>
  std::vector<std::string> legacy_parents;   // older corralds' parents, searched for leftovers
  // Whether corrald removes the parent once its last sandbox is gone: not the scope's own cgroup,
  // which is systemd's (it goes with the scope).
  bool parent_is_corralds = true;
  std::string reason;                        // for the log: which case applied
};

// The pure decision: `configured_parent` is daemon.cgroup_parent ("" = unset), `scope_cgroup`
// the cgroup of the sandboxes' scope when systemd runs corrald as a service.
CgroupPlacement PlanCgroupPlacement(std::string_view configured_parent, const std::optional<std::string>& scope_cgroup);

struct PlacedSandboxes {
  CgroupPlacement placement;
  std::unique_ptr<SandboxScope> scope;       // under systemd: keep it (its anchor) while corrald runs
};

// Reads the environment, asks systemd when it started corrald, and starts or joins the scope.
// systemd out of reach, or corrald not in a service: the plain layout, with a warning. A scope
// that systemd refuses is an error (corrald does not start).
StatusOr<PlacedSandboxes> PlaceSandboxes(const DaemonConfig& config, cgroups::CgroupBackend& backend);

}  // namespace corral::supervisor
