// The store's SQLite engine (internal to supervisor/store/): one connection to a file, WAL,
// foreign keys on, cached prepared statements. Serialized by the caller (the store's lock).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "supervisor/store/sql_db.h"

namespace corral::supervisor::store_internal {

// Opens `path` (created beforehand by the caller with its mode) read-write, with extended result
// codes, a 5 s busy timeout, journal_mode WAL, synchronous FULL or NORMAL and foreign keys
// (each read back: a build or a file system that cannot is refused).
StatusOr<std::unique_ptr<SqlDb>> OpenSqlite(const std::string& path, bool synchronous_full);

}  // namespace corral::supervisor::store_internal
