#include "supervisor/relay/ledger.h"

#include "supervisor/relay/usage.h"

namespace corral::supervisor {

StatusOr<nlohmann::json> Ledger::Report(const std::string& iss, const std::string& sub, const Budget& budget,
                                        int64_t now, const std::map<std::string, int64_t>& unmetered_ms) const {
  return UsageReport(store_, iss, sub, budget, now, unmetered_ms);
}

StatusOr<LedgerPage> Ledger::Page(const LedgerQuery& query) const {
  LedgerPage page;
  // One more than asked tells whether there is a next page.
  ASSIGN_OR_RETURN(page.rows,
                   store_.ListLedger(query.iss, query.sub, query.from, query.to, query.after_id, query.limit + 1));
  page.more = static_cast<int64_t>(page.rows.size()) > query.limit;
  if (page.more) page.rows.resize(static_cast<size_t>(query.limit));
  return page;
}

}  // namespace corral::supervisor
