#include "supervisor/admission.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "supervisor/full_network.h"
#include "supervisor/sandbox_host.h"

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

StatusOr<SandboxLimits> ParseLimits(const std::string& limits_json) {
  auto j = nlohmann::json::parse(limits_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::Error("bad limits in the store", EINVAL);
  SandboxLimits limits;
  limits.memory_bytes = j.value("memory_bytes", uint64_t{0});
  limits.cpu_millicores = j.value("cpu_millicores", uint64_t{0});
  limits.pids = j.value("pids", uint64_t{0});
  limits.disk_bytes = j.value("disk_bytes", uint64_t{0});
  return limits;
}

std::string LimitsJson(const SandboxLimits& limits) {
  return nlohmann::json{{"memory_bytes", limits.memory_bytes},
                        {"cpu_millicores", limits.cpu_millicores},
                        {"pids", limits.pids},
                        {"disk_bytes", limits.disk_bytes}}
      .dump();
}

EgressRules StoredEgressRules(const std::string& egress_json) {
  if (egress_json.empty()) return {};
  auto rules = ParseEgressRules(nlohmann::json::parse(egress_json, nullptr, false), "stored egress", {});
  if (!rules.ok()) {
    LogError("egress", "the stored rules do not parse; none apply", {{"error", rules.status().ToString()}});
    return {};
  }
  return *rules;
}

StatusOr<SandboxLimits> Admission::Limits(const UserCaps& caps, const CreateRequest& request) const {
  SandboxLimits limits;
  ASSIGN_OR_RETURN(limits.memory_bytes, Pick("memory_bytes", request.memory_bytes, config_.default_memory_bytes,
                                             caps.memory_bytes, config_.max_memory_bytes, 16ull << 20));
  ASSIGN_OR_RETURN(limits.cpu_millicores, Pick("cpus (millicores)", request.cpu_millicores,
                                               config_.default_cpu_millicores, caps.cpu_millicores,
                                               config_.max_cpu_millicores, 10));
  ASSIGN_OR_RETURN(limits.pids, Pick("pids", request.pids, config_.default_pids, caps.pids, config_.max_pids, 8));
  ASSIGN_OR_RETURN(limits.disk_bytes, Pick("disk_bytes", request.disk_bytes, config_.default_disk_bytes,
                                           caps.disk_bytes, config_.max_disk_bytes, 64ull << 20));
  return limits;
}

StatusOr<uint64_t> Admission::IdleTimeout(const UserCaps& caps, std::optional<uint64_t> requested) const {
  return Pick("idle_timeout_s", requested, config_.default_idle_timeout_s, caps.idle_timeout_s,
              config_.max_idle_timeout_s, 0);
}

StatusOr<EgressRules> Admission::EgressRulesFor(const UserCaps& caps, const std::string& requested,
                                                const std::string& current) const {
  // The token's caps: what it names, within the config's (an axis it does not name is the config's).
  EgressRules token_caps = config_.egress_allowed;
  if (!caps.egress_json.empty()) {
    ASSIGN_OR_RETURN(token_caps, ParseEgressRules(nlohmann::json::parse(caps.egress_json, nullptr, false),
                                                  "limits.egress", config_.egress_allowed));
  }
  if (requested.empty()) {
    return NarrowToCaps(NarrowToCaps(config_.egress_defaults, config_.egress_allowed), token_caps);
  }
  const nlohmann::json j = nlohmann::json::parse(requested, nullptr, false);
  EgressRules base = config_.egress_defaults;
  if (!current.empty()) {
    ASSIGN_OR_RETURN(base, ParseEgressRules(nlohmann::json::parse(current, nullptr, false), "stored egress", {}));
  }
  ASSIGN_OR_RETURN(EgressRules rules, ParseEgressRules(j, "egress", base));
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

StatusOr<SandboxRow> Admission::Insert(const Caller& caller, const UserCaps& caps, const SandboxRow& row) {
  uint64_t per_user = config_.max_sandboxes_per_user;
  if (caps.sandboxes && *caps.sandboxes < per_user) per_user = *caps.sandboxes;
  StatusOr<SandboxRow> created = Status::Error("unreachable");
  Status counted = store_.InTransaction([&]() -> Status {
    ASSIGN_OR_RETURN(int64_t mine, store_.CountSandboxes(caller.iss, caller.sub));
    if (static_cast<uint64_t>(mine) >= per_user) {
      return Status::Error("this user already has " + std::to_string(mine) + " sandboxes (the limit)", EDQUOT);
    }
    ASSIGN_OR_RETURN(auto all, store_.ListSandboxes());
    if (all.size() >= config_.max_sandboxes) {
      return Status::Error("the daemon holds its maximum of sandboxes", EDQUOT);
    }
    if (config_.max_sandboxes_per_issuer > 0 && !caller.admin) {
      const auto issuer = std::count_if(all.begin(), all.end(), [&](const SandboxRow& r) { return r.iss == caller.iss; });
      if (static_cast<uint64_t>(issuer) >= config_.max_sandboxes_per_issuer) {
        return Status::Error("the users of issuer " + caller.iss + " already have " + std::to_string(issuer) +
                                 " sandboxes (the issuer's limit)",
                             EDQUOT);
      }
    }
    created = store_.CreateSandbox(row, kUidFirst, kUidStep, kUidSlots);
    return created.status();
  });
  if (!counted.ok()) return counted;
  return created;
}

}  // namespace corral::supervisor
