// `corral run` options: parsed into a SandboxSpec, with one-line errors that name the option.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "isolation/sandbox_spec.h"

namespace corral::cli {

struct RunOptions {
  isolation::SandboxSpec spec;
  std::optional<std::string> outcome_json;  // a path, or "-" for stderr
};

// Parses the arguments that follow `corral run`. Options take their value as the next argument
// or after '=' (--memory=64M). The command starts after "--" (or at the first non-option).
// Errors read "--memory: not a size: 'lots'" and nothing has been created yet.
StatusOr<RunOptions> ParseRunOptions(const std::vector<std::string>& args);

// The usage text of `corral run`.
const char* RunUsage();

}  // namespace corral::cli
