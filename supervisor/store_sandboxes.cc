// The store's sandboxes (with their uid ranges) and snapshots.
#include "supervisor/store.h"

#include <cerrno>
#include <mutex>

#include "supervisor/store_sqlite.h"

namespace corral::supervisor {

using namespace store_internal;  // the store's own SQLite helpers

// ---------------------------------------------------------------------------------------------
// Sandboxes and their uid ranges

StatusOr<SandboxRow> Store::CreateSandbox(SandboxRow row, int64_t uid_first, int64_t uid_step,
                                          int64_t slots) {
  // Every range must lie below (uid_t)-1, which is no uid. That also keeps the arithmetic below
  // far from int64 overflow, where SQLite would silently switch to floating point.
  constexpr int64_t kUidLimit = 0xFFFFFFFF;
  if (uid_first < 0 || uid_step <= 0 || slots < 0 || uid_first >= kUidLimit ||
      uid_step >= kUidLimit || slots > (kUidLimit - uid_first) / uid_step) {
    return Status::Error("store: create sandbox: invalid uid range", EINVAL);
  }
  const int64_t uid_end = uid_first + slots * uid_step;
  // The lowest free slot is either the first one or the one right after a taken slot, so the
  // candidates are uid_first and every on-grid uid_base + uid_step. NOT IN is safe here only
  // because uid_base is NOT NULL (one NULL in the list would make NOT IN never true).
  static constexpr std::string_view kLowestFreeUidBase = R"sql(
    SELECT MIN(candidate) FROM (
      SELECT ?1 AS candidate
      UNION ALL
      SELECT uid_base + ?2 FROM sandboxes
       WHERE uid_base >= ?1 AND uid_base < ?3 AND (uid_base - ?1) % ?2 = 0)
    WHERE candidate < ?3 AND candidate NOT IN (SELECT uid_base FROM sandboxes))sql";

  std::lock_guard lock(mu_);
  Status status = InTransaction([&]() -> Status {
    ASSIGN_OR_RETURN(
        std::optional<int64_t> uid_base,
        QueryInt(db_, kLowestFreeUidBase, {uid_first, uid_step, uid_end}, "find a free uid range"));
    if (!uid_base) {
      return Status::Error(
          "store: create sandbox: all " + std::to_string(slots) + " uid ranges are in use", ENOSPC);
    }
    row.uid_base = *uid_base;
    return Run(db_,
               Sql({"INSERT INTO sandboxes (", kSandboxColumns,
                    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)"}),
               Values(row), "insert sandbox " + row.id);
  });
  if (!status.ok()) return status;
  return row;
}

Status Store::UpdateSandbox(const SandboxRow& row) {
  std::vector<Value> values = Values(row);
  // Not network (fixed at create time), nor egress_json, which SetSandboxEgress alone writes: a
  // row read before a change must not undo it.
  values.resize(17);
  std::lock_guard lock(mu_);
  return RunOnExistingRow(
      db_,
      "UPDATE sandboxes SET iss = ?2, sub = ?3, name = ?4, image = ?5, state = ?6, "
      "limits_json = ?7, idle_timeout_s = ?8, uid_base = ?9, created_at = ?10, updated_at = ?11, "
      "last_active_at = ?12, init_pid = ?13, init_start_time = ?14, source = ?15, budget_json = ?16, "
      "cpu_billed_usec = ?17 WHERE id = ?1",
      values, "update sandbox " + row.id);
}

Status Store::SetSandboxEgress(const std::string& id, const std::string& egress_json) {
  std::lock_guard lock(mu_);
  return RunOnExistingRow(db_, "UPDATE sandboxes SET egress_json = ?2 WHERE id = ?1", {id, egress_json},
                          "set the egress rules of sandbox " + id);
}

StatusOr<std::optional<SandboxRow>> Store::GetSandbox(const std::string& id) {
  std::lock_guard lock(mu_);
  return QueryOne<SandboxRow>(db_,
                              Sql({"SELECT ", kSandboxColumns, " FROM sandboxes WHERE id = ?1"}),
                              {id}, "get sandbox " + id);
}

// Oldest first; rowid (insertion order) breaks ties between sandboxes created in one second.
StatusOr<std::vector<SandboxRow>> Store::ListSandboxes(const std::string& iss,
                                                       const std::string& sub) {
  std::lock_guard lock(mu_);
  if (iss.empty()) {
    return Query<SandboxRow>(
        db_, Sql({"SELECT ", kSandboxColumns, " FROM sandboxes ORDER BY created_at, rowid"}), {},
        "list sandboxes");
  }
  return Query<SandboxRow>(db_,
                           Sql({"SELECT ", kSandboxColumns,
                                " FROM sandboxes WHERE iss = ?1 AND sub = ?2 "
                                "ORDER BY created_at, rowid"}),
                           {iss, sub}, "list sandboxes of " + iss + " " + sub);
}

StatusOr<int64_t> Store::CountSandboxes(const std::string& iss, const std::string& sub) {
  std::lock_guard lock(mu_);
  ASSIGN_OR_RETURN(std::optional<int64_t> count,
                   QueryInt(db_, "SELECT COUNT(*) FROM sandboxes WHERE iss = ?1 AND sub = ?2",
                            {iss, sub}, "count sandboxes"));
  return count.value_or(0);
}

Status Store::DeleteSandbox(const std::string& id) {
  std::lock_guard lock(mu_);
  return RunOnExistingRow(db_, "DELETE FROM sandboxes WHERE id = ?1", {id}, "delete sandbox " + id);
}

// ---------------------------------------------------------------------------------------------
// Snapshots

Status Store::InsertSnapshot(const SnapshotRow& row) {
  std::lock_guard lock(mu_);
  return Run(
      db_,
      Sql({"INSERT INTO snapshots (", kSnapshotColumns, ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"}),
      Values(row), "insert snapshot " + row.id);
}

StatusOr<std::optional<SnapshotRow>> Store::GetSnapshot(const std::string& id) {
  std::lock_guard lock(mu_);
  return QueryOne<SnapshotRow>(db_,
                               Sql({"SELECT ", kSnapshotColumns, " FROM snapshots WHERE id = ?1"}),
                               {id}, "get snapshot " + id);
}

StatusOr<std::vector<SnapshotRow>> Store::ListSnapshots(const std::string& iss,
                                                        const std::string& sub) {
  std::lock_guard lock(mu_);
  return Query<SnapshotRow>(db_,
                            Sql({"SELECT ", kSnapshotColumns,
                                 " FROM snapshots WHERE iss = ?1 AND sub = ?2 "
                                 "ORDER BY created_at, rowid"}),
                            {iss, sub}, "list snapshots of " + iss + " " + sub);
}

Status Store::DeleteSnapshot(const std::string& id) {
  std::lock_guard lock(mu_);
  return RunOnExistingRow(db_, "DELETE FROM snapshots WHERE id = ?1", {id},
                          "delete snapshot " + id);
}

StatusOr<int64_t> Store::CountSnapshots(const std::string& iss, const std::string& sub) {
  std::lock_guard lock(mu_);
  ASSIGN_OR_RETURN(std::optional<int64_t> count,
                   QueryInt(db_, "SELECT COUNT(*) FROM snapshots WHERE iss = ?1 AND sub = ?2",
                            {iss, sub}, "count snapshots"));
  return count.value_or(0);
}

}  // namespace corral::supervisor
