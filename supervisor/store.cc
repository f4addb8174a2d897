#include "supervisor/store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <concepts>
#include <ctime>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <iterator>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

#include "common/log.h"
#include "common/unique_fd.h"
#include "supervisor/store_backup.h"

namespace corral::supervisor {
namespace {

// ---------------------------------------------------------------------------------------------
// Schema. kMigrations[i] takes user_version i to i + 1. Append only: a released migration is
// never edited, since databases in the field have already run it.
//
// STRICT (SQLite 3.37) makes a column reject a value of the wrong type instead of storing it as
// whatever it is. Primary keys are declared NOT NULL because, for compatibility with old
// versions, SQLite lets a non-INTEGER PRIMARY KEY column hold NULLs.
constexpr const char* kMigrations[] = {
    R"sql(
CREATE TABLE issuers (
  name        TEXT NOT NULL PRIMARY KEY,
  secret      TEXT NOT NULL,
  created_at  INTEGER NOT NULL
) STRICT;

CREATE TABLE sandboxes (
  id               TEXT NOT NULL PRIMARY KEY,
  iss              TEXT NOT NULL,
  sub              TEXT NOT NULL,
  name             TEXT NOT NULL,
  image            TEXT NOT NULL,
  state            TEXT NOT NULL,
  limits_json      TEXT NOT NULL,
  idle_timeout_s   INTEGER NOT NULL,
  uid_base         INTEGER NOT NULL UNIQUE,
  created_at       INTEGER NOT NULL,
  updated_at       INTEGER NOT NULL,
  last_active_at   INTEGER NOT NULL,
  init_pid         INTEGER NOT NULL,
  init_start_time  INTEGER NOT NULL,
  source           TEXT NOT NULL
) STRICT;
CREATE INDEX sandboxes_by_user ON sandboxes (iss, sub);

-- No foreign key: a snapshot outlives the sandbox it was taken of.
CREATE TABLE snapshots (
  id          TEXT NOT NULL PRIMARY KEY,
  sandbox_id  TEXT NOT NULL,
  iss         TEXT NOT NULL,
  sub         TEXT NOT NULL,
  image       TEXT NOT NULL,
  created_at  INTEGER NOT NULL,
  bytes       INTEGER NOT NULL
) STRICT;
CREATE INDEX snapshots_by_user ON snapshots (iss, sub);

-- The UNIQUE index starts with sandbox_id, so it also serves the ON DELETE CASCADE lookup
-- (without an index on the child column, every sandbox delete would scan all commands).
CREATE TABLE commands (
  id            TEXT NOT NULL PRIMARY KEY,
  sandbox_id    TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
  iss           TEXT NOT NULL,
  sub           TEXT NOT NULL,
  argv_json     TEXT NOT NULL,
  pty           INTEGER NOT NULL,
  state         TEXT NOT NULL,
  outcome_json  TEXT NOT NULL,
  created_at    INTEGER NOT NULL,
  ended_at      INTEGER NOT NULL,
  init_seq      INTEGER NOT NULL,
  UNIQUE (sandbox_id, init_seq)
) STRICT;
CREATE INDEX commands_by_state ON commands (sandbox_id, state);

-- AUTOINCREMENT: a plain INTEGER PRIMARY KEY reuses the highest seq once that row is deleted,
-- and clients resume from a seq they have seen. No foreign key: events outlive the sandbox.
CREATE TABLE events (
  seq         INTEGER PRIMARY KEY AUTOINCREMENT,
  sandbox_id  TEXT NOT NULL,
  type        TEXT NOT NULL,
  data_json   TEXT NOT NULL,
  at          INTEGER NOT NULL
) STRICT;
CREATE INDEX events_by_sandbox ON events (sandbox_id, seq);
)sql",
    // 1 -> 2: a snapshot remembers the uid range its files belong to (a sandbox made from it
    // shifts them to its own) and the size of its disk, and the limits it was taken with.
    R"sql(
ALTER TABLE snapshots ADD COLUMN uid_base INTEGER NOT NULL DEFAULT 0;
ALTER TABLE snapshots ADD COLUMN limits_json TEXT NOT NULL DEFAULT '{}';
)sql",
    // 2 -> 3: the highest event seq a command's stream may have handed out, so that a daemon
    // that adopts the command after a restart numbers its events above it.
    R"sql(
ALTER TABLE commands ADD COLUMN seq_reserved INTEGER NOT NULL DEFAULT 0;
)sql",
    // 3 -> 4: the ledger. One row per debit: a model request's price (kind 'ai', micro-dollars,
    // with the usage it was priced from) or CPU time used in a sandbox (kind 'compute',
    // milliseconds). No foreign keys: the ledger outlives sandboxes and sessions.
    R"sql(
