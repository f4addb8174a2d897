// Backing up and restoring corrald's store (SQLite, WAL). Apart from the Store (it needs only
// SQLite) so that the CLI's offline restore uses the same code as the daemon's online backup.
//
//   backup:  corral admin backup FILE -> POST /v1/admin/backup -> BackupStore, in the daemon,
//            while it serves
//   restore: corral admin restore FILE, with corrald stopped -> RestoreStore
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace corral::supervisor {

struct BackupInfo {
  std::string path;
  int64_t bytes = 0;
  int64_t schema_version = 0;
};

// An online, consistent copy of the store at `db_path` into the new file `dest` (mode 0600: it
// holds issuer secrets), by SQLite's backup API over a connection of its own: the copy is one
// read transaction (WAL: the daemon's writes go on meanwhile), written to `dest`.tmp as a plain
// (non-WAL) database, checked (PRAGMA quick_check), synced and renamed into place. EEXIST when
// `dest` exists. Blocks: call it off the event loop.
StatusOr<BackupInfo> BackupStore(const std::string& db_path, const std::string& dest);

// Whether `path` is a corral store (quick_check passes, it has the issuers table); its schema
// version. (corrald refuses at start a store newer than it.)
StatusOr<int64_t> CheckStoreFile(const std::string& path);

struct RestoreInfo {
  std::string db_path;      // <state_dir>/corrald.db, now the backup's copy
  std::string set_aside;    // where the store it replaced went ("" when there was none)
  int64_t schema_version = 0;
};

// Puts the backup `file` in place of <state_dir>/corrald.db. Refused (EBUSY) while a corrald
// runs on state_dir: it holds <state_dir>/corrald.lock, which this holds in turn until done, so
// none can start meanwhile. The store it replaces is kept as corrald.db.before-restore-<time>
// (with its -wal, if any). The copy is written beside, synced and renamed into place.
StatusOr<RestoreInfo> RestoreStore(const std::string& file, const std::string& state_dir);

}  // namespace corral::supervisor
