// The store's commands, sessions and headless executions.
#include "supervisor/store/store.h"

#include <mutex>

#include "supervisor/store/store_sql.h"

namespace corral::supervisor {

using namespace store_internal;  // the store's own SQL helpers

// ---------------------------------------------------------------------------------------------
// Commands

StatusOr<CommandRow> Store::InsertCommand(CommandRow row) {
  std::lock_guard lock(mu_);
  Status status = InTransaction([&]() -> Status {
    ASSIGN_OR_RETURN(std::optional<int64_t> next_seq,
                     QueryInt(db_,
                              "SELECT COALESCE(MAX(init_seq), 0) + 1 FROM commands "
                              "WHERE sandbox_id = ?1",
                              {row.sandbox_id}, "next init_seq of " + row.sandbox_id));
    row.init_seq = next_seq.value_or(1);
    return Run(db_, InsertSql(kCommands.name, kCommands.columns), Values(row), "insert command " + row.id);
  });
  if (!status.ok()) return status;
  return row;
}

Status Store::UpdateCommand(const CommandRow& row) { return UpdateRow(mu_, db_, kCommands, row); }

StatusOr<std::optional<CommandRow>> Store::GetCommand(const std::string& id) {
  return GetRow<CommandRow>(mu_, db_, kCommands, id);
}

// Newest first by init_seq, which only grows within a sandbox (UNIQUE (sandbox_id, init_seq)
// is the index for both the filter and the order).
StatusOr<std::vector<CommandRow>> Store::ListCommands(const std::string& sandbox_id,
                                                      bool active_only, int64_t limit) {
  std::lock_guard lock(mu_);
  return Query<CommandRow>(db_,
                           Sql({"SELECT ", kCommandColumns,
                                " FROM commands WHERE sandbox_id = ?1 "
                                "AND (?2 = 0 OR state <> 'exited') "
                                "ORDER BY init_seq DESC LIMIT ?3"}),
                           {sandbox_id, int64_t{active_only}, ClampLimit(limit)},
                           "list commands of " + sandbox_id);
}

// ---------------------------------------------------------------------------------------------
// Sessions

Status Store::InsertSession(const SessionRow& row) { return InsertRow(mu_, db_, kSessions, row); }

Status Store::UpdateSession(const SessionRow& row) { return UpdateRow(mu_, db_, kSessions, row); }

StatusOr<std::optional<SessionRow>> Store::GetSession(const std::string& id) {
  return GetRow<SessionRow>(mu_, db_, kSessions, id);
}

StatusOr<std::vector<SessionRow>> Store::ListSessions(const std::string& iss, const std::string& sub,
                                                      const std::string& sandbox_id) {
  return ListRows<SessionRow>(mu_, db_, kSessions,
                              "(?1 = '' OR iss = ?1) AND (?2 = '' OR sub = ?2) AND (?3 = '' OR sandbox_id = ?3)",
                              {iss, sub, sandbox_id}, "list sessions");
}

StatusOr<std::vector<SessionRow>> Store::ListNodeSessions() {
  return ListRows<SessionRow>(mu_, db_, kSessions, "sandbox_id IN (SELECT id FROM sandboxes WHERE node_id = ?1)",
                              {node_id_}, "list the sessions of node " + node_id_);
}

// ---------------------------------------------------------------------------------------------
// Executions

Status Store::InsertExecution(const ExecutionRow& row) {
  ExecutionRow ours = row;
  ours.node_id = node_id_;
  return InsertRow(mu_, db_, kExecutions, ours);
}

// Every column but node_id (the node that runs it does not change).
Status Store::UpdateExecution(const ExecutionRow& row) {
  std::vector<Value> values = Values(row);
  values.pop_back();
  std::lock_guard lock(mu_);
  return RunOnExistingRow(db_, UpdateSql(kExecutions.name, kExecutions.columns, values.size()), values,
                          "update execution " + row.id);
}

StatusOr<std::optional<ExecutionRow>> Store::GetExecution(const std::string& id) {
  return GetRow<ExecutionRow>(mu_, db_, kExecutions, id);
}

StatusOr<std::vector<ExecutionRow>> Store::ListExecutions(const std::string& iss, const std::string& sub,
                                                          const std::string& state) {
  return ListRows<ExecutionRow>(mu_, db_, kExecutions,
                                "(?1 = '' OR iss = ?1) AND (?2 = '' OR sub = ?2) AND (?3 = '' OR state = ?3)",
                                {iss, sub, state}, "list executions");
}

Status Store::DeleteExecution(const std::string& id) { return DeleteRow(mu_, db_, kExecutions, id); }

Status Store::SetExecutionBundle(const std::string& id, std::string_view bundle) {
  std::lock_guard lock(mu_);
  return Run(db_, "INSERT INTO execution_bundles (execution_id, data) VALUES (?1, ?2) "
                 "ON CONFLICT (execution_id) DO UPDATE SET data = excluded.data",
             {id, Blob{bundle}}, "store the bundle of execution " + id);
}

StatusOr<std::optional<std::string>> Store::GetExecutionBundle(const std::string& id) {
  std::lock_guard lock(mu_);
  return QueryOne<std::string>(db_, "SELECT data FROM execution_bundles WHERE execution_id = ?1", {id},
                               "get the bundle of execution " + id);
}

StatusOr<std::vector<ExecutionRow>> Store::FailRunningExecutions(const std::string& error, int64_t now) {
  std::vector<ExecutionRow> failed;
  Status done = InTransaction([&]() -> Status {
    ASSIGN_OR_RETURN(failed, ListRows<ExecutionRow>(mu_, db_, kExecutions, "state = 'running' AND node_id = ?1",
                                                    {node_id_}, "list the running executions of node " + node_id_));
    for (ExecutionRow& row : failed) {
      row.state = "failed";
      row.error = error;
      row.updated_at = row.ended_at = now;
      RETURN_IF_ERROR(UpdateExecution(row));
    }
    return Status();
  });
  if (!done.ok()) return done;
  return failed;
}

}  // namespace corral::supervisor