CREATE TABLE ledger (
  id                  INTEGER PRIMARY KEY AUTOINCREMENT,
  iss                 TEXT NOT NULL,
  sub                 TEXT NOT NULL,
  kind                TEXT NOT NULL CHECK (kind IN ('ai', 'compute')),
  amount              INTEGER NOT NULL,
  at                  INTEGER NOT NULL,
  sandbox_id          TEXT NOT NULL,
  session_id          TEXT NOT NULL,
  model               TEXT NOT NULL,
  input_tokens        INTEGER NOT NULL,
  output_tokens       INTEGER NOT NULL,
  cache_write_tokens  INTEGER NOT NULL,
  cache_read_tokens   INTEGER NOT NULL
) STRICT;
CREATE INDEX ledger_by_user ON ledger (iss, sub, kind, at);
)sql",
    // 4 -> 5: agent sessions. The transcript itself is Claude Code's, in the sandbox's
    // workspace; a row says whose session it is, how it was started and how it ended.
    R"sql(
CREATE TABLE sessions (
  id              TEXT NOT NULL PRIMARY KEY,
  sandbox_id      TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
  iss             TEXT NOT NULL,
  sub             TEXT NOT NULL,
  state           TEXT NOT NULL,
  agent_session   TEXT NOT NULL,
  parent_id       TEXT NOT NULL,
  options_json    TEXT NOT NULL,
  budget_json     TEXT NOT NULL,
  outcome_json    TEXT NOT NULL,
  cost_micro_usd  INTEGER NOT NULL,
  turns           INTEGER NOT NULL,
  created_at      INTEGER NOT NULL,
  updated_at      INTEGER NOT NULL,
  ended_at        INTEGER NOT NULL,
  seq_reserved    INTEGER NOT NULL
) STRICT;
CREATE INDEX sessions_by_user ON sessions (iss, sub);
CREATE INDEX sessions_by_sandbox ON sessions (sandbox_id);
)sql",
    // 5 -> 6: compute metering. A sandbox keeps the budget of the token that last started it
    // (its CPU time is debited against it) and how much of its cgroup's CPU time the ledger
    // already holds, so a restarted daemon that adopts it debits only what is new.
    R"sql(
ALTER TABLE sandboxes ADD COLUMN budget_json TEXT NOT NULL DEFAULT '{}';
ALTER TABLE sandboxes ADD COLUMN cpu_billed_usec INTEGER NOT NULL DEFAULT 0;
CREATE INDEX ledger_by_time ON ledger (at);
)sql",
    // 6 -> 7: headless executions (POST /v1/execute): what was asked and what came of it. No
    // foreign key: a record outlives the sandbox it ran in (destroyed when it ends). Its git
    // bundle, the one large column, lives in a table of its own, so that listing records never
    // reads it.
    R"sql(
