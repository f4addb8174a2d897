// The store's ledger.
#include "supervisor/store/store.h"

#include <cerrno>
#include <mutex>

#include "supervisor/store/store_sql.h"

namespace corral::supervisor {

using namespace store_internal;  // the store's own SQL helpers

namespace {

Status CheckLedgerKind(const std::string& kind) {
  if (kind == "ai" || kind == "compute") return Status();
  return Status::Error("store: ledger kind must be \"ai\" or \"compute\", not \"" + kind + "\"", EINVAL);
}

}  // namespace

StatusOr<int64_t> Store::AddLedger(const LedgerRow& row) {
  RETURN_IF_ERROR(CheckLedgerKind(row.kind));
  std::lock_guard lock(mu_);
  const std::string what = "add to the ledger of " + row.sub;
  ASSIGN_OR_RETURN(std::optional<int64_t> id,
                   QueryInt(db_,
                            Sql({"INSERT INTO ledger (", kLedgerColumns.substr(4),
                                 ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) RETURNING id"}),
                            {row.iss, row.sub, row.kind, row.amount, row.at, row.sandbox_id, row.session_id,
                             row.model, row.input_tokens, row.output_tokens, row.cache_write_tokens,
                             row.cache_read_tokens},
                            what));
  if (!id) return Status::Error("store: " + what + ": no id was assigned");
  return *id;
}

StatusOr<int64_t> Store::LedgerSum(const std::string& iss, const std::string& sub, const std::string& kind,
                                   int64_t from, int64_t to) {
  RETURN_IF_ERROR(CheckLedgerKind(kind));
  std::lock_guard lock(mu_);
  ASSIGN_OR_RETURN(std::optional<int64_t> sum,
                   QueryInt(db_,
                            "SELECT COALESCE(SUM(amount), 0) FROM ledger "
                            "WHERE iss = ?1 AND sub = ?2 AND kind = ?3 AND at >= ?4 AND at < ?5",
                            {iss, sub, kind, from, to}, "sum the ledger of " + sub));
  return sum.value_or(0);
}

StatusOr<std::vector<LedgerTotal>> Store::LedgerTotals(const std::string& iss, const std::string& sub,
                                                      int64_t from, int64_t to) {
  std::lock_guard lock(mu_);
  return Query<LedgerTotal>(db_,
                            "SELECT kind, sandbox_id, session_id, SUM(amount), COUNT(*) FROM ledger "
                            "WHERE iss = ?1 AND sub = ?2 AND at >= ?3 AND at < ?4 "
                            "GROUP BY kind, sandbox_id, session_id ORDER BY kind, sandbox_id, session_id",
                            {iss, sub, from, to}, "sum the ledger of " + sub);
}

StatusOr<std::vector<LedgerRow>> Store::ListLedger(const std::string& iss, const std::string& sub, int64_t from,
                                                   int64_t to, int64_t after_id, int64_t limit) {
  std::lock_guard lock(mu_);
  // Empty iss: every issuer; empty sub: every user of the issuer.
  return Query<LedgerRow>(db_,
                          Sql({"SELECT ", kLedgerColumns,
                               " FROM ledger WHERE (?1 = '' OR iss = ?1) AND (?2 = '' OR sub = ?2) "
                               "AND at >= ?3 AND at < ?4 AND id > ?5 ORDER BY id LIMIT ?6"}),
                          {iss, sub, from, to, after_id, limit}, "list the ledger");
}

}  // namespace corral::supervisor
