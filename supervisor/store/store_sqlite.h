// SQLite for the store's .cc files (internal): errors as Status, cached prepared statements,
// bound values, rows read into the row types of store_rows.h, and transactions. Every function
// takes the connection; the caller (a Store method) holds the store's lock.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.h"
#include "supervisor/store/store_columns.h"
#include "supervisor/store/store_rows.h"

namespace corral::supervisor::store_internal {

// SQL text from constant parts (the column lists of store_rows.h and literals).
std::string Sql(std::initializer_list<std::string_view> parts);

// Statements over one row, written from its table's column list (store_rows.h), whose first
// column is the key:
//   InsertSql  "INSERT INTO <table> (<columns>) VALUES (?1, ..., ?n)"
//   UpdateSql  "UPDATE <table> SET <column 2> = ?2, ... WHERE <column 1> = ?1", over the first
//              `count` columns (0: all of them)
//   GetSql     "SELECT <columns> FROM <table> WHERE <column 1> = ?1"
std::string InsertSql(std::string_view table, std::string_view columns);
std::string UpdateSql(std::string_view table, std::string_view columns, size_t count = 0);
std::string GetSql(std::string_view table, std::string_view columns);

// SQLite's LIMIT treats a negative count as "no limit"; a caller's negative limit means none.
inline int64_t ClampLimit(int64_t limit) { return limit < 0 ? 0 : limit; }

// ---- Errors

// "store: <what>: <SQLite's message>", with errno EEXIST for a duplicate key, ENOENT for a
// missing foreign row, EBUSY for a busy database.
Status SqliteError(sqlite3* db, int rc, std::string_view what);
// ENOENT: "store: <what>: no such row".
Status NotFound(std::string_view what);

// ---- Connections and statements

// Closes a connection after finalizing the statements cached for it.
void CloseDb(sqlite3* db);
struct DbDeleter {
  void operator()(sqlite3* db) const { CloseDb(db); }
};
using Db = std::unique_ptr<sqlite3, DbDeleter>;

// A prepared statement: a cached one goes back to the cache (reset, bindings cleared), a fresh
// one is finalized.
struct StmtDeleter {
  bool cached = false;
  void operator()(sqlite3_stmt* stmt) const;
};
using Stmt = std::unique_ptr<sqlite3_stmt, StmtDeleter>;

// Bytes bound as a BLOB (text is bound as TEXT).
struct Blob {
  std::string_view data;
};

// A bound parameter, for ?1, ?2, ... in order: text is a view, or a string of its own (a typed
// column's encoding, store_columns.h).
using Value = std::variant<int64_t, std::string_view, Blob, std::string>;

// A statement for `sql` (from the cache when an idle one is there) with `values` bound.
StatusOr<Stmt> Prepare(sqlite3* db, std::string_view sql, const std::vector<Value>& values,
                       std::string_view what);

// Steps once: true on a row, false when done.
StatusOr<bool> Step(sqlite3* db, sqlite3_stmt* stmt, std::string_view what);

// Runs one statement that returns no rows (or whose rows do not matter).
Status Run(sqlite3* db, std::string_view sql, const std::vector<Value>& values, std::string_view what);

// Run() for an UPDATE or DELETE of one row by key: ENOENT when no row matched. sqlite3_changes
// counts only the rows the statement itself changed, not those removed by ON DELETE CASCADE.
Status RunOnExistingRow(sqlite3* db, std::string_view sql, const std::vector<Value>& values,
                        std::string_view what);

// Constant SQL without parameters, possibly several statements (migrations, BEGIN/COMMIT).
Status ExecScript(sqlite3* db, const char* sql, std::string_view what);

// `body` in one transaction: BEGIN IMMEDIATE ... COMMIT, ROLLBACK when it fails.
Status RunTransaction(sqlite3* db, const std::function<Status()>& body);

// ---- Values and rows

inline Value ToValue(const std::string& text) { return std::string_view(text); }
inline Value ToValue(int64_t number) { return number; }
inline Value ToValue(bool flag) { return int64_t{flag}; }
inline Value ToValue(const isolation::ResourceLimits& limits) { return LimitsColumn(limits); }
inline Value ToValue(const std::optional<EgressRules>& rules) { return EgressColumn(rules); }
inline Value ToValue(const Budget& budget) { return BudgetToJson(budget); }
inline Value ToValue(const rootfs::ImageConfig& config) { return ImageConfigColumn(config); }

// A row's fields as bound values, in column order.
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
  void Into(isolation::ResourceLimits& limits) { limits = LimitsOfColumn(Text()); }
  void Into(std::optional<EgressRules>& rules) { rules = EgressOfColumn(Text()); }
  void Into(Budget& budget) { budget = BudgetFromJson(Text()); }
  void Into(rootfs::ImageConfig& config) { config = ImageConfigOfColumn(Text()); }