CREATE TABLE executions (
  id              TEXT NOT NULL PRIMARY KEY,
  iss             TEXT NOT NULL,
  sub             TEXT NOT NULL,
  state           TEXT NOT NULL CHECK (state IN ('running', 'completed', 'failed')),
  sandbox_id      TEXT NOT NULL,
  session_id      TEXT NOT NULL,
  request_json    TEXT NOT NULL,
  base_commit     TEXT NOT NULL,
  head_commit     TEXT NOT NULL,
  summary         TEXT NOT NULL,
  outcome         TEXT NOT NULL,
  cost_micro_usd  INTEGER NOT NULL,
  usage_json      TEXT NOT NULL,
  files_json      TEXT NOT NULL,
  diff            TEXT NOT NULL,
  diff_truncated  INTEGER NOT NULL,
  bundle_bytes    INTEGER NOT NULL,
  error           TEXT NOT NULL,
  created_at      INTEGER NOT NULL,
  updated_at      INTEGER NOT NULL,
  ended_at        INTEGER NOT NULL
) STRICT;
CREATE INDEX executions_by_user ON executions (iss, sub);
CREATE INDEX executions_by_state ON executions (state);

CREATE TABLE execution_bundles (
  execution_id  TEXT NOT NULL PRIMARY KEY REFERENCES executions (id) ON DELETE CASCADE,
  data          BLOB NOT NULL
) STRICT;
)sql",
    // 7 -> 8: a sandbox's egress rules (JSON {"domains", "ports", "cidrs"}), changeable while it
    // runs; '' for a sandbox made before there were rules (it has none). The proxy's decisions
    // go to the events table (type 'egress').
    R"sql(
ALTER TABLE sandboxes ADD COLUMN egress_json TEXT NOT NULL DEFAULT '';
)sql",
    // 8 -> 9: a sandbox's network mode, fixed at create time: 'loopback' (only lo, the daemon's
    // services on it) or 'full' (a veth with NAT and filtering, supervisor/full_network.h).
    R"sql(
ALTER TABLE sandboxes ADD COLUMN network TEXT NOT NULL DEFAULT 'loopback';
)sql",
    // 9 -> 10: revoked token ids (supervisor/issuers.h): iss '' revokes the id for every issuer.
    R"sql(
CREATE TABLE revocations (
  iss         TEXT NOT NULL,
  jti         TEXT NOT NULL,
  revoked_at  INTEGER NOT NULL,
  PRIMARY KEY (iss, jti)
) STRICT;
)sql",
};
constexpr int kLatestSchemaVersion = static_cast<int>(std::size(kMigrations));
constexpr int kMinSqliteVersion = 3037000;  // STRICT tables.

// Column lists, in the order of the Fields() functions below. SQL text is only ever assembled
// from these constants; values are always bound.
constexpr std::string_view kIssuerColumns = "name, secret, created_at";
constexpr std::string_view kRevocationColumns = "iss, jti, revoked_at";
constexpr std::string_view kSandboxColumns =
    "id, iss, sub, name, image, state, limits_json, idle_timeout_s, uid_base, created_at, "
    "updated_at, last_active_at, init_pid, init_start_time, source, budget_json, cpu_billed_usec, egress_json, network";
constexpr std::string_view kSnapshotColumns =
    "id, sandbox_id, iss, sub, image, created_at, bytes, uid_base, limits_json";
constexpr std::string_view kCommandColumns =
    "id, sandbox_id, iss, sub, argv_json, pty, state, outcome_json, created_at, ended_at, init_seq, "
    "seq_reserved";
constexpr std::string_view kEventColumns = "seq, sandbox_id, type, data_json, at";
constexpr std::string_view kSessionColumns =
    "id, sandbox_id, iss, sub, state, agent_session, parent_id, options_json, budget_json, outcome_json, "
    "cost_micro_usd, turns, created_at, updated_at, ended_at, seq_reserved";
constexpr std::string_view kExecutionColumns =
    "id, iss, sub, state, sandbox_id, session_id, request_json, base_commit, head_commit, summary, outcome, "
    "cost_micro_usd, usage_json, files_json, diff, diff_truncated, bundle_bytes, error, created_at, updated_at, "
    "ended_at";
constexpr std::string_view kLedgerColumns =
    "id, iss, sub, kind, amount, at, sandbox_id, session_id, model, input_tokens, output_tokens, "
    "cache_write_tokens, cache_read_tokens";

