#include "supervisor/store/store_sql.h"

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

Status DeleteRow(std::recursive_mutex& mu, SqlDb* db, const Table& table, const std::string& id) {
  std::lock_guard lock(mu);
  return RunOnExistingRow(db, Sql({"DELETE FROM ", table.name, " WHERE id = ?1"}), {id},
                          Sql({"delete ", table.noun, " "}) + id);
}

StatusOr<int64_t> CountOwned(std::recursive_mutex& mu, SqlDb* db, const Table& table, const std::string& iss,
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
// Statements

Status Run(SqlDb* db, std::string_view sql, const std::vector<Value>& values, std::string_view what) {
  return db->Execute(sql, values, what, nullptr).status();
}

Status RunOnExistingRow(SqlDb* db, std::string_view sql, const std::vector<Value>& values,
                        std::string_view what) {
  ASSIGN_OR_RETURN(int64_t changed, db->Execute(sql, values, what, nullptr));
  if (changed == 0) return NotFound(what);
  return Status();
}

StatusOr<std::optional<int64_t>> QueryInt(SqlDb* db, std::string_view sql, const std::vector<Value>& values,
                                          std::string_view what) {
  std::optional<int64_t> number;
  bool first = true;
  RETURN_IF_ERROR(db->Execute(sql, values, what, [&](const SqlRow& row) {
                      if (first && !row.IsNull(0)) number = row.Int(0);
                      first = false;
                    }).status());
  return number;
}

}  // namespace corral::supervisor::store_internal
