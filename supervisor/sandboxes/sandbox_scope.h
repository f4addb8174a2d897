// Under systemd: the transient scope unit that holds the sandboxes' cgroups.
//
// Why a scope of their own and not corrald.service's subtree: systemd starts a service's main
// process in the unit's own cgroup, and on cgroup v2 a cgroup whose cgroup.subtree_control names
// a controller may hold no process (EBUSY). Sandboxes with limits under corrald.service would
// enable memory, cpu and pids there, and stay while corrald restarts (KillMode=process): the next
// start then fails with 219/CGROUP (measured on Debian 12's systemd 252; systemd 254 added
// DelegateSubgroup= for this). A scope is never "started again": it lives while something is in
// it and goes when empty, and systemd delegates it (Delegate=yes) to corrald, so the single-writer
// rule holds: systemd writes the scope's own cgroup, corrald everything below it.
//
//   system.slice/corrald.service                  corrald (and its helpers), systemd's
//   system.slice/corrald-sandboxes.scope/         the scope (Delegate=yes), systemd's
//   system.slice/corrald-sandboxes.scope/anchor   a child of corrald that keeps the scope alive
//                                                 while corrald runs (it dies with corrald)
//   system.slice/corrald-sandboxes.scope/sb_x/... each sandbox (SandboxHost)
//
// The scope is made with StartTransientUnit (Delegate=yes, TasksMax=infinity: each sandbox has
// its own pids.max, and systemd's default would cap them all together; OOMPolicy=continue: an OOM
// kill in one sandbox must not stop the others; TimeoutStopSec=sandbox.stop_grace: when systemd
// stops it, at shutdown, SIGTERM then SIGKILL after the grace corrald gives a stop, not 90 s). When it already runs (sandboxes of an earlier
// corrald), the anchor joins it with AttachProcessesToUnit. Both over systemd's private socket
// (/run/systemd/private, root only), which needs no D-Bus daemon.
//
// Thread-safe: Ensure() may be called from any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "cgroups/cgroup_backend.h"
#include "common/status.h"

namespace corral::supervisor {

// The scope's leaf that holds corrald's anchor.
inline constexpr char kAnchorLeaf[] = "anchor";

// "corrald.service" -> "corrald-sandboxes.scope", "corrald@prod.service" ->
// "corrald@prod-sandboxes.scope". An error for a name that is not a service's.
StatusOr<std::string> SandboxScopeName(std::string_view service_id);

// The scope's cgroup from its anchor's: "system.slice/corrald-sandboxes.scope/anchor" ->
// "system.slice/corrald-sandboxes.scope". An error when the anchor is not in <...>/<scope>/anchor.
StatusOr<std::string> ScopeCgroupOfAnchor(std::string_view anchor_cgroup, std::string_view scope_name);

class SandboxScope {
 public:
  // Asks systemd (its private socket) which unit this process belongs to. An error when systemd
  // cannot be reached or the unit is not a service; the caller then keeps the plain layout.
  // `stop_timeout_s`: the scope's TimeoutStopSec=.
  static StatusOr<std::unique_ptr<SandboxScope>> ForThisService(cgroups::CgroupBackend& backend,
                                                                uint64_t stop_timeout_s);
  // Kills and reaps the anchor: a scope that holds no sandbox then goes.
  ~SandboxScope();
  SandboxScope(const SandboxScope&) = delete;
  SandboxScope& operator=(const SandboxScope&) = delete;

  // Makes sure the scope runs with corrald's anchor in it, and returns its cgroup (relative to
  // the mount, e.g. "system.slice/corrald-sandboxes.scope"). Cheap when the anchor is in place
  // (one read of /proc/PID/cgroup); otherwise a new anchor, and the scope started or joined.
  StatusOr<std::string> Ensure();

  const std::string& service() const { return service_; }
  const std::string& name() const { return name_; }

 private:
  SandboxScope(cgroups::CgroupBackend& backend, std::string service, std::string slice, std::string name,
               uint64_t stop_timeout_s);
  Status StartOrJoin();
  void KillAnchor();

  cgroups::CgroupBackend& backend_;
  const std::string service_;  // "corrald.service"
  const std::string slice_;    // "system.slice": the scope goes beside the service
  const std::string name_;     // "corrald-sandboxes.scope"
  const uint64_t stop_timeout_s_;
  std::mutex mu_;
  pid_t anchor_ = -1;
  std::string cgroup_;         // the scope's cgroup, once known
};

}  // namespace corral::supervisor