std::string Sql(std::initializer_list<std::string_view> parts) {
  std::string sql;
  for (std::string_view part : parts) sql += part;
  return sql;
}

// SQLite's LIMIT treats a negative count as "no limit"; a caller's negative limit means none.
int64_t ClampLimit(int64_t limit) { return std::max<int64_t>(limit, 0); }

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
// Statements: prepare, bind, step, read

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

struct StmtDeleter {
  bool cached = false;
  void operator()(sqlite3_stmt* stmt) const {
    if (cached) {
      StatementCache::Get().Release(sqlite3_db_handle(stmt), stmt);
    } else {
      sqlite3_finalize(stmt);
    }
  }
};
using Stmt = std::unique_ptr<sqlite3_stmt, StmtDeleter>;

void CloseDb(sqlite3* db) {
  StatementCache::Get().Drop(db);
  sqlite3_close(db);
}

struct DbDeleter {
  void operator()(sqlite3* db) const { CloseDb(db); }
};
using Db = std::unique_ptr<sqlite3, DbDeleter>;

// Bytes bound as a BLOB (text is bound as TEXT).
struct Blob {
  std::string_view data;
};

// A bound parameter, for ?1, ?2, ... in order.
using Value = std::variant<int64_t, std::string_view, Blob>;

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
      std::string_view text = std::get<std::string_view>(value);
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

// Steps once: true on a row, false when done.
StatusOr<bool> Step(sqlite3* db, sqlite3_stmt* stmt, std::string_view what) {
  int rc = sqlite3_step(stmt);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteError(db, rc, what);
}

// Runs one statement that returns no rows (or whose rows do not matter).
Status Run(sqlite3* db, std::string_view sql, const std::vector<Value>& values,
           std::string_view what) {
  ASSIGN_OR_RETURN(Stmt stmt, Prepare(db, sql, values, what));
  ASSIGN_OR_RETURN(bool has_row, Step(db, stmt.get(), what));
  (void)has_row;
  return Status();
}

// Run() for an UPDATE or DELETE of one row by key: ENOENT when no row matched. sqlite3_changes
// counts only the rows the statement itself changed, not those removed by ON DELETE CASCADE.
Status RunOnExistingRow(sqlite3* db, std::string_view sql, const std::vector<Value>& values,
                        std::string_view what) {
  RETURN_IF_ERROR(Run(db, sql, values, what));
  if (sqlite3_changes(db) == 0) return NotFound(what);
  return Status();
}

// Constant SQL without parameters, possibly several statements (migrations, BEGIN/COMMIT).
Status ExecScript(sqlite3* db, const char* sql, std::string_view what) {
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return SqliteError(db, rc, what);
  return Status();
}

// The fields of each row type, in the order of its k*Columns list: one definition drives both
// binding (Values) and reading (Read). `R` is the row type, const or not.
template <typename R, typename Row>
concept RowOf = std::same_as<std::remove_const_t<R>, Row>;

auto Fields(RowOf<IssuerRow> auto& r) { return std::tie(r.name, r.secret, r.created_at); }
auto Fields(RowOf<RevocationRow> auto& r) { return std::tie(r.iss, r.jti, r.revoked_at); }

auto Fields(RowOf<SandboxRow> auto& r) {
  return std::tie(r.id, r.iss, r.sub, r.name, r.image, r.state, r.limits_json, r.idle_timeout_s,
                  r.uid_base, r.created_at, r.updated_at, r.last_active_at, r.init_pid,
                  r.init_start_time, r.source, r.budget_json, r.cpu_billed_usec, r.egress_json, r.network);
}

auto Fields(RowOf<SnapshotRow> auto& r) {
  return std::tie(r.id, r.sandbox_id, r.iss, r.sub, r.image, r.created_at, r.bytes, r.uid_base,
                  r.limits_json);
}

