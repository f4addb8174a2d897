// Admission: what a user may have (DESIGN.md §4 Sandboxes). A new sandbox's limits, idle timeout,
// egress rules and network mode are the request's (or the configuration's defaults), held against
// the daemon's maxima ([sandbox] max_*, [egress] allowed_*) and the user's caps (the token's
// limits); its row goes into the store only within the per-user, per-issuer and daemon-wide counts,
// counted in the same transaction as the insert.
//
// Errors carry the errno the API maps (sandbox_manager.h): EDQUOT above a limit or a count, EINVAL
// a value that cannot be, EPERM not with this token, EAGAIN not on this daemon.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "supervisor/config.h"
#include "supervisor/egress/egress_policy.h"
#include "supervisor/sandboxes/sandbox_types.h"
#include "supervisor/store/store.h"

namespace corral::supervisor {

class Admission {
 public:
  Admission(const DaemonConfig& config, Store& store) : config_(config), store_(store) {}

  // A new sandbox's limits (memory, cpus, pids, disk, every one set): each requested value, or the
  // configuration's default, within the token's cap and the daemon's maximum (EDQUOT above;
  // EINVAL below the least a sandbox needs).
  StatusOr<isolation::ResourceLimits> Limits(const UserCaps& caps, const isolation::ResourceLimits& requested) const;
  // Its idle timeout in seconds (0: none), likewise.
  StatusOr<uint64_t> IdleTimeout(const UserCaps& caps, std::optional<uint64_t> requested) const;
  // The rules a sandbox gets: `requested` laid over `current` (or, unset, the configuration's
  // defaults), held against the configuration's and the token's caps (EPERM outside them); no
  // request: the configuration's defaults narrowed to the token's caps.
  StatusOr<EgressRules> EgressRulesFor(const UserCaps& caps, const std::optional<EgressRulesChange>& requested,
                                       const std::optional<EgressRules>& current = std::nullopt) const;
  // Whether this caller may have a sandbox with this network mode (EINVAL: no such mode; EPERM:
  // not with this token; EAGAIN: `full_available` is false, not on this daemon).
  static Status CheckNetwork(const Caller& caller, const UserCaps& caps, const std::string& network,
                             bool full_available);
  // Inserts a new sandbox's row (the store gives it its uid range) if the user, the issuer and the
  // daemon hold fewer sandboxes than they may.
  StatusOr<SandboxRow> Insert(const Caller& caller, const UserCaps& caps, const SandboxRow& row);
  // Gives a pooled sandbox (warm_pool.h) to the caller: `row` (its id and uid range the pooled
  // one's) replaces the pooled row, egress rules included, if the user and the issuer hold fewer
  // sandboxes than they may (the daemon's count does not change).
  Status Claim(const Caller& caller, const UserCaps& caps, const SandboxRow& row);

 private:
  // EDQUOT when the caller's user, or (for a token) its issuer's users, hold all they may.
  Status CheckOwnerRoom(const Caller& caller, const UserCaps& caps);

  const DaemonConfig& config_;
  Store& store_;
};

}  // namespace corral::supervisor
