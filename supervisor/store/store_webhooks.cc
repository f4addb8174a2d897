// The store's webhook outbox (OutboxRow): deliveries recorded with their events, leased to one
// node at a time, finished, pruned.
#include <algorithm>
#include <ctime>
#include <mutex>

#include "supervisor/store/store.h"
#include "supervisor/store/store_sql.h"

namespace corral::supervisor {

using namespace store_internal;  // the store's own SQL helpers

namespace {

// Due: neither delivered nor given up, its time come, and no node's lease on it running.
constexpr std::string_view kDue =
    "delivered_at = 0 AND given_up_at = 0 AND next_attempt_ms <= ?2 AND lease_until_ms <= ?2";

}  // namespace

StatusOr<int64_t> Store::AppendEvent(const std::string& sandbox_id, const std::string& type,
                                     const std::string& data_json, const std::vector<OutboxRow>& outbox) {
  if (outbox.empty()) return AppendEvent(sandbox_id, type, data_json);
  const int64_t at = static_cast<int64_t>(time(nullptr));
  std::lock_guard lock(mu_);
  const std::string what = "append event " + type + " of " + sandbox_id;
  int64_t seq = 0;
  RETURN_IF_ERROR(InTransaction([&]() -> Status {
    ASSIGN_OR_RETURN(std::optional<int64_t> assigned,
                     QueryInt(db_,
                              "INSERT INTO events (sandbox_id, type, data_json, at) "
                              "VALUES (?1, ?2, ?3, ?4) RETURNING seq",
                              {sandbox_id, type, data_json, at}, what));
    if (!assigned) return Status::Error("store: " + what + ": no seq was assigned");
    seq = *assigned;
    return InsertOutbox(outbox);
  }));
  if (event_listener_) event_listener_(EventRow{seq, sandbox_id, type, data_json, at});
  return seq;
}

Status Store::InsertOutbox(const std::vector<OutboxRow>& rows) {
  if (rows.empty()) return Status();
  return InTransaction([&]() -> Status {
    for (const OutboxRow& row : rows) {
      RETURN_IF_ERROR(Run(db_,
                          Sql({"INSERT INTO webhook_outbox (", kOutboxColumns,
                               ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) "
                               "ON CONFLICT (id, url) DO NOTHING"}),
                          Values(row), "insert webhook " + row.id + " for " + row.url));
    }
    return Status();
  });
}

StatusOr<std::vector<OutboxRow>> Store::ClaimOutbox(int64_t now_ms, int64_t lease_ms, int64_t limit) {
  std::lock_guard lock(mu_);
  // One statement: on PostgreSQL (READ COMMITTED, outside a transaction) a node that finds a row
  // another node's statement is leasing waits for it, then checks the conditions again on the
  // row as that node left it (leased: skipped). So no row is ever held by two nodes at once.
  ASSIGN_OR_RETURN(std::vector<OutboxRow> rows,
                   Query<OutboxRow>(db_,
                                    Sql({"UPDATE webhook_outbox SET lease_node = ?1, lease_until_ms = ?3 WHERE ",
                                         kDue,
                                         " AND (id, url) IN (SELECT id, url FROM webhook_outbox WHERE ", kDue,
                                         " ORDER BY next_attempt_ms, created_at, id LIMIT ?4) RETURNING ",
                                         kOutboxColumns}),
                                    {node_id_, now_ms, now_ms + lease_ms, ClampLimit(limit)},
                                    "claim webhook deliveries"));
  std::sort(rows.begin(), rows.end(), [](const OutboxRow& a, const OutboxRow& b) {
    return std::tie(a.next_attempt_ms, a.created_at, a.id, a.url) <
           std::tie(b.next_attempt_ms, b.created_at, b.id, b.url);
  });
  return rows;
}

StatusOr<bool> Store::FinishOutboxAttempt(const OutboxAttempt& attempt) {
  std::lock_guard lock(mu_);
  ASSIGN_OR_RETURN(int64_t changed,
                   db_->Execute("UPDATE webhook_outbox SET attempts = attempts + 1, delivered_at = ?4, "
                                "given_up_at = ?5, next_attempt_ms = ?6, last_error = ?7, lease_node = '', "
                                "lease_until_ms = 0 WHERE id = ?1 AND url = ?2 AND lease_node = ?3 "
                                "AND delivered_at = 0 AND given_up_at = 0",
                                {attempt.id, attempt.url, node_id_, attempt.delivered ? attempt.at : int64_t{0},
                                 attempt.give_up && !attempt.delivered ? attempt.at : int64_t{0},
                                 attempt.next_attempt_ms, attempt.delivered ? std::string() : attempt.error},
                                "finish webhook " + attempt.id + " for " + attempt.url, nullptr));
  return changed > 0;
}

StatusOr<int64_t> Store::ReleaseOutboxLeases() {
  std::lock_guard lock(mu_);
  return db_->Execute("UPDATE webhook_outbox SET lease_node = '', lease_until_ms = 0 WHERE lease_node = ?1",
                      {node_id_}, "release node " + node_id_ + "'s webhook leases", nullptr);
}

StatusOr<int64_t> Store::PruneOutbox(int64_t before) {
  std::lock_guard lock(mu_);
  return db_->Execute("DELETE FROM webhook_outbox WHERE (delivered_at > 0 AND delivered_at < ?1) "
                      "OR (given_up_at > 0 AND given_up_at < ?1)",
                      {before}, "prune the webhook outbox", nullptr);
}

StatusOr<int64_t> Store::OutboxDepth() {
  std::lock_guard lock(mu_);
  ASSIGN_OR_RETURN(std::optional<int64_t> count,
                   QueryInt(db_, "SELECT COUNT(*) FROM webhook_outbox WHERE delivered_at = 0 AND given_up_at = 0", {},
                            "count the webhook outbox"));
  return count.value_or(0);
}

StatusOr<std::vector<OutboxRow>> Store::ListOutbox() {
  std::lock_guard lock(mu_);
  return Query<OutboxRow>(db_, Sql({"SELECT ", kOutboxColumns, " FROM webhook_outbox ORDER BY created_at, id, url"}),
                          {}, "list the webhook outbox");
}

StatusOr<LedgerRow> Store::SessionUsage(const std::string& session_id) {
  std::lock_guard lock(mu_);
  LedgerRow usage;
  RETURN_IF_ERROR(db_->Execute("SELECT COUNT(*), COALESCE(SUM(amount), 0), COALESCE(SUM(input_tokens), 0), "
                               "COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cache_write_tokens), 0), "
                               "COALESCE(SUM(cache_read_tokens), 0) FROM ledger WHERE session_id = ?1 AND kind = 'ai'",
                               {session_id}, "sum the usage of session " + session_id,
                               [&usage](const SqlRow& row) {
                                 usage.id = row.Int(0);
                                 usage.amount = row.Int(1);
                                 usage.input_tokens = row.Int(2);
                                 usage.output_tokens = row.Int(3);
                                 usage.cache_write_tokens = row.Int(4);
                                 usage.cache_read_tokens = row.Int(5);
                               })
                      .status());
  usage.session_id = session_id;
  usage.kind = "ai";
  return usage;
}

}  // namespace corral::supervisor