auto Fields(RowOf<CommandRow> auto& r) {
  return std::tie(r.id, r.sandbox_id, r.iss, r.sub, r.argv_json, r.pty, r.state, r.outcome_json,
                  r.created_at, r.ended_at, r.init_seq, r.seq_reserved);
}

auto Fields(RowOf<SessionRow> auto& r) {
  return std::tie(r.id, r.sandbox_id, r.iss, r.sub, r.state, r.agent_session, r.parent_id, r.options_json,
                  r.budget_json, r.outcome_json, r.cost_micro_usd, r.turns, r.created_at, r.updated_at, r.ended_at,
                  r.seq_reserved);
}

auto Fields(RowOf<ExecutionRow> auto& r) {
  return std::tie(r.id, r.iss, r.sub, r.state, r.sandbox_id, r.session_id, r.request_json, r.base_commit,
                  r.head_commit, r.summary, r.outcome, r.cost_micro_usd, r.usage_json, r.files_json, r.diff,
                  r.diff_truncated, r.bundle_bytes, r.error, r.created_at, r.updated_at, r.ended_at);
}

auto Fields(RowOf<LedgerRow> auto& r) {
  return std::tie(r.id, r.iss, r.sub, r.kind, r.amount, r.at, r.sandbox_id, r.session_id, r.model,
                  r.input_tokens, r.output_tokens, r.cache_write_tokens, r.cache_read_tokens);
}

auto Fields(RowOf<LedgerTotal> auto& r) {
  return std::tie(r.kind, r.sandbox_id, r.session_id, r.amount, r.count);
}

auto Fields(RowOf<EventRow> auto& r) {
  return std::tie(r.seq, r.sandbox_id, r.type, r.data_json, r.at);
}

Value ToValue(const std::string& text) { return std::string_view(text); }
Value ToValue(int64_t number) { return number; }
Value ToValue(bool flag) { return int64_t{flag}; }

template <typename Row>
std::vector<Value> Values(const Row& row) {
  return std::apply([](const auto&... field) { return std::vector<Value>{ToValue(field)...}; },
                    Fields(row));
}

// Reads the columns of the current row left to right.
class Columns {
 public:
  explicit Columns(sqlite3_stmt* stmt) : stmt_(stmt) {}

  bool IsNull() const { return sqlite3_column_type(stmt_, next_) == SQLITE_NULL; }
  void Into(int64_t& number) { number = sqlite3_column_int64(stmt_, next_++); }
  void Into(bool& flag) { flag = sqlite3_column_int64(stmt_, next_++) != 0; }
  void Into(std::string& text) {
    // column_text before column_bytes (the documented order): converting a non-text value to
    // text can change its size.
    const auto* data = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, next_));
    auto size = static_cast<size_t>(sqlite3_column_bytes(stmt_, next_++));
    text = data != nullptr ? std::string(data, size) : std::string();
  }

 private:
  sqlite3_stmt* stmt_;
  int next_ = 0;
};

void Read(Columns& c, std::string& text) { c.Into(text); }

template <typename Row>
void Read(Columns& c, Row& row) {
  // A fold over the comma operator evaluates left to right, in column order.
  std::apply([&c](auto&... field) { (c.Into(field), ...); }, Fields(row));
}

template <typename Row>
StatusOr<std::vector<Row>> Query(sqlite3* db, std::string_view sql,
                                 const std::vector<Value>& values, std::string_view what) {
  ASSIGN_OR_RETURN(Stmt stmt, Prepare(db, sql, values, what));
  std::vector<Row> rows;
  while (true) {
    ASSIGN_OR_RETURN(bool has_row, Step(db, stmt.get(), what));
    if (!has_row) break;
    Columns columns(stmt.get());
    Read(columns, rows.emplace_back());
  }
  return rows;
}

template <typename Row>
StatusOr<std::optional<Row>> QueryOne(sqlite3* db, std::string_view sql,
                                      const std::vector<Value>& values, std::string_view what) {
  ASSIGN_OR_RETURN(std::vector<Row> rows, Query<Row>(db, sql, values, what));
  if (rows.empty()) return std::optional<Row>();
  return std::optional<Row>(std::move(rows.front()));
}

