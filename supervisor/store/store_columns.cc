#include "supervisor/store/store_columns.h"

#include <nlohmann/json.hpp>

#include "common/log.h"

namespace corral::supervisor::store_internal {
namespace {

using Limit = std::optional<uint64_t> isolation::ResourceLimits::*;

struct LimitColumn {
  const char* key;
  Limit field;
};

constexpr LimitColumn kLimitColumns[] = {
    {"memory_bytes", &isolation::ResourceLimits::memory_bytes},
    {"cpu_millicores", &isolation::ResourceLimits::cpu_millicores},
    {"pids", &isolation::ResourceLimits::pids},
    {"disk_bytes", &isolation::ResourceLimits::disk_bytes},
};

}  // namespace

std::string LimitsColumn(const isolation::ResourceLimits& limits) {
  nlohmann::json j = nlohmann::json::object();
  for (const LimitColumn& column : kLimitColumns) {
    if (const auto& value = limits.*column.field) j[column.key] = *value;
  }
  return j.dump();
}

isolation::ResourceLimits LimitsOfColumn(std::string_view text) {
  isolation::ResourceLimits limits;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) {
    LogError("store", "a sandbox's stored limits do not parse; none apply", {{"limits", std::string(text)}});
    return limits;
  }
  for (const LimitColumn& column : kLimitColumns) {
    auto it = j.find(column.key);
    if (it != j.end() && it->is_number_unsigned()) limits.*column.field = it->get<uint64_t>();
  }
  return limits;
}

std::string EgressColumn(const std::optional<EgressRules>& rules) {
  return rules ? EgressRulesJson(*rules).dump() : std::string();
}

std::optional<EgressRules> EgressOfColumn(std::string_view text) {
  if (text.empty()) return std::nullopt;
  auto rules = ParseEgressRules(nlohmann::json::parse(text, nullptr, false), "stored egress", {});
  if (!rules.ok()) {
    LogError("egress", "the stored rules do not parse; none apply", {{"error", rules.status().ToString()}});
    return EgressRules{};
  }
  return *rules;
}

std::string NamesColumn(const std::vector<std::string>& names) { return nlohmann::json(names).dump(); }

std::vector<std::string> NamesOfColumn(std::string_view text) {
  if (text.empty()) return {};
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  std::vector<std::string> names;
  if (j.is_array()) {
    for (const auto& name : j) {
      if (name.is_string()) names.push_back(name.get<std::string>());
    }
  }
  if (!j.is_array() || names.size() != j.size()) LogError("store", "a stored list of names does not parse; read as far as it does");
  return names;
}

std::string ImageConfigColumn(const rootfs::ImageConfig& config) {
  return nlohmann::json{{"env", config.env},
                        {"working_dir", config.working_dir},
                        {"user", config.user},
                        {"architecture", config.architecture},
                        {"os", config.os}}
      .dump();
}

rootfs::ImageConfig ImageConfigOfColumn(std::string_view text) {
  rootfs::ImageConfig config;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) {
    LogError("store", "an image's stored config does not parse; it reads as empty", {{"config", std::string(text)}});
    return config;
  }
  if (auto env = j.find("env"); env != j.end() && env->is_array()) {
    for (const auto& item : *env) {
      if (item.is_string()) config.env.push_back(item.get<std::string>());
    }
  }
  for (auto [key, field] : {std::pair{"working_dir", &config.working_dir}, std::pair{"user", &config.user},
                            std::pair{"architecture", &config.architecture}, std::pair{"os", &config.os}}) {
    if (auto it = j.find(key); it != j.end() && it->is_string()) *field = it->get<std::string>();
  }
  return config;
}

}  // namespace corral::supervisor::store_internal
