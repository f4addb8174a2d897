// The store's checkpoints of agent sessions (store.h CheckpointRow).
#include <mutex>

#include "supervisor/store/store.h"
#include "supervisor/store/store_sql.h"

namespace corral::supervisor {

using namespace store_internal;  // the store's own SQL helpers

namespace {

constexpr std::string_view kCheckpointColumns =
    "id, session_id, sandbox_id, snapshot_id, iss, sub, agent_session, cwd, turns, created_at";

CheckpointRow ReadCheckpoint(const SqlRow& r) {
  CheckpointRow row;
  row.id = r.Text(0);
  row.session_id = r.Text(1);
  row.sandbox_id = r.Text(2);
  row.snapshot_id = r.Text(3);
  row.iss = r.Text(4);
  row.sub = r.Text(5);
  row.agent_session = r.Text(6);
  row.cwd = r.Text(7);
  row.turns = r.Int(8);
  row.created_at = r.Int(9);
  return row;
}

}  // namespace

Status Store::InsertCheckpoint(const CheckpointRow& row) {
  std::lock_guard lock(mu_);
  return Run(db_,
             Sql({"INSERT INTO checkpoints (", kCheckpointColumns, ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"}),
             {row.id, row.session_id, row.sandbox_id, row.snapshot_id, row.iss, row.sub, row.agent_session,
              row.cwd, row.turns, row.created_at},
             "insert checkpoint " + row.id);
}

StatusOr<std::optional<CheckpointRow>> Store::GetCheckpoint(const std::string& id) {
  std::optional<CheckpointRow> found;
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(db_->Execute(Sql({"SELECT ", kCheckpointColumns, " FROM checkpoints WHERE id = ?1"}), {id},
                               "get checkpoint " + id, [&found](const SqlRow& r) { found = ReadCheckpoint(r); })
                      .status());
  return found;
}

StatusOr<std::vector<CheckpointRow>> Store::ListCheckpoints(const std::string& session_id) {
  std::vector<CheckpointRow> rows;
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(db_->Execute(Sql({"SELECT ", kCheckpointColumns,
                                    " FROM checkpoints WHERE session_id = ?1 ORDER BY created_at, id"}),
                               {session_id}, "list the checkpoints of " + session_id,
                               [&rows](const SqlRow& r) { rows.push_back(ReadCheckpoint(r)); })
                      .status());
  return rows;
}

}  // namespace corral::supervisor