// The first column of the first row; nullopt when there is no row or the value is NULL.
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

// ---------------------------------------------------------------------------------------------
// Opening and migrating

// The file holds issuer secrets: create it 0600 ourselves (SQLite would use 0644 less the umask),
// and tighten an existing one. SQLite gives the -wal and -shm files the database file's mode.
Status CreatePrivateFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return ErrnoError("store: open " + path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("store: stat " + path);
  if (!S_ISREG(st.st_mode)) return Status::Error("store: " + path + " is not a regular file");
  if ((st.st_mode & 07777) != 0600 && ::fchmod(fd.get(), 0600) != 0) {
    return ErrnoError("store: chmod 0600 " + path);
  }
  return Status();
}

Status Configure(sqlite3* db, Synchronous synchronous) {
  // journal_mode does not fail when WAL is impossible (e.g. no shared memory for the -shm file):
  // it answers with the mode still in effect.
  ASSIGN_OR_RETURN(std::optional<std::string> mode,
                   QueryOne<std::string>(db, "PRAGMA journal_mode=WAL", {}, "set journal_mode"));
  if (mode.value_or("") != "wal") {
    return Status::Error("store: journal_mode is '" + mode.value_or("") + "', not 'wal'");
  }
  RETURN_IF_ERROR(ExecScript(
      db,
      synchronous == Synchronous::kFull ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL",
      "set synchronous"));
  // Foreign keys are off by default on every new connection, and the pragma is silently ignored
  // by builds without them: read it back, since DeleteSandbox relies on ON DELETE CASCADE.
  RETURN_IF_ERROR(ExecScript(db, "PRAGMA foreign_keys=ON", "enable foreign keys"));
  ASSIGN_OR_RETURN(std::optional<int64_t> foreign_keys,
                   QueryInt(db, "PRAGMA foreign_keys", {}, "read foreign_keys"));
  if (foreign_keys != 1) return Status::Error("store: this SQLite cannot enforce foreign keys");
  return Status();
}

StatusOr<int64_t> UserVersion(sqlite3* db) {
  ASSIGN_OR_RETURN(std::optional<int64_t> version,
                   QueryInt(db, "PRAGMA user_version", {}, "read user_version"));
  return version.value_or(0);
}

