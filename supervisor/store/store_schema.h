// Opening the store's database and bringing its schema to this corrald's (internal to
// supervisor/store/). Each engine has its own list of migrations, append only, each run in its
// own transaction; a database newer than this corrald is refused.
//   SQLite      store_schema_sqlite.cc: the file, PRAGMA user_version, a copy before migrating
//   PostgreSQL  store_schema_postgres.cc: table corral_schema, migrations under an advisory lock
//               so that nodes starting at once migrate once
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "supervisor/store/sql_db.h"

namespace corral::supervisor::store_internal {

StatusOr<std::unique_ptr<SqlDb>> OpenSqliteStore(const std::string& path, bool synchronous_full);
StatusOr<int64_t> SqliteSchemaVersion(SqlDb* db);
int SqliteLatestSchemaVersion();

StatusOr<std::unique_ptr<SqlDb>> OpenPostgresStore(const std::string& url);
StatusOr<int64_t> PostgresSchemaVersion(SqlDb* db);
int PostgresLatestSchemaVersion();

}  // namespace corral::supervisor::store_internal
