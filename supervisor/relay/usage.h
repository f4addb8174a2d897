// What users spent: the usage report of GET /v1/usage (one user, the current window of the
// budget in their token) and the rows of the operator's export (GET /v1/admin/usage, corral admin
// usage), as JSON lines or CSV. Amounts come from the ledger (store.h): AI in micro-dollars,
// shown as decimal dollars; compute in CPU milliseconds, shown as seconds. The report adds the
// compute running sandboxes counted since their last debit; the export is the debits alone (it
// trails a running sandbox by at most one metering interval, and never counts anything twice).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "supervisor/relay/budget.h"
#include "supervisor/store/store.h"

namespace corral::supervisor {

// {"window": {"name", "start", "end"},
//  "ai": {"spent_usd", "budget_usd" (null: none), "remaining_usd" (null: none), "calls"},
//  "compute": {"spent_s", "budget_s" (null: not limited), "remaining_s" (null)},
//  "sessions": [{"session", "sandbox", "cost_usd", "calls"}],
//  "sandboxes": [{"sandbox", "compute_s"}]}
// Compute is the ledger's debits in the window plus `unmetered_ms` (by sandbox: CPU time its
// running cgroup counted that the meter has not debited yet, SandboxManager::UnmeteredCompute),
// so a report made right after a command shows its CPU time.
StatusOr<nlohmann::json> UsageReport(Store& store, const std::string& iss, const std::string& sub,
                                     const Budget& budget, int64_t now,
                                     const std::map<std::string, int64_t>& unmetered_ms = {});

// One ledger row as exported: {"id", "at", "iss", "sub", "kind", "amount", "unit", "sandbox",
// "session", "model", "input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens"}
// (unit: "micro_usd" or "cpu_ms").
nlohmann::json LedgerRowJson(const LedgerRow& row);
// The same columns as CSV (RFC 4180: fields with a comma, quote or line break are quoted).
std::string LedgerCsvHeader();
std::string LedgerCsvLine(const LedgerRow& row);

}  // namespace corral::supervisor