Status CheckNotNewer(int64_t version) {
  if (version <= kLatestSchemaVersion) return Status();
  return Status::Error("store schema version " + std::to_string(version) +
                       " is newer than this corrald supports (" +
                       std::to_string(kLatestSchemaVersion) + ")");
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

// Runs the migration from the current user_version, read again under the write lock so that two
// processes opening the same new file do not both run it. Called inside a transaction.
Status MigrateOneStep(sqlite3* db) {
  ASSIGN_OR_RETURN(int64_t version, UserVersion(db));
  RETURN_IF_ERROR(CheckNotNewer(version));
  if (version >= kLatestSchemaVersion) return Status();
  std::string what = "migrate to schema version " + std::to_string(version + 1);
  RETURN_IF_ERROR(ExecScript(db, kMigrations[version], what));
  // PRAGMA takes no bound parameters; the value is our own integer.
  std::string set_version = "PRAGMA user_version=" + std::to_string(version + 1);
  return ExecScript(db, set_version.c_str(), what);
}

// Before a store of an older schema is migrated: a copy of it as it was, beside it
// (<path>.schema-<N>.before-migration-<UTC time>, 0600), so that going back to the previous
// corrald stays possible. No copy, no migration.
Status CopyBeforeMigrating(sqlite3* db, const std::string& path) {
  ASSIGN_OR_RETURN(int64_t version, UserVersion(db));
  RETURN_IF_ERROR(CheckNotNewer(version));
  if (version == 0 || version >= kLatestSchemaVersion) return Status();  // new, or nothing to do
  const time_t now = time(nullptr);
  struct tm tm;
  gmtime_r(&now, &tm);
  char stamp[32];
  strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
  const std::string copy = path + ".schema-" + std::to_string(version) + ".before-migration-" + stamp;
  auto made = BackupStore(path, copy);
  if (!made.ok()) {
    return Status::Error("store: no copy of schema " + std::to_string(version) + " before migrating it to " +
                             std::to_string(kLatestSchemaVersion) + ", so it was not migrated: " +
                             made.status().message(),
                         made.status().error_number());
  }
  LogInfo("store", "copied the store before migrating it",
          {{"from", std::to_string(version)}, {"to", std::to_string(kLatestSchemaVersion)}, {"copy", copy}});
  return Status();
}

// Each migration in its own transaction, so a failure leaves the last good version.
Status Migrate(sqlite3* db) {
  ASSIGN_OR_RETURN(int64_t version, UserVersion(db));
  RETURN_IF_ERROR(CheckNotNewer(version));
  while (version < kLatestSchemaVersion) {
    RETURN_IF_ERROR(RunTransaction(db, [db] { return MigrateOneStep(db); }));
    ASSIGN_OR_RETURN(int64_t migrated, UserVersion(db));
    if (migrated <= version) {
      return Status::Error("store: user_version stayed " + std::to_string(migrated) +
                           " after a migration");
    }
    version = migrated;
  }
  return Status();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Store

StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path, Synchronous synchronous) {
  if (sqlite3_libversion_number() < kMinSqliteVersion) {
    return Status::Error(std::string("store: SQLite 3.37 or newer is required, this is ") +
                         sqlite3_libversion());
  }
  RETURN_IF_ERROR(CreatePrivateFile(path));
  sqlite3* raw = nullptr;
  // The class mutex serializes every use of the connection, so SQLite's own is not needed.
  // No SQLITE_OPEN_CREATE: the file was just created with the right mode.
  int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW, nullptr);
  Db db(raw);  // open_v2 returns a handle to close even when it fails.
  if (raw == nullptr) return Status::Error("store: open " + path + ": out of memory", ENOMEM);
  if (rc != SQLITE_OK) return SqliteError(raw, rc, "open " + path);
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, 5000);
  RETURN_IF_ERROR(Configure(raw, synchronous));
  RETURN_IF_ERROR(CopyBeforeMigrating(raw, path));
  RETURN_IF_ERROR(Migrate(raw));

  std::unique_ptr<Store> store(new Store());
  store->db_ = db.release();
  return store;
}

Store::~Store() {
  // Every statement is finalized, by its Stmt or with the cache, so this close cannot be
  // refused with SQLITE_BUSY. Closing the last connection checkpoints the WAL and removes the
  // -wal and -shm files.
  CloseDb(db_);
}

int Store::schema_version() const {
  std::lock_guard lock(mu_);
  StatusOr<int64_t> version = UserVersion(db_);
  return version.ok() ? static_cast<int>(*version) : -1;
}

int Store::latest_schema_version() { return kLatestSchemaVersion; }

Status Store::InTransaction(const std::function<Status()>& body) {
  std::lock_guard lock(mu_);
  if (transaction_depth_ > 0) return body();  // Joins the outer transaction.
  ++transaction_depth_;
  Status status = RunTransaction(db_, body);
  --transaction_depth_;
  return status;
}

// Issuers ------------------------------------------------------------------------------------

Status Store::AddIssuer(const IssuerRow& issuer) {
  std::lock_guard lock(mu_);
  return Run(db_, Sql({"INSERT INTO issuers (", kIssuerColumns, ") VALUES (?1, ?2, ?3)"}),
             Values(issuer), "add issuer " + issuer.name);
}

StatusOr<std::optional<IssuerRow>> Store::GetIssuer(const std::string& name) {
  std::lock_guard lock(mu_);
  return QueryOne<IssuerRow>(db_, Sql({"SELECT ", kIssuerColumns, " FROM issuers WHERE name = ?1"}),
                             {name}, "get issuer " + name);
}

