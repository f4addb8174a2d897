#include "supervisor/store/store_sqlite.h"

#include <cerrno>
#include <functional>
#include <map>
#include <mutex>

namespace corral::supervisor::store_internal {

std::string Sql(std::initializer_list<std::string_view> parts) {
  std::string sql;
  for (std::string_view part : parts) sql += part;
  return sql;
}

namespace {

// "a, b, c" -> {"a", "b", "c"}
std::vector<std::string_view> SplitColumns(std::string_view columns) {
  std::vector<std::string_view> names;
  while (!columns.empty()) {
    const size_t comma = columns.find(',');
    names.push_back(columns.substr(0, comma));
    columns = comma == std::string_view::npos ? std::string_view() : columns.substr(comma + 1);
    while (!columns.empty() && columns.front() == ' ') columns.remove_prefix(1);
  }
  return names;
}

}  // namespace

std::string InsertSql(std::string_view table, std::string_view columns) {
  std::string sql = Sql({"INSERT INTO ", table, " (", columns, ") VALUES ("});
  const size_t count = SplitColumns(columns).size();
  for (size_t i = 1; i <= count; ++i) sql += (i > 1 ? ", ?" : "?") + std::to_string(i);
  return sql + ")";
}

std::string UpdateSql(std::string_view table, std::string_view columns, size_t count) {
  const std::vector<std::string_view> names = SplitColumns(columns);
  if (count == 0 || count > names.size()) count = names.size();
  std::string sql = Sql({"UPDATE ", table, " SET "});
  for (size_t i = 1; i < count; ++i) {
    sql += Sql({i > 1 ? ", " : "", names[i], " = ?"}) + std::to_string(i + 1);
  }
  return sql + Sql({" WHERE ", names.front(), " = ?1"});
}

std::string ListSql(const Table& table, std::string_view where) {
  return Sql({"SELECT ", table.columns, " FROM ", table.name, " WHERE ", where, " ORDER BY created_at, rowid"});
}

Status DeleteRow(std::recursive_mutex& mu, sqlite3* db, const Table& table, const std::string& id) {
  std::lock_guard lock(mu);
  return RunOnExistingRow(db, Sql({"DELETE FROM ", table.name, " WHERE id = ?1"}), {id},
                          Sql({"delete ", table.noun, " "}) + id);
}

StatusOr<int64_t> CountOwned(std::recursive_mutex& mu, sqlite3* db, const Table& table, const std::string& iss,
                             const std::string& sub) {
  std::lock_guard lock(mu);
  ASSIGN_OR_RETURN(std::optional<int64_t> count,
                   QueryInt(db, Sql({"SELECT COUNT(*) FROM ", table.name, " WHERE iss = ?1 AND sub = ?2"}), {iss, sub},
                            Sql({"count ", table.name})));
  return count.value_or(0);
}

std::string GetSql(std::string_view table, std::string_view columns) {
  return Sql({"SELECT ", columns, " FROM ", table, " WHERE ", SplitColumns(columns).front(), " = ?1"});
}

// ---------------------------------------------------------------------------------------------
// Errors

Status SqliteError(sqlite3* db, int rc, std::string_view what) {
  std::string message = "store: " + std::string(what) + ": " + sqlite3_errmsg(db);
  switch (rc) {  // Extended result codes are on (sqlite3_extended_result_codes in Open).
    case SQLITE_CONSTRAINT_PRIMARYKEY:
    case SQLITE_CONSTRAINT_UNIQUE:
      return Status::Error(std::move(message), EEXIST);
    case SQLITE_CONSTRAINT_FOREIGNKEY:  // A command for a sandbox that does not exist.
      return Status::Error(std::move(message), ENOENT);
    default:
      break;
  }
  if ((rc & 0xff) == SQLITE_BUSY) return Status::Error(std::move(message), EBUSY);
  return Status::Error(std::move(message));
}

Status NotFound(std::string_view what) {
  return Status::Error("store: " + std::string(what) + ": no such row", ENOENT);
}

// ---------------------------------------------------------------------------------------------
// Statements: prepare, bind, step

namespace {

// Prepared statements are kept, per connection and SQL text, and reused: preparing costs more
// than running most of ours (an exec runs five). A statement in use that is asked for again (a
// query inside another of the same text) gets a fresh one, finalized after use. The cache is
// process-wide, under its own lock; a connection's statements are finalized before it closes.
class StatementCache {
 public:
  static StatementCache& Get() {
    static StatementCache* cache = new StatementCache();  // never destroyed: used until exit
    return *cache;
  }

  // An idle cached statement for (db, sql), marked in use; nullptr when there is none.
  sqlite3_stmt* Take(sqlite3* db, std::string_view sql) {
    std::lock_guard lock(mu_);
    auto it = entries_.find(Key{db, std::string(sql)});
    if (it == entries_.end() || it->second.in_use) return nullptr;
    it->second.in_use = true;
    return it->second.stmt;
  }

  // Caches a new statement (in use); false when (db, sql) already has one.
  bool Add(sqlite3* db, std::string_view sql, sqlite3_stmt* stmt) {
    std::lock_guard lock(mu_);
    return entries_.emplace(Key{db, std::string(sql)}, Entry{stmt, true}).second;
  }

  // Back to idle, its bindings cleared (they may hold copies of secrets).
  void Release(sqlite3* db, sqlite3_stmt* stmt) {
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    std::lock_guard lock(mu_);
    auto it = entries_.find(Key{db, sqlite3_sql(stmt)});
    if (it != entries_.end() && it->second.stmt == stmt) it->second.in_use = false;
  }

