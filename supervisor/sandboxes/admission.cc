#include "supervisor/sandboxes/admission.h"

#include <algorithm>

#include "supervisor/sandboxes/full_network.h"
#include "supervisor/sandboxes/sandbox_host.h"

namespace corral::supervisor {
namespace {

// A requested value, or the default, checked against the token's cap and the daemon's maximum.
StatusOr<uint64_t> Pick(const char* name, std::optional<uint64_t> requested, uint64_t fallback,
                        std::optional<uint64_t> cap, uint64_t maximum, uint64_t minimum) {
  uint64_t limit = maximum;
  if (cap && *cap < limit) limit = *cap;
  uint64_t value = requested.value_or(std::min(fallback, limit));
  if (value > limit) {
    return Status::Error(std::string(name) + " " + std::to_string(value) + " is above the limit of " +
                             std::to_string(limit),
                         EDQUOT);
  }
  if (value < minimum) {
    return Status::Error(std::string(name) + " must be at least " + std::to_string(minimum), EINVAL);
  }
  return value;
}

}  // namespace

StatusOr<isolation::ResourceLimits> Admission::Limits(const UserCaps& caps,
                                                      const isolation::ResourceLimits& requested) const {
  const isolation::ResourceLimits& cap = caps.resources;
  isolation::ResourceLimits limits;
  ASSIGN_OR_RETURN(limits.memory_bytes, Pick("memory_bytes", requested.memory_bytes, config_.default_memory_bytes,
                                             cap.memory_bytes, config_.max_memory_bytes, 16ull << 20));
  ASSIGN_OR_RETURN(limits.cpu_millicores, Pick("cpus (millicores)", requested.cpu_millicores,
                                               config_.default_cpu_millicores, cap.cpu_millicores,
                                               config_.max_cpu_millicores, 10));
  ASSIGN_OR_RETURN(limits.pids, Pick("pids", requested.pids, config_.default_pids, cap.pids, config_.max_pids, 8));
  ASSIGN_OR_RETURN(limits.disk_bytes, Pick("disk_bytes", requested.disk_bytes, config_.default_disk_bytes,
                                           cap.disk_bytes, config_.max_disk_bytes, 64ull << 20));
  return limits;
}

StatusOr<uint64_t> Admission::IdleTimeout(const UserCaps& caps, std::optional<uint64_t> requested) const {
  return Pick("idle_timeout_s", requested, config_.default_idle_timeout_s, caps.idle_timeout_s,
              config_.max_idle_timeout_s, 0);
}

StatusOr<EgressRules> Admission::EgressRulesFor(const UserCaps& caps, const std::optional<EgressRulesChange>& requested,
                                                const std::optional<EgressRules>& current) const {
  // The token's caps: what it names, within the config's (an axis it does not name is the config's).
  const EgressRules token_caps = caps.egress ? caps.egress->Over(config_.egress_allowed) : config_.egress_allowed;
  if (!requested) return NarrowToCaps(NarrowToCaps(config_.egress_defaults, config_.egress_allowed), token_caps);
  const EgressRules rules = requested->Over(current.value_or(config_.egress_defaults));
  RETURN_IF_ERROR(CheckWithinCaps(rules, config_.egress_allowed, "the daemon's egress.allowed_*"));
  RETURN_IF_ERROR(CheckWithinCaps(rules, token_caps, "the token's limits.egress"));
  return rules;
}

Status Admission::CheckNetwork(const Caller& caller, const UserCaps& caps, const std::string& network,
                               bool full_available) {
  if (network == kNetworkLoopback) return Status();
  if (network != kNetworkFull) {
    return Status::Error("network: \"" + network + "\" is not a network mode (\"loopback\" or \"full\")", EINVAL);
  }
  if (!caller.admin && !caps.full_network) {
    return Status::Error("network \"full\" needs the scope unsafe:full_network in the token", EPERM);
  }
  if (!full_available) return Status::Error("network \"full\" is not available on this daemon", EAGAIN);
  return Status();
}

Status Admission::CheckOwnerRoom(const Caller& caller, const UserCaps& caps) {
  uint64_t per_user = config_.max_sandboxes_per_user;
  if (caps.sandboxes && *caps.sandboxes < per_user) per_user = *caps.sandboxes;
  ASSIGN_OR_RETURN(int64_t mine, store_.CountSandboxes(caller.iss, caller.sub));
  if (static_cast<uint64_t>(mine) >= per_user) {
    return Status::Error("this user already has " + std::to_string(mine) + " sandboxes (the limit)", EDQUOT);
  }
  if (config_.max_sandboxes_per_issuer > 0 && !caller.admin) {
    ASSIGN_OR_RETURN(int64_t issuer, store_.CountAllSandboxes(caller.iss));
    if (static_cast<uint64_t>(issuer) >= config_.max_sandboxes_per_issuer) {
      return Status::Error("the users of issuer " + caller.iss + " already have " + std::to_string(issuer) +
                               " sandboxes (the issuer's limit)",
                           EDQUOT);
    }
  }
  return Status();
}

StatusOr<SandboxRow> Admission::Insert(const Caller& caller, const UserCaps& caps, const SandboxRow& row) {
  StatusOr<SandboxRow> created = Status::Error("unreachable");
  Status counted = store_.InTransaction([&]() -> Status {
    RETURN_IF_ERROR(CheckOwnerRoom(caller, caps));
    ASSIGN_OR_RETURN(int64_t all, store_.CountAllSandboxes());
    if (static_cast<uint64_t>(all) >= config_.max_sandboxes) {
      return Status::Error("the daemon holds its maximum of sandboxes", EDQUOT);
    }
    created = store_.CreateSandbox(row, kUidFirst, kUidStep, kUidSlots);
    return created.status();
  });
  if (!counted.ok()) return counted;
  return created;
}

Status Admission::Claim(const Caller& caller, const UserCaps& caps, const SandboxRow& row) {
  return store_.InTransaction([&]() -> Status {
    RETURN_IF_ERROR(CheckOwnerRoom(caller, caps));
    RETURN_IF_ERROR(store_.UpdateSandbox(row));
    return store_.SetSandboxEgress(row.id, row.egress.value_or(EgressRules{}));
  });
}

}  // namespace corral::supervisor
