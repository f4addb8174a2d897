// `corral execute` and `corral git`: headless executions and git out of a sandbox
// (docs/PROTOCOL.md, "Headless execute" and "Git").
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "tools/corral/remote_options.h"

namespace corral::cli {

// Bundles --repo (a work tree: `git bundle create - --all`; a file: its bytes), posts the task,
// waits for the execution to end, writes DIR/result.json and DIR/changes.bundle and prints the
// summary, the files changed, the cost and how to fetch the changes. Exit: 0 completed, 1
// failed, 2 refused (or corrald unreachable, or the repository could not be bundled).
int RunExecuteCommand(const ExecuteOptions& options);

// git diff: prints the patch (or the JSON); git bundle: writes FILE. Exit 0, or 1 on an error.
int RunGitCommand(const GitOptions& options);

// For people: the summary, the files changed, the cost and where the results are. Pure; tested.
std::string FormatExecution(const nlohmann::json& record, const std::string& out_dir, bool have_bundle);

// Standard base64 with padding (what POST /v1/execute takes for a bundle): common/base64.h's.
std::string EncodeBase64(std::string_view bytes);

}  // namespace corral::cli