 private:
  std::string Text() {
    std::string text;
    Into(text);
    return text;
  }

  sqlite3_stmt* stmt_;
  int next_ = 0;
};

inline void Read(Columns& c, std::string& text) { c.Into(text); }
inline void Read(Columns& c, int64_t& number) { c.Into(number); }

template <typename Row>
void Read(Columns& c, Row& row) {
  // A fold over the comma operator evaluates left to right, in column order.
  std::apply([&c](auto&... field) { (c.Into(field), ...); }, Fields(row));
}

template <typename Row>
StatusOr<std::vector<Row>> Query(sqlite3* db, std::string_view sql, const std::vector<Value>& values,
                                 std::string_view what) {
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
StatusOr<std::optional<Row>> QueryOne(sqlite3* db, std::string_view sql, const std::vector<Value>& values,
                                      std::string_view what) {
  ASSIGN_OR_RETURN(std::vector<Row> rows, Query<Row>(db, sql, values, what));
  if (rows.empty()) return std::optional<Row>();
  return std::optional<Row>(std::move(rows.front()));
}

// One row by its key, in a table of store_rows.h, under the store's lock `mu` (errors say
// "insert session ses_...", as every method of the store's).
template <typename Row>
Status InsertRow(std::recursive_mutex& mu, sqlite3* db, const Table& table, const Row& row) {
  std::lock_guard lock(mu);
  return Run(db, InsertSql(table.name, table.columns), Values(row), Sql({"insert ", table.noun, " "}) + row.id);
}
// Every column but the key; ENOENT when there is no such row.
template <typename Row>
Status UpdateRow(std::recursive_mutex& mu, sqlite3* db, const Table& table, const Row& row) {
  std::lock_guard lock(mu);
  return RunOnExistingRow(db, UpdateSql(table.name, table.columns), Values(row),
                          Sql({"update ", table.noun, " "}) + row.id);
}
template <typename Row>
StatusOr<std::optional<Row>> GetRow(std::recursive_mutex& mu, sqlite3* db, const Table& table, const std::string& id) {
  std::lock_guard lock(mu);
  return QueryOne<Row>(db, GetSql(table.name, table.columns), {id}, Sql({"get ", table.noun, " "}) + id);
}

// "DELETE FROM <table> WHERE id = ?1"; ENOENT when there is no such row.
Status DeleteRow(std::recursive_mutex& mu, sqlite3* db, const Table& table, const std::string& id);
// How many rows of the table belong to this user (iss, sub).
StatusOr<int64_t> CountOwned(std::recursive_mutex& mu, sqlite3* db, const Table& table, const std::string& iss,
                             const std::string& sub);
// "SELECT <columns> FROM <table> WHERE <where> ORDER BY created_at, rowid": oldest first, rowid
// (insertion order) breaking ties between rows created in one second.
std::string ListSql(const Table& table, std::string_view where);
template <typename Row>
StatusOr<std::vector<Row>> ListRows(std::recursive_mutex& mu, sqlite3* db, const Table& table, std::string_view where,
                                    const std::vector<Value>& values, std::string_view what) {
  std::lock_guard lock(mu);
  return Query<Row>(db, ListSql(table, where), values, what);
}

// The first column of the first row; nullopt when there is no row or the value is NULL.
StatusOr<std::optional<int64_t>> QueryInt(sqlite3* db, std::string_view sql, const std::vector<Value>& values,
                                          std::string_view what);

}  // namespace corral::supervisor::store_internal
