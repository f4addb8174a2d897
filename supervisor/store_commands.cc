// The store's commands, sessions and headless executions.
#include "supervisor/store.h"

#include <mutex>

#include "supervisor/store_sqlite.h"

namespace corral::supervisor {

using namespace store_internal;  // the store's own SQLite helpers

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
    return Run(db_,
               Sql({"INSERT INTO commands (", kCommandColumns,
                    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"}),
               Values(row), "insert command " + row.id);
  });
  if (!status.ok()) return status;
  return row;
}

Status Store::UpdateCommand(const CommandRow& row) {
  std::lock_guard lock(mu_);
  return RunOnExistingRow(
      db_,
      "UPDATE commands SET sandbox_id = ?2, iss = ?3, sub = ?4, argv_json = ?5, pty = ?6, "
      "state = ?7, outcome_json = ?8, created_at = ?9, ended_at = ?10, init_seq = ?11, "
      "seq_reserved = ?12 "
      "WHERE id = ?1",
      Values(row), "update command " + row.id);
}

StatusOr<std::optional<CommandRow>> Store::GetCommand(const std::string& id) {
  std::lock_guard lock(mu_);
  return QueryOne<CommandRow>(db_,
                              Sql({"SELECT ", kCommandColumns, " FROM commands WHERE id = ?1"}),
                              {id}, "get command " + id);
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

Status Store::InsertSession(const SessionRow& row) {
  std::lock_guard lock(mu_);
  return Run(db_,
             Sql({"INSERT INTO sessions (", kSessionColumns,
                  ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"}),
             Values(row), "insert session " + row.id);
}

Status Store::UpdateSession(const SessionRow& row) {
  std::lock_guard lock(mu_);
  return RunOnExistingRow(db_,
                          "UPDATE sessions SET sandbox_id = ?2, iss = ?3, sub = ?4, state = ?5, agent_session = ?6, "
                          "parent_id = ?7, options_json = ?8, budget_json = ?9, outcome_json = ?10, "
                          "cost_micro_usd = ?11, turns = ?12, created_at = ?13, updated_at = ?14, ended_at = ?15, "
                          "seq_reserved = ?16 WHERE id = ?1",
                          Values(row), "update session " + row.id);
}

StatusOr<std::optional<SessionRow>> Store::GetSession(const std::string& id) {
  std::lock_guard lock(mu_);
  return QueryOne<SessionRow>(db_, Sql({"SELECT ", kSessionColumns, " FROM sessions WHERE id = ?1"}), {id},
                              "get session " + id);
}

StatusOr<std::vector<SessionRow>> Store::ListSessions(const std::string& iss, const std::string& sub,
                                                      const std::string& sandbox_id) {
  std::lock_guard lock(mu_);
  return Query<SessionRow>(db_,
                           Sql({"SELECT ", kSessionColumns,
                                " FROM sessions WHERE (?1 = '' OR iss = ?1) AND (?2 = '' OR sub = ?2) "
                                "AND (?3 = '' OR sandbox_id = ?3) ORDER BY created_at, rowid"}),
                           {iss, sub, sandbox_id}, "list sessions");
}

// ---------------------------------------------------------------------------------------------
// Executions

Status Store::InsertExecution(const ExecutionRow& row) {
  std::lock_guard lock(mu_);
  return Run(db_,
             Sql({"INSERT INTO executions (", kExecutionColumns,
                  ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, "
                  "?20, ?21)"}),
             Values(row), "insert execution " + row.id);
}

Status Store::UpdateExecution(const ExecutionRow& row) {
  std::lock_guard lock(mu_);
  return RunOnExistingRow(db_,
                          "UPDATE executions SET iss = ?2, sub = ?3, state = ?4, sandbox_id = ?5, session_id = ?6, "
                          "request_json = ?7, base_commit = ?8, head_commit = ?9, summary = ?10, outcome = ?11, "
                          "cost_micro_usd = ?12, usage_json = ?13, files_json = ?14, diff = ?15, "
                          "diff_truncated = ?16, bundle_bytes = ?17, error = ?18, created_at = ?19, "
                          "updated_at = ?20, ended_at = ?21 WHERE id = ?1",
                          Values(row), "update execution " + row.id);
}

StatusOr<std::optional<ExecutionRow>> Store::GetExecution(const std::string& id) {
  std::lock_guard lock(mu_);
  return QueryOne<ExecutionRow>(db_, Sql({"SELECT ", kExecutionColumns, " FROM executions WHERE id = ?1"}), {id},
                                "get execution " + id);
}

StatusOr<std::vector<ExecutionRow>> Store::ListExecutions(const std::string& iss, const std::string& sub,
                                                          const std::string& state) {
  std::lock_guard lock(mu_);
  return Query<ExecutionRow>(db_,
                             Sql({"SELECT ", kExecutionColumns,
                                  " FROM executions WHERE (?1 = '' OR iss = ?1) AND (?2 = '' OR sub = ?2) "
                                  "AND (?3 = '' OR state = ?3) ORDER BY created_at, rowid"}),
                             {iss, sub, state}, "list executions");
}

Status Store::DeleteExecution(const std::string& id) {
  std::lock_guard lock(mu_);
  return RunOnExistingRow(db_, "DELETE FROM executions WHERE id = ?1", {id}, "delete execution " + id);
}

Status Store::SetExecutionBundle(const std::string& id, std::string_view bundle) {
  std::lock_guard lock(mu_);
  return Run(db_, "INSERT OR REPLACE INTO execution_bundles (execution_id, data) VALUES (?1, ?2)",
             {id, Blob{bundle}}, "store the bundle of execution " + id);
}

StatusOr<std::optional<std::string>> Store::GetExecutionBundle(const std::string& id) {
  std::lock_guard lock(mu_);
  const std::string what = "get the bundle of execution " + id;
  ASSIGN_OR_RETURN(Stmt stmt, Prepare(db_, "SELECT data FROM execution_bundles WHERE execution_id = ?1", {id}, what));
  ASSIGN_OR_RETURN(bool has_row, Step(db_, stmt.get(), what));
  if (!has_row) return std::optional<std::string>();
  // column_blob before column_bytes (the documented order); an empty BLOB may be a null pointer.
  const auto* data = static_cast<const char*>(sqlite3_column_blob(stmt.get(), 0));
  const auto size = static_cast<size_t>(sqlite3_column_bytes(stmt.get(), 0));
  return std::optional<std::string>(data != nullptr ? std::string(data, size) : std::string());
}

StatusOr<std::vector<ExecutionRow>> Store::FailRunningExecutions(const std::string& error, int64_t now) {
  std::vector<ExecutionRow> failed;
  Status done = InTransaction([&]() -> Status {
    ASSIGN_OR_RETURN(failed, ListExecutions("", "", "running"));
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
