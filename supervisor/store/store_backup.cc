#include "supervisor/store/store_backup.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "common/file_util.h"
#include "common/unique_fd.h"

namespace corral::supervisor {
namespace {

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using Db = std::unique_ptr<sqlite3, DbCloser>;

Status SqlError(sqlite3* db, const std::string& what) {
  return Status::Error("store: " + what + ": " + (db ? sqlite3_errmsg(db) : "out of memory"), EIO);
}

StatusOr<Db> Open(const std::string& path, int flags) {
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW, nullptr);
  Db db(raw);
  if (rc != SQLITE_OK) return SqlError(raw, "open " + path);
  sqlite3_busy_timeout(raw, 5000);
  return db;
}

// The first column of the first row of `sql`, as text ("" when there is no row).
StatusOr<std::string> One(sqlite3* db, const char* sql, const std::string& what) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr) != SQLITE_OK) return SqlError(db, what);
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> owned(stmt, sqlite3_finalize);
  int rc = sqlite3_step(stmt);
  if (rc == SQLITE_DONE) return std::string();
  if (rc != SQLITE_ROW) return SqlError(db, what);
  const unsigned char* text = sqlite3_column_text(stmt, 0);
  return std::string(text ? reinterpret_cast<const char*>(text) : "");
}

Status QuickCheck(sqlite3* db, const std::string& path) {
  ASSIGN_OR_RETURN(std::string verdict, One(db, "PRAGMA quick_check", "quick_check " + path));
  if (verdict != "ok") return Status::Error("store: " + path + " is damaged: " + verdict, EIO);
  return Status();
}

Status SyncFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd || ::fsync(fd.get()) != 0) return ErrnoError("sync " + path);
  return Status();
}

Status SyncDir(const std::string& path) {
  const std::string dir = path.substr(0, path.rfind('/') == 0 ? 1 : path.rfind('/'));
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd || ::fsync(fd.get()) != 0) return ErrnoError("sync " + dir);
  return Status();
}

}  // namespace

StatusOr<BackupInfo> BackupStore(const std::string& db_path, const std::string& dest) {
  if (dest.empty() || dest[0] != '/') return Status::Error("backup: " + dest + ": expected an absolute path", EINVAL);
  struct stat st {};
  if (::lstat(dest.c_str(), &st) == 0) return Status::Error("backup: " + dest + " exists", EEXIST);
  const std::string tmp = dest + ".tmp";
  {
    // Ours alone (O_EXCL), 0600 from the start: it holds the issuers' secrets.
    UniqueFd fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) {
      return errno == EEXIST ? Status::Error("backup: " + tmp + " exists (another backup to " + dest + "?)", EEXIST)
                             : ErrnoError("backup: create " + tmp);
    }
  }
  auto fail = [&tmp](Status status) {
    ::unlink(tmp.c_str());
    return status;
  };
  {
    auto source = Open(db_path, SQLITE_OPEN_READONLY);
    if (!source.ok()) return fail(source.status());
    auto target = Open(tmp, SQLITE_OPEN_READWRITE);
    if (!target.ok()) return fail(target.status());
    sqlite3_backup* backup = sqlite3_backup_init(target->get(), "main", source->get(), "main");
    if (backup == nullptr) return fail(SqlError(target->get(), "backup " + db_path));
    // Every page in one step: one read transaction, so the copy is one moment of the store.
    int rc;
    do {
      rc = sqlite3_backup_step(backup, -1);
      if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) sqlite3_sleep(20);
    } while (rc == SQLITE_OK || rc == SQLITE_BUSY || rc == SQLITE_LOCKED);
    const int finished = sqlite3_backup_finish(backup);
    if (rc != SQLITE_DONE || finished != SQLITE_OK) return fail(SqlError(target->get(), "backup " + db_path));
    // A plain database (the source's WAL mode came with the pages): one file, restored as it is.
    auto mode = One(target->get(), "PRAGMA journal_mode=DELETE", "journal_mode " + tmp);
    if (!mode.ok()) return fail(mode.status());
    Status checked = QuickCheck(target->get(), tmp);
    if (!checked.ok()) return fail(checked);
  }
  Status synced = SyncFile(tmp);
  if (!synced.ok()) return fail(synced);
  if (::stat(tmp.c_str(), &st) != 0) return fail(ErrnoError("backup: stat " + tmp));
  // No overwrite, also of a file that appeared meanwhile.
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dest.c_str(), RENAME_NOREPLACE) != 0) {
    return fail(ErrnoError("backup: rename to " + dest));
  }
  (void)SyncDir(dest);
  ASSIGN_OR_RETURN(int64_t version, CheckStoreFile(dest));
  return BackupInfo{dest, static_cast<int64_t>(st.st_size), version};
}

