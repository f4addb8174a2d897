// The store's ledger, and the holds model calls in flight take on it.
#include "supervisor/store/store.h"

#include <cerrno>
#include <mutex>
#include <optional>
#include <string>

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

// ---- Budget holds

StatusOr<BudgetHoldAnswer> Store::AdmitBudgetHold(const BudgetHoldRequest& request) {
  const std::string what = "admit a model call of " + request.sub;
  BudgetHoldAnswer answer;
  Status status = InLockedTransaction([&]() -> Status {
    answer = BudgetHoldAnswer{};
    int64_t stale = 0;
    // The user's turn: the admissions of the user's calls on every node write this row first
    // and wait for one another's commit here, so that each reads what the one before wrote.
    // (SERIALIZABLE would serialize them too, but its predicate locks on the small budget_holds
    // table span every user's holds: concurrent admissions of different users would run again.)
    RETURN_IF_ERROR(Run(db_,
                        "INSERT INTO budget_users (iss, sub) VALUES (?1, ?2) "
                        "ON CONFLICT (iss, sub) DO UPDATE SET iss = excluded.iss",
                        {request.iss, request.sub}, what + ": take the user's turn"));
    // Then one statement (one snapshot) for what the decision reads: the window's spending, the
    // live holds, and whether stale ones are left to delete.
    RETURN_IF_ERROR(db_->Execute(
                           "SELECT (SELECT COALESCE(SUM(amount), 0) FROM ledger WHERE iss = ?1 AND sub = ?2 "
                           "AND kind = 'ai' AND at >= ?3 AND at < ?4), "
                           "(SELECT COUNT(*) FROM budget_holds WHERE iss = ?1 AND sub = ?2 AND created_at >= ?5), "
                           "(SELECT COALESCE(SUM(micro_usd), 0) FROM budget_holds "
                           "WHERE iss = ?1 AND sub = ?2 AND created_at >= ?5), "
                           "(SELECT COUNT(*) FROM budget_holds WHERE iss = ?1 AND sub = ?2 AND created_at < ?5)",
                           {request.iss, request.sub, request.window.start, request.window.end, request.stale_before},
                           what,
                           [&](const SqlRow& row) {
                             answer.state.spent = row.Int(0);
                             answer.state.held_calls = row.Int(1);
                             answer.state.held_micro_usd = row.Int(2);
                             stale = row.Int(3);
                           })
                        .status());
    if (stale > 0) {
      RETURN_IF_ERROR(Run(db_, "DELETE FROM budget_holds WHERE iss = ?1 AND sub = ?2 AND created_at < ?3",
                          {request.iss, request.sub, request.stale_before}, what + ": delete stale holds"));
    }
    answer.verdict = DecideHold(answer.state, request.micro_usd, request.limit_micro_usd);
    if (answer.verdict != HoldVerdict::kAdmit) return Status();
    ASSIGN_OR_RETURN(std::optional<int64_t> id,
                     QueryInt(db_,
                              "INSERT INTO budget_holds (iss, sub, node_id, micro_usd, created_at) "
                              "VALUES (?1, ?2, ?3, ?4, ?5) RETURNING id",
                              {request.iss, request.sub, node_id_, request.micro_usd, request.now}, what));
    if (!id) return Status::Error("store: " + what + ": no id was assigned");
    answer.hold_id = *id;
    return Status();
  });
  if (!status.ok()) return status;
  return answer;
}

StatusOr<int64_t> Store::SettleBudgetHold(int64_t hold_id, const LedgerRow& row) {
  int64_t ledger_id = 0;
  Status status = InTransaction([&]() -> Status {
    RETURN_IF_ERROR(Run(db_, "DELETE FROM budget_holds WHERE id = ?1", {hold_id},
                        "settle the hold " + std::to_string(hold_id)));
    ASSIGN_OR_RETURN(ledger_id, AddLedger(row));
    return Status();
  });
  if (!status.ok()) return status;
  return ledger_id;
}

Status Store::ReleaseBudgetHold(int64_t hold_id) {
  std::lock_guard lock(mu_);
  return Run(db_, "DELETE FROM budget_holds WHERE id = ?1", {hold_id}, "release the hold " + std::to_string(hold_id));
}

StatusOr<int64_t> Store::ReleaseNodeBudgetHolds() {
  std::lock_guard lock(mu_);
  return db_->Execute("DELETE FROM budget_holds WHERE node_id = ?1", {node_id_},
                      "release the holds of node " + node_id_, nullptr);
}

}  // namespace corral::supervisor