StatusOr<std::vector<IssuerRow>> Store::ListIssuers() {
  std::lock_guard lock(mu_);
  return Query<IssuerRow>(db_, Sql({"SELECT ", kIssuerColumns, " FROM issuers ORDER BY name"}), {},
                          "list issuers");
}

Status Store::RemoveIssuer(const std::string& name) {
  std::lock_guard lock(mu_);
  return RunOnExistingRow(db_, "DELETE FROM issuers WHERE name = ?1", {name},
                          "remove issuer " + name);
}

Status Store::SetIssuerSecret(const std::string& name, const std::string& secret) {
  std::lock_guard lock(mu_);
  return RunOnExistingRow(db_, "UPDATE issuers SET secret = ?2 WHERE name = ?1", {name, secret},
                          "replace the secret of issuer " + name);
}

Status Store::AddRevocation(const RevocationRow& revocation) {
  std::lock_guard lock(mu_);
  return Run(db_, Sql({"INSERT INTO revocations (", kRevocationColumns, ") VALUES (?1, ?2, ?3)"}),
             Values(revocation), "revoke token " + revocation.jti);
}

StatusOr<std::vector<RevocationRow>> Store::ListRevocations() {
  std::lock_guard lock(mu_);
  return Query<RevocationRow>(db_, Sql({"SELECT ", kRevocationColumns, " FROM revocations ORDER BY revoked_at, jti"}),
                              {}, "list revocations");
}

// Sandboxes ----------------------------------------------------------------------------------

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

// Snapshots ----------------------------------------------------------------------------------

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

// Commands -----------------------------------------------------------------------------------

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

// Events -------------------------------------------------------------------------------------

StatusOr<int64_t> Store::AppendEvent(const std::string& sandbox_id, const std::string& type,
                                     const std::string& data_json) {
  const int64_t at = static_cast<int64_t>(time(nullptr));
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(Run(db_,
                      "INSERT INTO events (sandbox_id, type, data_json, at) "
                      "VALUES (?1, ?2, ?3, ?4)",
                      {sandbox_id, type, data_json, at},
                      "append event " + type + " of " + sandbox_id));
  // Per connection, and the mutex keeps other inserts on this connection out until we read it.
  const int64_t seq = static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
  if (event_listener_) event_listener_(EventRow{seq, sandbox_id, type, data_json, at});
  return seq;
}

void Store::SetEventListener(std::function<void(const EventRow&)> listener) {
  std::lock_guard lock(mu_);
  event_listener_ = std::move(listener);
}

StatusOr<std::vector<EventRow>> Store::ListEvents(const std::string& sandbox_id, int64_t after_seq,
                                                  int64_t limit) {
  std::lock_guard lock(mu_);
  return Query<EventRow>(db_,
                         Sql({"SELECT ", kEventColumns,
                              " FROM events WHERE sandbox_id = ?1 AND seq > ?2 "
                              "ORDER BY seq LIMIT ?3"}),
                         {sandbox_id, after_seq, ClampLimit(limit)},
                         "list events of " + sandbox_id);
}

// ---------------------------------------------------------------------------------------------
// Ledger

namespace {

Status CheckLedgerKind(const std::string& kind) {
  if (kind == "ai" || kind == "compute") return Status();
  return Status::Error("store: ledger kind must be \"ai\" or \"compute\", not \"" + kind + "\"", EINVAL);
}

}  // namespace

StatusOr<int64_t> Store::AddLedger(const LedgerRow& row) {
  RETURN_IF_ERROR(CheckLedgerKind(row.kind));
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(Run(db_,
                      Sql({"INSERT INTO ledger (", kLedgerColumns.substr(4),
                           ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"}),
                      {row.iss, row.sub, row.kind, row.amount, row.at, row.sandbox_id, row.session_id, row.model,
                       row.input_tokens, row.output_tokens, row.cache_write_tokens, row.cache_read_tokens},
                      "add to the ledger of " + row.sub));
  return static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
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
