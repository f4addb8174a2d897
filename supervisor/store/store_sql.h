// SQL for the store's .cc files (internal), over either engine (sql_db.h): statements assembled
// from the column lists of store_rows.h, values bound, rows read into the row types. Every
// function takes the connection; the caller (a Store method) holds the store's lock.
#pragma once

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
#include "supervisor/store/sql_db.h"
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

// A negative LIMIT means "no limit" to SQLite and is an error to PostgreSQL; a caller's negative
// limit means none.
inline int64_t ClampLimit(int64_t limit) { return limit < 0 ? 0 : limit; }

// ---- Statements

// Runs one statement that returns no rows (or whose rows do not matter).
Status Run(SqlDb* db, std::string_view sql, const std::vector<Value>& values, std::string_view what);

// Run() for an UPDATE or DELETE of one row by key: ENOENT when no row matched. Only the rows the
// statement itself changed count, not those removed by ON DELETE CASCADE.
Status RunOnExistingRow(SqlDb* db, std::string_view sql, const std::vector<Value>& values,
                        std::string_view what);

// ---- Values and rows

inline Value ToValue(const std::string& text) { return std::string_view(text); }
inline Value ToValue(int64_t number) { return number; }
inline Value ToValue(bool flag) { return int64_t{flag}; }
inline Value ToValue(const isolation::ResourceLimits& limits) { return LimitsColumn(limits); }
inline Value ToValue(const std::optional<EgressRules>& rules) { return EgressColumn(rules); }
inline Value ToValue(const Budget& budget) { return BudgetToJson(budget); }
inline Value ToValue(const rootfs::ImageConfig& config) { return ImageConfigColumn(config); }
inline Value ToValue(const std::vector<std::string>& names) { return NamesColumn(names); }
template <typename S>
Value ToValue(const BytesField<S>& field) {
  return Bytes{field.text};
}

// A row's fields as bound values, in column order.
template <typename Row>
std::vector<Value> Values(const Row& row) {
  return std::apply([](const auto&... field) { return std::vector<Value>{ToValue(field)...}; },
                    Fields(row));
}

// Reads the columns of the current row left to right.
class Columns {
 public:
  explicit Columns(const SqlRow& row) : row_(row) {}

  bool IsNull() const { return row_.IsNull(next_); }
  void Into(int64_t& number) { number = row_.Int(next_++); }
  void Into(bool& flag) { flag = row_.Int(next_++) != 0; }
  void Into(std::string& text) { text = row_.Text(next_++); }
  void Into(isolation::ResourceLimits& limits) { limits = LimitsOfColumn(row_.Text(next_++)); }
  void Into(std::optional<EgressRules>& rules) { rules = EgressOfColumn(row_.Text(next_++)); }
  void Into(Budget& budget) { budget = BudgetFromJson(row_.Text(next_++)); }
  void Into(rootfs::ImageConfig& config) { config = ImageConfigOfColumn(row_.Text(next_++)); }
  void Into(std::vector<std::string>& names) { names = NamesOfColumn(row_.Text(next_++)); }
  void Into(BytesField<std::string> field) { field.text = row_.Text(next_++); }

 private:
  const SqlRow& row_;
  int next_ = 0;
};

inline void Read(Columns& c, std::string& text) { c.Into(text); }
inline void Read(Columns& c, int64_t& number) { c.Into(number); }

template <typename Row>
void Read(Columns& c, Row& row) {
  // A fold over the comma operator evaluates left to right, in column order.
  std::apply([&c](auto&&... field) { (c.Into(field), ...); }, Fields(row));
}

template <typename Row>
StatusOr<std::vector<Row>> Query(SqlDb* db, std::string_view sql, const std::vector<Value>& values,
                                 std::string_view what) {
  std::vector<Row> rows;
  RETURN_IF_ERROR(db->Execute(sql, values, what, [&rows](const SqlRow& row) {
                      Columns columns(row);
                      Read(columns, rows.emplace_back());
                    }).status());
  return rows;
}

template <typename Row>
StatusOr<std::optional<Row>> QueryOne(SqlDb* db, std::string_view sql, const std::vector<Value>& values,
                                      std::string_view what) {
  ASSIGN_OR_RETURN(std::vector<Row> rows, Query<Row>(db, sql, values, what));
  if (rows.empty()) return std::optional<Row>();
  return std::optional<Row>(std::move(rows.front()));
}

// One row by its key, in a table of store_rows.h, under the store's lock `mu` (errors say
// "insert session ses_...", as every method of the store's).
template <typename Row>
Status InsertRow(std::recursive_mutex& mu, SqlDb* db, const Table& table, const Row& row) {
  std::lock_guard lock(mu);
  return Run(db, InsertSql(table.name, table.columns), Values(row), Sql({"insert ", table.noun, " "}) + row.id);
}
// Every column but the key; ENOENT when there is no such row.
template <typename Row>
Status UpdateRow(std::recursive_mutex& mu, SqlDb* db, const Table& table, const Row& row) {
  std::lock_guard lock(mu);
  return RunOnExistingRow(db, UpdateSql(table.name, table.columns), Values(row),
                          Sql({"update ", table.noun, " "}) + row.id);
}
template <typename Row>
StatusOr<std::optional<Row>> GetRow(std::recursive_mutex& mu, SqlDb* db, const Table& table, const std::string& id) {
  std::lock_guard lock(mu);
  return QueryOne<Row>(db, GetSql(table.name, table.columns), {id}, Sql({"get ", table.noun, " "}) + id);
}

// "DELETE FROM <table> WHERE id = ?1"; ENOENT when there is no such row.
Status DeleteRow(std::recursive_mutex& mu, SqlDb* db, const Table& table, const std::string& id);
// How many rows of the table belong to this user (iss, sub).
StatusOr<int64_t> CountOwned(std::recursive_mutex& mu, SqlDb* db, const Table& table, const std::string& iss,
                             const std::string& sub);
// "SELECT <columns> FROM <table> WHERE <where> ORDER BY created_at, rowid": oldest first, rowid
// (insertion order: SQLite's own, a BIGSERIAL column of that name in PostgreSQL) breaking ties
// between rows created in one second.
std::string ListSql(const Table& table, std::string_view where);
template <typename Row>
StatusOr<std::vector<Row>> ListRows(std::recursive_mutex& mu, SqlDb* db, const Table& table, std::string_view where,
                                    const std::vector<Value>& values, std::string_view what) {
  std::lock_guard lock(mu);
  return Query<Row>(db, ListSql(table, where), values, what);
}

// The first column of the first row; nullopt when there is no row or the value is NULL.
StatusOr<std::optional<int64_t>> QueryInt(SqlDb* db, std::string_view sql, const std::vector<Value>& values,
                                          std::string_view what);

}  // namespace corral::supervisor::store_internal
