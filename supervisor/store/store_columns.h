// The store's encoding of its typed columns (internal to the store's .cc files): the rows hold
// ResourceLimits, EgressRules and Budget; their columns hold the JSON text they have always held,
// so a database written before reads the same and the schema does not change.
//   limits_json  {"memory_bytes", "cpu_millicores", "pids", "disk_bytes"}: the limits that are set
//                ("{}": none). Only these four are kept (a sandbox's limits are no others).
//   egress_json  {"domains", "ports", "cidrs"} (egress_policy.h's EgressRulesJson); "": none kept.
//   budget_json  budget.h's BudgetToJson / BudgetFromJson.
//   secrets_json a sandbox's secrets' names: ["GITHUB_TOKEN", ...].
//   config_json  an image's config: {"env": [...], "working_dir", "user", "architecture", "os"}.
// Text that does not decode (written by hand, or by a bug) reads as nothing set, and is logged.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "isolation/resource_limits.h"
#include "rootfs/oci_archive.h"
#include "supervisor/relay/budget.h"
#include "supervisor/egress/egress_policy.h"

namespace corral::supervisor::store_internal {

std::string LimitsColumn(const isolation::ResourceLimits& limits);
isolation::ResourceLimits LimitsOfColumn(std::string_view text);

std::string EgressColumn(const std::optional<EgressRules>& rules);
std::optional<EgressRules> EgressOfColumn(std::string_view text);

// A list of names (a sandbox's secrets_json): a JSON array of strings; "" and "[]" are none.
std::string NamesColumn(const std::vector<std::string>& names);
std::vector<std::string> NamesOfColumn(std::string_view text);

std::string ImageConfigColumn(const rootfs::ImageConfig& config);
rootfs::ImageConfig ImageConfigOfColumn(std::string_view text);

}  // namespace corral::supervisor::store_internal
