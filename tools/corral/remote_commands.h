// `corral sandbox ...`, `corral admin issuer ...` and `corral token mint`: one HTTP request each
// (docs/PROTOCOL.md, "Sandboxes" and "Admin"), printed for people or, with --json, for scripts.
//
// The request builders and formatters are pure; the Run* functions print to stdout/stderr and
// return the exit code: 0, or 1 when corrald refused or could not be reached ("corral: <message>
// (<code>)" on stderr).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "tools/corral/remote_options.h"

namespace corral::cli {

// The body of POST /v1/sandboxes for `sandbox create`.
nlohmann::json BuildCreateSandboxRequest(const SandboxOptions& options);
// {"domains", "ports", "cidrs"} from --allow-*; only the fields given (empty: none given).
nlohmann::json BuildEgressRules(const SandboxOptions& options);
// One line of `corral sandbox events`: "SEQ TYPE ..." (egress decisions spelled out).
std::string FormatEvent(const nlohmann::json& event);

// The body of POST /v1/admin/tokens for `token mint`.
nlohmann::json BuildMintTokenRequest(const AdminOptions& options);

// "ID NAME STATE IMAGE CREATED" with one row per sandbox, CREATED relative to `now` (unix s).
std::string FormatSandboxTable(const nlohmann::json& sandboxes, int64_t now);
// "ID SANDBOX SIZE CREATED", SIZE the space on the host in MiB (rounded up).
std::string FormatSnapshotTable(const nlohmann::json& snapshots, int64_t now);

// "just now", "1 minute ago", "3 hours ago", "12 days ago".
std::string FormatAge(int64_t seconds);

int RunSandboxCommand(const SandboxOptions& options);
int RunAdminCommand(const AdminOptions& options);  // admin issuer ... and token mint

}  // namespace corral::cli
