// The store's sandboxes (with their uid ranges) and snapshots.
#include "supervisor/store/store.h"

#include <cerrno>
#include <mutex>

#include "supervisor/store/store_sql.h"

namespace corral::supervisor {

using namespace store_internal;  // the store's own SQL helpers

// ---------------------------------------------------------------------------------------------
// Sandboxes and their uid ranges

namespace {

// Every range must lie below (uid_t)-1, which is no uid. That also keeps the arithmetic below
// far from int64 overflow, where SQLite would silently switch to floating point.
Status CheckUidRange(int64_t uid_first, int64_t uid_step, int64_t slots) {
  constexpr int64_t kUidLimit = 0xFFFFFFFF;
  if (uid_first < 0 || uid_step <= 0 || slots < 0 || uid_first >= kUidLimit || uid_step >= kUidLimit ||
      slots > (kUidLimit - uid_first) / uid_step) {
    return Status::Error("store: invalid uid range", EINVAL);
  }
  return Status();
}

// The lowest free slot of a node is either the first one or the one right after a taken slot, so
// the candidates are uid_first and every on-grid uid_base + uid_step. NOT IN is safe here only
// because uid_base is NOT NULL (one NULL in the list would make NOT IN never true).
StatusOr<int64_t> LowestFreeUidBase(SqlDb* db, const std::string& node_id, int64_t uid_first, int64_t uid_step,
                                    int64_t slots) {
  static constexpr std::string_view kLowestFreeUidBase = R"sql(
    SELECT MIN(candidate) FROM (
      SELECT ?1 AS candidate
      UNION ALL
      SELECT uid_base + ?2 FROM sandboxes
       WHERE node_id = ?4 AND uid_base >= ?1 AND uid_base < ?3 AND (uid_base - ?1) % ?2 = 0) AS candidates
    WHERE candidate < ?3 AND candidate NOT IN (SELECT uid_base FROM sandboxes WHERE node_id = ?4))sql";
  const int64_t uid_end = uid_first + slots * uid_step;
  ASSIGN_OR_RETURN(std::optional<int64_t> uid_base,
                   QueryInt(db, kLowestFreeUidBase, {uid_first, uid_step, uid_end, node_id}, "find a free uid range"));
  if (!uid_base) return Status::Error("store: all " + std::to_string(slots) + " uid ranges are in use", ENOSPC);
  return *uid_base;
}

}  // namespace

StatusOr<SandboxRow> Store::CreateSandbox(SandboxRow row, int64_t uid_first, int64_t uid_step,
                                          int64_t slots) {
  RETURN_IF_ERROR(CheckUidRange(uid_first, uid_step, slots));
  std::lock_guard lock(mu_);
  Status status = InTransaction([&]() -> Status {
    ASSIGN_OR_RETURN(row.uid_base, LowestFreeUidBase(db_, node_id_, uid_first, uid_step, slots));
    row.node_id = node_id_;
    return Run(db_, InsertSql(kSandboxes.name, kSandboxes.columns), Values(row), "insert sandbox " + row.id);
  });
  if (!status.ok()) return status;
  return row;
}

StatusOr<int64_t> Store::FreeUidBase(int64_t uid_first, int64_t uid_step, int64_t slots) {
  RETURN_IF_ERROR(CheckUidRange(uid_first, uid_step, slots));
  std::lock_guard lock(mu_);
  return LowestFreeUidBase(db_, node_id_, uid_first, uid_step, slots);
}

StatusOr<bool> Store::TakeSandbox(const std::string& id, const std::string& from_node, int64_t uid_base,
                                  int64_t now) {
  bool taken = false;
  std::lock_guard lock(mu_);
  Status status = InTransaction([&]() -> Status {
    taken = false;
    // Asked first rather than left to the unique key: PostgreSQL runs a transaction that broke an
    // allocation key again (sql_postgres.cc), and this one would break it every time.
    ASSIGN_OR_RETURN(std::optional<int64_t> holder,
                     QueryInt(db_, "SELECT COUNT(*) FROM sandboxes WHERE node_id = ?1 AND uid_base = ?2",
                              {node_id_, uid_base}, "look at uid range " + std::to_string(uid_base)));
    if (holder.value_or(0) != 0) {
      return Status::Error("store: uid range " + std::to_string(uid_base) + " of node " + node_id_ + " is taken",
                           EEXIST);
    }
    ASSIGN_OR_RETURN(int64_t changed,
                     db_->Execute("UPDATE sandboxes SET node_id = ?1, uid_base = ?2, updated_at = ?3 "
                                  "WHERE id = ?4 AND node_id = ?5 AND state = 'stopped'",
                                  {node_id_, uid_base, now, id, from_node}, "take sandbox " + id, nullptr));
    taken = changed == 1;
    return Status();
  });
  if (!status.ok()) return status;
  return taken;
}

