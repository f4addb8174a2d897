#include "supervisor/store/sql_sqlite.h"

#include <sqlite3.h>

#include <cerrno>
#include <functional>
#include <map>
#include <mutex>
#include <optional>

namespace corral::supervisor::store_internal {

namespace {

// "store: <what>: <SQLite's message>", with errno EEXIST for a duplicate key, ENOENT for a
// missing foreign row, EBUSY for a busy database.
Status SqliteError(sqlite3* db, int rc, std::string_view what) {
  std::string message = "store: " + std::string(what) + ": " + sqlite3_errmsg(db);
  switch (rc) {  // Extended result codes are on (sqlite3_extended_result_codes in OpenSqlite).
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

// Prepared statements are kept, per SQL text, and reused: preparing costs more than running most
// of ours (an exec runs five). A statement in use that is asked for again (a query inside another
// of the same text) gets a fresh one, finalized after use. One cache per connection, used under
// the store's lock like the connection itself.
class StatementCache {
 public:
  // An idle cached statement for `sql`, marked in use; nullptr when there is none.
  sqlite3_stmt* Take(std::string_view sql) {
    auto it = entries_.find(sql);
    if (it == entries_.end() || it->second.in_use) return nullptr;
    it->second.in_use = true;
    return it->second.stmt;
  }

  // Caches a new statement (in use); false when `sql` already has one.
  bool Add(std::string_view sql, sqlite3_stmt* stmt) {
    return entries_.emplace(std::string(sql), Entry{stmt, true}).second;
  }

  // Back to idle, its bindings cleared (they may hold copies of secrets).
  void Release(sqlite3_stmt* stmt) {
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    auto it = entries_.find(std::string_view(sqlite3_sql(stmt)));
    if (it != entries_.end() && it->second.stmt == stmt) it->second.in_use = false;
  }

  void Clear() {
    for (auto& [sql, entry] : entries_) sqlite3_finalize(entry.stmt);
    entries_.clear();
  }

 private:
  struct Entry {
    sqlite3_stmt* stmt;
    bool in_use;
  };
  std::map<std::string, Entry, std::less<>> entries_;
};

class SqliteRow : public SqlRow {
 public:
  explicit SqliteRow(sqlite3_stmt* stmt) : stmt_(stmt) {}
  bool IsNull(int column) const override { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }
  int64_t Int(int column) const override { return sqlite3_column_int64(stmt_, column); }
  std::string Text(int column) const override {
    // The pointer before the size (the documented order): converting a non-text value to text
    // can change its size. A BLOB's bytes as they are; an empty one may be a null pointer.
    const void* data = sqlite3_column_type(stmt_, column) == SQLITE_BLOB ? sqlite3_column_blob(stmt_, column)
                                                                       : sqlite3_column_text(stmt_, column);
    const auto size = static_cast<size_t>(sqlite3_column_bytes(stmt_, column));
    return data != nullptr ? std::string(static_cast<const char*>(data), size) : std::string();
  }

 private:
  sqlite3_stmt* stmt_;
};

class SqliteDb : public SqlDb {
 public:
  explicit SqliteDb(sqlite3* db) : db_(db) {}
  ~SqliteDb() override {
    // Every statement is finalized, by Execute or with the cache, so this close cannot be
    // refused with SQLITE_BUSY. Closing the last connection checkpoints the WAL and removes the
    // -wal and -shm files.
    cache_.Clear();
    sqlite3_close(db_);
  }
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  StatusOr<int64_t> Execute(std::string_view sql, const std::vector<Value>& values, std::string_view what,
                            const std::function<void(const SqlRow&)>& on_row) override {
    ASSIGN_OR_RETURN(Stmt stmt, Prepare(sql, values, what));
    const SqliteRow row(stmt.get());
    while (true) {
      const int rc = sqlite3_step(stmt.get());
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return SqliteError(db_, rc, what);
      if (on_row) on_row(row);
    }
    return static_cast<int64_t>(sqlite3_changes64(db_));
  }

  Status ExecScript(std::string_view sql, std::string_view what) override {
    const std::string text(sql);  // sqlite3_exec wants it terminated
    const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return SqliteError(db_, rc, what);
    return Status();
  }

  // BEGIN IMMEDIATE takes the write lock up front. A DEFERRED transaction that reads and then
  // writes gets SQLITE_BUSY at the write, without the busy handler being called, when another
  // connection committed in between (its read snapshot is stale), which no waiting can fix.
  Status Transaction(const std::function<Status()>& body) override {
    RETURN_IF_ERROR(ExecScript("BEGIN IMMEDIATE", "begin transaction"));
    Status status = body();
    if (status.ok()) {
      // Some errors (SQLITE_FULL, SQLITE_IOERR, SQLITE_NOMEM...) roll the whole transaction back
      // by themselves; a body that ignored one must not report its earlier writes as committed.
      if (sqlite3_get_autocommit(db_) != 0) {
        return Status::Error("store: the transaction was rolled back by SQLite after an error");
      }
      status = ExecScript("COMMIT", "commit");
      if (status.ok()) return status;
    }
    if (sqlite3_get_autocommit(db_) == 0) (void)ExecScript("ROLLBACK", "rollback");
    return status;
  }

  // BEGIN IMMEDIATE already makes every other writer wait.
  Status LockedTransaction(const std::function<Status()>& body) override { return Transaction(body); }

 private:
  // A prepared statement: a cached one goes back to the cache (reset, bindings cleared), a fresh
  // one is finalized.
  struct StmtDeleter {
    StatementCache* cache = nullptr;
    void operator()(sqlite3_stmt* stmt) const {
      if (cache != nullptr) {
        cache->Release(stmt);
      } else {
        sqlite3_finalize(stmt);
      }
    }
  };
  using Stmt = std::unique_ptr<sqlite3_stmt, StmtDeleter>;

  StatusOr<Stmt> Prepare(std::string_view sql, const std::vector<Value>& values, std::string_view what) {
    Stmt stmt(cache_.Take(sql), StmtDeleter{&cache_});
    if (!stmt) {
      sqlite3_stmt* raw = nullptr;
      const int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT,
                                        &raw, nullptr);
      if (rc != SQLITE_OK) {
        sqlite3_finalize(raw);
        return SqliteError(db_, rc, what);
      }
      stmt = Stmt(raw, StmtDeleter{cache_.Add(sql, raw) ? &cache_ : nullptr});
    }
    int index = 1;
    for (const Value& value : values) {
      RETURN_IF_ERROR(Bind(stmt.get(), index++, value, what));
    }
    return stmt;
  }

  Status Bind(sqlite3_stmt* stmt, int index, const Value& value, std::string_view what) {
    int rc;
    if (const int64_t* number = std::get_if<int64_t>(&value)) {
      rc = sqlite3_bind_int64(stmt, index, *number);
    } else if (const Blob* blob = std::get_if<Blob>(&value)) {
      // A zero-length blob with a null pointer would bind NULL; "" binds an empty BLOB.
      rc = sqlite3_bind_blob64(stmt, index, blob->data.data() != nullptr ? blob->data.data() : "",
                               blob->data.size(), SQLITE_TRANSIENT);
    } else {
      const std::string* owned = std::get_if<std::string>(&value);
      const Bytes* bytes = std::get_if<Bytes>(&value);
      std::string_view text = owned != nullptr   ? std::string_view(*owned)
                              : bytes != nullptr ? bytes->data
                                                 : std::get<std::string_view>(value);
      // A null pointer binds SQL NULL, not an empty string, and an empty string_view may have
      // one. SQLITE_TRANSIENT: SQLite copies, so the view need not outlive the statement.
      rc = sqlite3_bind_text64(stmt, index, text.data() != nullptr ? text.data() : "", text.size(),
                               SQLITE_TRANSIENT, SQLITE_UTF8);
    }
    if (rc != SQLITE_OK) return SqliteError(db_, rc, what);
    return Status();
  }

  sqlite3* db_;
  StatementCache cache_;
};

// One value of a pragma that answers with a row.
StatusOr<std::string> PragmaValue(SqlDb& db, std::string_view sql, std::string_view what) {
  std::optional<std::string> value;
  RETURN_IF_ERROR(db.Execute(sql, {}, what, [&](const SqlRow& row) {
                      if (!value) value = row.Text(0);
                    }).status());
  return value.value_or("");
}

Status ConfigureSqlite(SqlDb& db, bool synchronous_full) {
  // journal_mode does not fail when WAL is impossible (e.g. no shared memory for the -shm file):
  // it answers with the mode still in effect.
  ASSIGN_OR_RETURN(std::string mode, PragmaValue(db, "PRAGMA journal_mode=WAL", "set journal_mode"));
  if (mode != "wal") return Status::Error("store: journal_mode is '" + mode + "', not 'wal'");
  RETURN_IF_ERROR(
      db.ExecScript(synchronous_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL", "set synchronous"));
  // Foreign keys are off by default on every new connection, and the pragma is silently ignored
  // by builds without them: read it back, since DeleteSandbox relies on ON DELETE CASCADE.
  RETURN_IF_ERROR(db.ExecScript("PRAGMA foreign_keys=ON", "enable foreign keys"));
  ASSIGN_OR_RETURN(std::string foreign_keys, PragmaValue(db, "PRAGMA foreign_keys", "read foreign_keys"));
  if (foreign_keys != "1") return Status::Error("store: this SQLite cannot enforce foreign keys");
  return Status();
}

}  // namespace

Status NotFound(std::string_view what) {
  return Status::Error("store: " + std::string(what) + ": no such row", ENOENT);
}

StatusOr<std::unique_ptr<SqlDb>> OpenSqlite(const std::string& path, bool synchronous_full) {
  sqlite3* raw = nullptr;
  // The store's lock serializes every use of the connection, so SQLite's own is not needed.
  // No SQLITE_OPEN_CREATE: the caller made the file with the right mode.
  const int rc = sqlite3_open_v2(path.c_str(), &raw,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW, nullptr);
  if (raw == nullptr) return Status::Error("store: open " + path + ": out of memory", ENOMEM);
  auto db = std::make_unique<SqliteDb>(raw);  // open_v2 returns a handle to close even when it fails
  if (rc != SQLITE_OK) return SqliteError(raw, rc, "open " + path);
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, 5000);
  RETURN_IF_ERROR(ConfigureSqlite(*db, synchronous_full));
  return std::unique_ptr<SqlDb>(std::move(db));
}

}  // namespace corral::supervisor::store_internal
