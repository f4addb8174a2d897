// The store's nodes: the corralds of a fleet (one, in a SQLite store).
#include <mutex>

#include "supervisor/store/store.h"
#include "supervisor/store/store_sql.h"

namespace corral::supervisor {

using namespace store_internal;  // the store's own SQL helpers

Status Store::RegisterNode(const NodeRow& row) {
  std::lock_guard lock(mu_);
  return Run(db_,
             Sql({"INSERT INTO nodes (", kNodeColumns,
                  ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) ON CONFLICT (id) DO UPDATE SET "
                  "address = excluded.address, version = excluded.version, started_at = excluded.started_at, "
                  "heartbeat_at = excluded.heartbeat_at, max_sandboxes = excluded.max_sandboxes, "
                  "sandboxes = excluded.sandboxes, memory_total = excluded.memory_total, "
                  "memory_available = excluded.memory_available"}),
             Values(row), "register node " + row.id);
}

Status Store::HeartbeatNode(const std::string& id, int64_t at_ms, int64_t sandboxes, int64_t memory_available) {
  std::lock_guard lock(mu_);
  return RunOnExistingRow(db_,
                          "UPDATE nodes SET heartbeat_at = ?2, sandboxes = ?3, memory_available = ?4 WHERE id = ?1",
                          {id, at_ms, sandboxes, memory_available}, "heartbeat of node " + id);
}

StatusOr<std::optional<NodeRow>> Store::GetNode(const std::string& id) {
  std::lock_guard lock(mu_);
  return QueryOne<NodeRow>(db_, GetSql("nodes", kNodeColumns), {id}, "get node " + id);
}

StatusOr<std::vector<NodeRow>> Store::ListNodes() {
  std::lock_guard lock(mu_);
  return Query<NodeRow>(db_, Sql({"SELECT ", kNodeColumns, " FROM nodes ORDER BY id"}), {}, "list nodes");
}

Status Store::SetNodeDrained(const std::string& id, int64_t drained) {
  if (drained != kNodeOpen && drained != kNodeDrained && drained != kNodeMovingOut) {
    return Status::Error("store: drain node " + id + ": no such drain state " + std::to_string(drained), EINVAL);
  }
  std::lock_guard lock(mu_);
  return RunOnExistingRow(db_, "UPDATE nodes SET drained = ?2 WHERE id = ?1", {id, drained},
                          (drained != kNodeOpen ? "drain node " : "undrain node ") + id);
}

// A SQLite store is one node's: rows written before there were nodes (node_id ''), or under
// another node id (the host renamed, node.id changed), are this node's.
Status Store::ClaimEveryRow() {
  return InTransaction([this]() -> Status {
    for (const char* table : {"sandboxes", "snapshots", "executions", "budget_holds"}) {
      RETURN_IF_ERROR(Run(db_, std::string("UPDATE ") + table + " SET node_id = ?1 WHERE node_id <> ?1", {node_id_},
                          std::string("claim the rows of ") + table + " for node " + node_id_));
    }
    return Status();
  });
}

}  // namespace corral::supervisor