Status Store::UpdateSandbox(const SandboxRow& row) {
  std::vector<Value> values = Values(row);
  // Not network (fixed at create time), nor egress, which SetSandboxEgress alone writes: a
  // row read before a change must not undo it.
  constexpr size_t kUpdated = 17;  // id ... cpu_billed_usec
  values.resize(kUpdated);
  std::lock_guard lock(mu_);
  return RunOnExistingRow(db_, UpdateSql(kSandboxes.name, kSandboxes.columns, kUpdated), values, "update sandbox " + row.id);
}

Status Store::SetSandboxEgress(const std::string& id, const EgressRules& rules) {
  std::lock_guard lock(mu_);
  return RunOnExistingRow(db_, "UPDATE sandboxes SET egress_json = ?2 WHERE id = ?1", {id, ToValue(std::optional(rules))},
                          "set the egress rules of sandbox " + id);
}

Status Store::SetSandboxSecrets(const std::string& id, const std::vector<std::string>& names) {
  std::lock_guard lock(mu_);
  return RunOnExistingRow(db_, "UPDATE sandboxes SET secrets_json = ?2 WHERE id = ?1", {id, ToValue(names)},
                          "set the secrets of sandbox " + id);
}

StatusOr<std::optional<SandboxRow>> Store::GetSandbox(const std::string& id) {
  return GetRow<SandboxRow>(mu_, db_, kSandboxes, id);
}

StatusOr<std::vector<SandboxRow>> Store::ListSandboxes(const std::string& iss, const std::string& sub) {
  if (iss.empty()) return ListRows<SandboxRow>(mu_, db_, kSandboxes, "TRUE", {}, "list sandboxes");
  return ListRows<SandboxRow>(mu_, db_, kSandboxes, "iss = ?1 AND sub = ?2", {iss, sub},
                              "list sandboxes of " + iss + " " + sub);
}

StatusOr<std::vector<SandboxRow>> Store::ListNodeSandboxes() {
  return ListRows<SandboxRow>(mu_, db_, kSandboxes, "node_id = ?1", {node_id_}, "list the sandboxes of node " + node_id_);
}

StatusOr<int64_t> Store::CountSandboxes(const std::string& iss, const std::string& sub) {
  return CountOwned(mu_, db_, kSandboxes, iss, sub);
}

StatusOr<int64_t> Store::CountAllSandboxes(const std::string& iss) {
  std::lock_guard lock(mu_);
  ASSIGN_OR_RETURN(std::optional<int64_t> count,
                   iss.empty() ? QueryInt(db_, "SELECT COUNT(*) FROM sandboxes WHERE node_id = ?1", {node_id_},
                                          "count the sandboxes of node " + node_id_)
                               : QueryInt(db_, "SELECT COUNT(*) FROM sandboxes WHERE iss = ?1", {iss},
                                          "count sandboxes of issuer " + iss));
  return count.value_or(0);
}

Status Store::DeleteSandbox(const std::string& id) { return DeleteRow(mu_, db_, kSandboxes, id); }

// ---------------------------------------------------------------------------------------------
// Snapshots

Status Store::InsertSnapshot(const SnapshotRow& row) {
  SnapshotRow ours = row;
  ours.node_id = node_id_;
  return InsertRow(mu_, db_, kSnapshots, ours);
}

StatusOr<std::optional<SnapshotRow>> Store::GetSnapshot(const std::string& id) {
  return GetRow<SnapshotRow>(mu_, db_, kSnapshots, id);
}

StatusOr<std::vector<SnapshotRow>> Store::ListSnapshots(const std::string& iss, const std::string& sub) {
  return ListRows<SnapshotRow>(mu_, db_, kSnapshots, "iss = ?1 AND sub = ?2", {iss, sub},
                               "list snapshots of " + iss + " " + sub);
}

StatusOr<std::vector<SnapshotRow>> Store::ListNodeSnapshots() {
  return ListRows<SnapshotRow>(mu_, db_, kSnapshots, "node_id = ?1", {node_id_}, "list the snapshots of node " + node_id_);
}

StatusOr<bool> Store::TakeSnapshot(const std::string& id, const std::string& from_node) {
  std::lock_guard lock(mu_);
  ASSIGN_OR_RETURN(int64_t changed, db_->Execute("UPDATE snapshots SET node_id = ?1 WHERE id = ?2 AND node_id = ?3",
                                                 {node_id_, id, from_node}, "take snapshot " + id, nullptr));
  return changed == 1;
}

Status Store::DeleteSnapshot(const std::string& id) { return DeleteRow(mu_, db_, kSnapshots, id); }

StatusOr<int64_t> Store::CountSnapshots(const std::string& iss, const std::string& sub) {
  return CountOwned(mu_, db_, kSnapshots, iss, sub);
}

}  // namespace corral::supervisor