StatusOr<int64_t> CheckStoreFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoError("store: " + path);
  if (!S_ISREG(st.st_mode)) return Status::Error("store: " + path + " is not a regular file", EINVAL);
  ASSIGN_OR_RETURN(Db db, Open(path, SQLITE_OPEN_READONLY));
  // A file that is not SQLite at all fails here ("file is not a database").
  auto checked = QuickCheck(db.get(), path);
  if (!checked.ok()) return Status::Error(checked.message(), EINVAL);
  ASSIGN_OR_RETURN(std::string issuers,
                   One(db.get(), "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'issuers'",
                       "read " + path));
  if (issuers != "1") return Status::Error("store: " + path + " is not a corral store (no issuers table)", EINVAL);
  ASSIGN_OR_RETURN(std::string version, One(db.get(), "PRAGMA user_version", "read " + path));
  return std::stoll(version.empty() ? "0" : version);
}

StatusOr<RestoreInfo> RestoreStore(const std::string& file, const std::string& state_dir) {
  ASSIGN_OR_RETURN(int64_t version, CheckStoreFile(file));
  const std::string lock_path = state_dir + "/corrald.lock";
  auto lock = LockFileForProcess(lock_path);
  if (!lock.ok() && lock.status().error_number() == EWOULDBLOCK) {
    return Status::Error("restore: a corrald is running on " + state_dir + " (" + lock_path +
                             " is locked): stop it first (systemctl stop corrald)",
                         EBUSY);
  }
  if (!lock.ok()) return lock.status().WithContext("restore");
  RestoreInfo info;
  info.db_path = state_dir + "/corrald.db";
  info.schema_version = version;
  const std::string tmp = info.db_path + ".restore-tmp";
  {
    UniqueFd in(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    if (!in) return ErrnoError("restore: open " + file);
    ::unlink(tmp.c_str());
    UniqueFd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!out) return ErrnoError("restore: create " + tmp);
    char buf[1 << 16];
    for (;;) {
      ssize_t n = ::read(in.get(), buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoError("restore: read " + file);
      if (n == 0) break;
      for (ssize_t done = 0; done < n;) {
        ssize_t w = ::write(out.get(), buf + done, static_cast<size_t>(n - done));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return ErrnoError("restore: write " + tmp);
        done += w;
      }
    }
    if (::fsync(out.get()) != 0) return ErrnoError("restore: sync " + tmp);
  }
  struct stat st {};
  if (::lstat(info.db_path.c_str(), &st) == 0) {
    char stamp[32];
    time_t now = time(nullptr);
    struct tm tm {};
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
    info.set_aside = info.db_path + ".before-restore-" + stamp;
    if (::rename(info.db_path.c_str(), info.set_aside.c_str()) != 0) return ErrnoError("restore: set aside " + info.db_path);
    // SQLite finds a database's journal by its name: it moves along. (-shm is rebuilt.)
    for (const char* suffix : {"-wal", "-journal"}) {
      const std::string from = info.db_path + suffix;
      if (::lstat(from.c_str(), &st) == 0 && ::rename(from.c_str(), (info.set_aside + suffix).c_str()) != 0) {
        return ErrnoError("restore: set aside " + from);
      }
    }
    ::unlink((info.db_path + "-shm").c_str());
  }
  if (::rename(tmp.c_str(), info.db_path.c_str()) != 0) return ErrnoError("restore: rename to " + info.db_path);
  (void)SyncDir(info.db_path);
  return info;
}

}  // namespace corral::supervisor
