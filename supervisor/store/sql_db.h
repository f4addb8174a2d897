// One connection to the store's SQL engine (internal to supervisor/store/): SQLite
// (sql_sqlite.h, the embedded default) or PostgreSQL (sql_postgres.h, a fleet's shared state).
// The store's .cc files write one SQL text for both, in the part of SQL the two share:
// parameters `?1 .. ?n` (each engine binds them its own way), `ON CONFLICT`, `RETURNING`,
// `TRUE`/`FALSE`, no engine's own functions. What differs (types, autoincrement, pragmas) is in
// each engine's schema (store_schema_sqlite.cc, store_schema_postgres.cc).
//
// Errors carry an errno the store's callers act on, the same from both engines:
//   EEXIST        a unique key is taken
//   ENOENT        a foreign key names a missing row (or, from the helpers, no such row)
//   EBUSY         the database is busy (SQLite's lock held past the timeout; PostgreSQL's
//                 serialization failure or deadlock after the transaction's retries)
//   ECONNREFUSED  the database cannot be reached now (PostgreSQL down, restarting, or the
//                 connection lost): retry later; the connection is made again at the next call
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"

namespace corral::supervisor::store_internal {

// Bytes bound as a BLOB / BYTEA (text is bound as TEXT).
struct Blob {
  std::string_view data;
};

// Text that may hold any bytes (a git diff: NUL, invalid UTF-8): TEXT in SQLite, which keeps
// any bytes, BYTEA in PostgreSQL, whose TEXT refuses them.
struct Bytes {
  std::string_view data;
};

// A bound parameter, for ?1, ?2, ... in order: text is a view, or a string of its own (a typed
// column's encoding, store_columns.h).
using Value = std::variant<int64_t, std::string_view, Blob, std::string, Bytes>;

// The current row of a result, its columns numbered from 0.
class SqlRow {
 public:
  virtual ~SqlRow() = default;
  virtual bool IsNull(int column) const = 0;
  virtual int64_t Int(int column) const = 0;
  // Text, or a BLOB's bytes.
  virtual std::string Text(int column) const = 0;
};

class SqlDb {
 public:
  virtual ~SqlDb() = default;

  // Runs one statement with `values` bound to ?1 ..; calls `on_row` (when set) for every row it
  // returns. Returns how many rows an INSERT, UPDATE or DELETE changed itself (not those of an
  // ON DELETE CASCADE). `what` names the operation in errors ("store: <what>: <reason>").
  virtual StatusOr<int64_t> Execute(std::string_view sql, const std::vector<Value>& values,
                                    std::string_view what,
                                    const std::function<void(const SqlRow&)>& on_row) = 0;

  // Constant SQL without parameters, possibly several statements (migrations).
  virtual Status ExecScript(std::string_view sql, std::string_view what) = 0;

  // `body` in one transaction: committed when it returns OK, rolled back otherwise. Serializable:
  // a body that reads and then writes sees no write of another connection in between (SQLite
  // takes the write lock at BEGIN; PostgreSQL runs SERIALIZABLE and, on a serialization failure
  // or deadlock, rolls back and runs `body` again, so a body must be safe to run more than once:
  // it may only read and write through this connection and assign its results).
  virtual Status Transaction(const std::function<Status()>& body) = 0;

  // `body` in one transaction whose contenders take turns on a row lock instead of on what they
  // read: its first statement writes a row that all of them write (an upsert of one key), which
  // waits for a concurrent writer of that row to commit, and each later statement sees what was
  // committed before it began (PostgreSQL READ COMMITTED; SQLite takes the write lock at BEGIN,
  // as Transaction does). For a hot, small table that SERIALIZABLE would make every concurrent
  // transaction run again, whatever rows they touch (PostgreSQL's predicate locks on a small
  // table cover all of it). A lock waited for kLockWaitMs: EBUSY. Run once.
  static constexpr int kLockWaitMs = 1000;
  virtual Status LockedTransaction(const std::function<Status()>& body) = 0;
};

// "store: <what>: no such row", ENOENT.
Status NotFound(std::string_view what);

}  // namespace corral::supervisor::store_internal
