// The ledger as the API reads it: a user's usage in the current window of their budget, and the
// operator's export, page by page. Over the store (store.h); the report's shape and the export's
// formats are usage.h's.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "supervisor/relay/budget.h"
#include "supervisor/store/store.h"

namespace corral::supervisor {

// The debits with from <= at < to, of one issuer (every one when "") and one user (every one when
// ""), after the row `after_id`, at most `limit` of them, by id.
struct LedgerQuery {
  std::string iss;
  std::string sub;
  int64_t from = 0;
  int64_t to = 0;
  int64_t after_id = 0;
  int64_t limit = 0;
};

struct LedgerPage {
  std::vector<LedgerRow> rows;
  bool more = false;  // rows past the last one match too: ask again with after_id = its id
};

class Ledger {
 public:
  explicit Ledger(Store& store) : store_(store) {}

  // UsageReport (usage.h) of the user (iss, sub) at `now`.
  StatusOr<nlohmann::json> Report(const std::string& iss, const std::string& sub, const Budget& budget, int64_t now,
                                  const std::map<std::string, int64_t>& unmetered_ms) const;

  // One page of the export.
  StatusOr<LedgerPage> Page(const LedgerQuery& query) const;

 private:
  Store& store_;
};

}  // namespace corral::supervisor
