// Backing up and restoring the store (supervisor/store/store_backup.h) on real SQLite files: a copy made
// while another thread writes is whole and holds what was committed before it; a file that is
// no corral store is refused; a restore is refused while the state directory's lock is held, and
// otherwise keeps the replaced store (and its WAL) aside.
#include "supervisor/store/store_backup.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "common/file_util.h"
#include "common/unique_fd.h"
#include "supervisor/store/store.h"
#include "tests/testing/temp_dir.h"

namespace corral::supervisor {
namespace {

class StoreBackupTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"store-backup"};
  const std::string dir_ = tmp_.path();
};

TEST_F(StoreBackupTest, ACopyWhileWritingIsWholeAndPrivate) {
  auto store = Store::Open(dir_ + "/corrald.db");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE((*store)->AddIssuer({"first", "s1", 1}).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> written{0};
  std::thread writer([&] {
    for (int i = 0; !stop; ++i) {
      if ((*store)->AddIssuer({"w" + std::to_string(i), "s", 2}).ok()) ++written;
    }
  });
  while (written < 20) std::this_thread::yield();
  auto made = BackupStore(dir_ + "/corrald.db", dir_ + "/copy.db");
  stop = true;
  writer.join();
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  struct stat st {};
  ASSERT_EQ(stat((dir_ + "/copy.db").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(made->bytes, st.st_size);
  EXPECT_EQ(made->schema_version, Store::latest_schema_version());
  auto copy = Store::Open(dir_ + "/copy.db");
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  auto issuers = (*copy)->ListIssuers();
  ASSERT_TRUE(issuers.ok());
  EXPECT_GE(issuers->size(), 21u);  // "first" and at least the 20 written before the copy
  EXPECT_LE(issuers->size(), static_cast<size_t>(written) + 1);
  // It does not overwrite.
  auto again = BackupStore(dir_ + "/corrald.db", dir_ + "/copy.db");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().error_number(), EEXIST);
}

TEST_F(StoreBackupTest, OnlyACorralStoreIsAccepted) {
  std::ofstream(dir_ + "/junk.db") << std::string(4096, 'x');
  EXPECT_FALSE(CheckStoreFile(dir_ + "/junk.db").ok());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ + "/other.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t (x)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto other = CheckStoreFile(dir_ + "/other.db");
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("not a corral store"), std::string::npos);
  EXPECT_FALSE(CheckStoreFile(dir_ + "/missing.db").ok());
  // Control: a real store.
  ASSERT_TRUE(Store::Open(dir_ + "/real.db").ok());
  auto real = CheckStoreFile(dir_ + "/real.db");
  ASSERT_TRUE(real.ok()) << real.status().ToString();
  EXPECT_EQ(*real, Store::latest_schema_version());
}

TEST_F(StoreBackupTest, RestoreWaitsForTheLockAndKeepsTheReplacedStore) {
  const std::string state = dir_ + "/state";
  ASSERT_EQ(mkdir(state.c_str(), 0700), 0);
  {
    auto old_store = Store::Open(state + "/corrald.db");
    ASSERT_TRUE(old_store.ok());
    ASSERT_TRUE((*old_store)->AddIssuer({"old", "s", 1}).ok());
    auto source = Store::Open(dir_ + "/source.db");
    ASSERT_TRUE(source.ok());
    ASSERT_TRUE((*source)->AddIssuer({"backed-up", "s", 1}).ok());
    ASSERT_TRUE(BackupStore(dir_ + "/source.db", dir_ + "/backup.db").ok());
  }
  std::ofstream(state + "/corrald.db-wal") << "";  // as a crashed daemon leaves it
  {
    // A running corrald's lock: held by another process (the lock is the process's, so one this
    // process holds would not refuse it).
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    const pid_t holder = fork();
    ASSERT_GE(holder, 0);
    if (holder == 0) {
      auto lock = LockFileForProcess(state + "/corrald.lock");
      (void)!write(ready[1], lock.ok() ? "y" : "n", 1);
      pause();
      _exit(0);
    }
    close(ready[1]);
    char held = 0;
    ASSERT_EQ(read(ready[0], &held, 1), 1);
    close(ready[0]);
    auto refused = RestoreStore(dir_ + "/backup.db", state);
    kill(holder, SIGKILL);
    waitpid(holder, nullptr, 0);
    ASSERT_EQ(held, 'y');
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().error_number(), EBUSY);
  }
  auto restored = RestoreStore(dir_ + "/backup.db", state);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(restored->db_path, state + "/corrald.db");
  EXPECT_EQ(access((restored->set_aside + "-wal").c_str(), F_OK), 0);
  EXPECT_NE(access((state + "/corrald.db-wal").c_str(), F_OK), 0);
  auto now = Store::Open(state + "/corrald.db");
  ASSERT_TRUE(now.ok());
  auto issuers = (*now)->ListIssuers();
  ASSERT_TRUE(issuers.ok());
  ASSERT_EQ(issuers->size(), 1u);
  EXPECT_EQ((*issuers)[0].name, "backed-up");
  auto aside = Store::Open(restored->set_aside);
  ASSERT_TRUE(aside.ok());
  EXPECT_EQ((*(*aside)->ListIssuers())[0].name, "old");
}

}  // namespace
}  // namespace corral::supervisor