  void Drop(sqlite3* db) {
    std::lock_guard lock(mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->first.db == db) {
        sqlite3_finalize(it->second.stmt);
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }

 private:
  struct Key {
    sqlite3* db;
    std::string sql;
    bool operator<(const Key& o) const { return db != o.db ? std::less<sqlite3*>()(db, o.db) : sql < o.sql; }
  };
  struct Entry {
    sqlite3_stmt* stmt;
    bool in_use;
  };
  std::mutex mu_;
  std::map<Key, Entry> entries_;
};

}  // namespace

void StmtDeleter::operator()(sqlite3_stmt* stmt) const {
  if (cached) {
    StatementCache::Get().Release(sqlite3_db_handle(stmt), stmt);
  } else {
    sqlite3_finalize(stmt);
  }
}

void CloseDb(sqlite3* db) {
  StatementCache::Get().Drop(db);
  sqlite3_close(db);
}

StatusOr<Stmt> Prepare(sqlite3* db, std::string_view sql, const std::vector<Value>& values,
                       std::string_view what) {
  StatementCache& cache = StatementCache::Get();
  Stmt stmt(cache.Take(db, sql), StmtDeleter{true});
  if (!stmt) {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT, &raw,
                                nullptr);
    if (rc != SQLITE_OK) {
      sqlite3_finalize(raw);
      return SqliteError(db, rc, what);
    }
    stmt = Stmt(raw, StmtDeleter{cache.Add(db, sql, raw)});
  }
  int index = 1;
  for (const Value& value : values) {
    int rc;
    if (const int64_t* number = std::get_if<int64_t>(&value)) {
      rc = sqlite3_bind_int64(stmt.get(), index, *number);
    } else if (const Blob* blob = std::get_if<Blob>(&value)) {
      // A zero-length blob with a null pointer would bind NULL; "" binds an empty BLOB.
      rc = sqlite3_bind_blob64(stmt.get(), index, blob->data.data() != nullptr ? blob->data.data() : "",
                               blob->data.size(), SQLITE_TRANSIENT);
    } else {
      const std::string* owned = std::get_if<std::string>(&value);
      std::string_view text = owned != nullptr ? std::string_view(*owned) : std::get<std::string_view>(value);
      // A null pointer binds SQL NULL, not an empty string, and an empty string_view may have
      // one. SQLITE_TRANSIENT: SQLite copies, so the view need not outlive the statement.
      rc = sqlite3_bind_text64(stmt.get(), index, text.data() != nullptr ? text.data() : "",
                               text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
    }
    if (rc != SQLITE_OK) return SqliteError(db, rc, what);
    ++index;
  }
  return stmt;
}

StatusOr<bool> Step(sqlite3* db, sqlite3_stmt* stmt, std::string_view what) {
  int rc = sqlite3_step(stmt);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteError(db, rc, what);
}

Status Run(sqlite3* db, std::string_view sql, const std::vector<Value>& values,
           std::string_view what) {
  ASSIGN_OR_RETURN(Stmt stmt, Prepare(db, sql, values, what));
  ASSIGN_OR_RETURN(bool has_row, Step(db, stmt.get(), what));
  (void)has_row;
  return Status();
}

Status RunOnExistingRow(sqlite3* db, std::string_view sql, const std::vector<Value>& values,
                        std::string_view what) {
  RETURN_IF_ERROR(Run(db, sql, values, what));
  if (sqlite3_changes(db) == 0) return NotFound(what);
  return Status();
}

Status ExecScript(sqlite3* db, const char* sql, std::string_view what) {
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return SqliteError(db, rc, what);
  return Status();
}

// BEGIN IMMEDIATE takes the write lock up front. A DEFERRED transaction that reads and then
// writes gets SQLITE_BUSY at the write, without the busy handler being called, when another
// connection committed in between (its read snapshot is stale), which no waiting can fix.
Status RunTransaction(sqlite3* db, const std::function<Status()>& body) {
  RETURN_IF_ERROR(ExecScript(db, "BEGIN IMMEDIATE", "begin transaction"));
  Status status = body();
  if (status.ok()) {
    // Some errors (SQLITE_FULL, SQLITE_IOERR, SQLITE_NOMEM...) roll the whole transaction back
    // by themselves; a body that ignored one must not report its earlier writes as committed.
    if (sqlite3_get_autocommit(db) != 0) {
      return Status::Error("store: the transaction was rolled back by SQLite after an error");
    }
    status = ExecScript(db, "COMMIT", "commit");
    if (status.ok()) return status;
  }
  if (sqlite3_get_autocommit(db) == 0) (void)ExecScript(db, "ROLLBACK", "rollback");
  return status;
}

StatusOr<std::optional<int64_t>> QueryInt(sqlite3* db, std::string_view sql,
                                          const std::vector<Value>& values, std::string_view what) {
  ASSIGN_OR_RETURN(Stmt stmt, Prepare(db, sql, values, what));
  ASSIGN_OR_RETURN(bool has_row, Step(db, stmt.get(), what));
  Columns columns(stmt.get());
  if (!has_row || columns.IsNull()) return std::optional<int64_t>();
  int64_t number = 0;
  columns.Into(number);
  return std::optional<int64_t>(number);
}

}  // namespace corral::supervisor::store_internal
