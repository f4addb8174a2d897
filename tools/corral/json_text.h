// Reading and showing the daemon's JSON answers in the corral CLI: small helpers the commands
// share (one definition each, so the CLI's files can also be compiled as one unit).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace corral::cli {

// The string at `key` of a JSON object; "" when it is not an object, the key is missing or its
// value is not a string.
inline std::string StringAt(const nlohmann::json& object, const char* key) {
  if (!object.is_object() || !object.contains(key) || !object[key].is_string()) return "";
  return object[key].get<std::string>();
}

// Indented JSON and a newline, as `--json` prints it (invalid UTF-8 replaced, never thrown).
inline std::string Pretty(const nlohmann::json& value) {
  return value.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

// Left-aligned columns, three spaces apart; the last column is not padded.
inline std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size());
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      out += row[i];
      if (i + 1 < row.size()) out += std::string(widths[i] - row[i].size() + 3, ' ');
    }
    out += "\n";
  }
  return out;
}

}  // namespace corral::cli
