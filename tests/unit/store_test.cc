// The store against real database files in a temporary directory (SQLite) and real databases in
// the run's PostgreSQL server (TEST_P: both engines; store_postgres_test.cc: what only
// PostgreSQL has).
//
// What the daemon relies on is checked from outside the Store where it can be: file modes with
// stat(2), journal mode and schema version with a second, raw sqlite3 connection, crash
// durability with a child process that dies by SIGKILL right after a commit.
//
// Here: opening, schema, durability, transactions and concurrency, issuers; the tables of
// sandboxes and commands in store_sandboxes_test.cc, sessions, executions and the ledger in
// store_sessions_test.cc (the fixtures in store_test_util.h).
#include "supervisor/store/store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/file_util.h"
#include "tests/unit/store_test_util.h"

namespace corral::supervisor {
namespace {

// ---------------------------------------------------------------------------------------------
// Opening, schema, durability

TEST_F(StoreTest, OpenCreatesPrivateFileInWalMode) {
  EXPECT_EQ(FileMode(path_), 0600u);
  // WAL leaves a -wal file next to the database while a connection is open, with its mode.
  ASSERT_TRUE(store_->AddIssuer({"corp", "s3cret", 1}).ok());
  EXPECT_TRUE(Exists(path_ + "-wal"));
  EXPECT_EQ(FileMode(path_ + "-wal"), 0600u);
  RawDb raw(path_);
  EXPECT_EQ(raw.Exec("PRAGMA journal_mode"), "wal");

  // Control: a database SQLite creates on its own is neither private nor in WAL mode.
  const std::string plain = dir_.path() + "/plain.db";
  RawDb other(plain);
  other.Exec("CREATE TABLE t (x INTEGER)");
  EXPECT_EQ(other.Exec("PRAGMA journal_mode"), "delete");
  EXPECT_NE(FileMode(plain), 0600u);
}

TEST_F(StoreTest, OpenTightensModeOfExistingFile) {
  store_.reset();
  ASSERT_EQ(::chmod(path_.c_str(), 0644), 0);
  ASSERT_EQ(FileMode(path_), 0644u);
  store_ = OpenStore();
  ASSERT_NE(store_, nullptr);
  EXPECT_EQ(FileMode(path_), 0600u);
}

TEST_P(StoreEngineTest, ReopenKeepsData) {
  ASSERT_TRUE(store_->AddIssuer({"corp", "s3cret", 42}).ok());
  ASSERT_GE(Create("sb_1"), 0);
  store_.reset();
  store_ = OpenStore();
  ASSERT_NE(store_, nullptr);
  auto issuer = store_->GetIssuer("corp");
  ASSERT_TRUE(issuer.ok()) << issuer.status().ToString();
  ASSERT_TRUE(issuer->has_value());
  EXPECT_EQ((*issuer)->secret, "s3cret");
  EXPECT_EQ((*issuer)->created_at, 42);
  auto sandbox = store_->GetSandbox("sb_1");
  ASSERT_TRUE(sandbox.ok());
  EXPECT_TRUE(sandbox->has_value());
  // Control: a fresh database has none of it.
  std::unique_ptr<Store> other = OpenOther();
  ASSERT_NE(other, nullptr);
  auto missing = other->GetIssuer("corp");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
}

// Statements are prepared once per connection and reused. Two stores side by side each see
// their own file; a store closed and opened again (its new connection may get the freed one's
// address) prepares afresh instead of reusing statements of the closed connection.
TEST_F(StoreTest, StatementsAreReusedPerConnectionAndDroppedWithIt) {
  const std::string other_path = dir_.path() + "/other.db";
  for (int round = 0; round < 20; ++round) {
    auto other = Store::Open(other_path);
    ASSERT_TRUE(other.ok()) << other.status().ToString();
    const std::string name = "issuer" + std::to_string(round);
    ASSERT_TRUE((*other)->AddIssuer({name, "secret-" + name, round}).ok());
    ASSERT_TRUE(store_->AddIssuer({"main" + std::to_string(round), "s", round}).ok());
    // The same statement text on both connections, alternately: each answers from its own file.
    auto listed = (*other)->ListIssuers();
    ASSERT_TRUE(listed.ok()) << listed.status().ToString();
    EXPECT_EQ(listed->size(), static_cast<size_t>(round + 1));
    auto mine = store_->ListIssuers();
    ASSERT_TRUE(mine.ok());
    EXPECT_EQ(mine->size(), static_cast<size_t>(round + 1));
    auto got = (*other)->GetIssuer(name);
    ASSERT_TRUE(got.ok() && got->has_value());
    EXPECT_EQ((*got)->secret, "secret-" + name);
    // Control: the main store does not have the other's issuer.
    auto absent = store_->GetIssuer(name);
    ASSERT_TRUE(absent.ok());
    EXPECT_FALSE(absent->has_value());
  }
}

TEST_F(StoreTest, SchemaVersionIsLatest) {
  EXPECT_GE(Store::latest_schema_version(), 1);
  EXPECT_EQ(store_->schema_version(), Store::latest_schema_version());
  RawDb raw(path_);
  EXPECT_EQ(raw.Exec("PRAGMA user_version"), std::to_string(Store::latest_schema_version()));
  // STRICT tables reject a value of the wrong type (a plain table would store it as text).
  EXPECT_EQ(raw.Exec("SELECT strict FROM pragma_table_list WHERE name = 'sandboxes'"), "1");
}

TEST_F(StoreTest, RefusesDatabaseFromNewerCorrald) {
  store_.reset();
  const int future = Store::latest_schema_version() + 1;
  {
    RawDb raw(path_);
    raw.Exec("PRAGMA user_version=" + std::to_string(future));
  }
  auto refused = Store::Open(path_);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "store schema version " + std::to_string(future) +
                                            " is newer than this corrald supports (" +
                                            std::to_string(Store::latest_schema_version()) + ")");
  // Control: back at the latest version, the same file opens again.
  {
    RawDb raw(path_);
    raw.Exec("PRAGMA user_version=" + std::to_string(Store::latest_schema_version()));
  }
  auto reopened = Store::Open(path_);
  EXPECT_TRUE(reopened.ok()) << reopened.status().ToString();
}

// A database of schema 1 (before snapshots knew their uid range) gains the columns, with
// defaults, and keeps its rows.
TEST_F(StoreTest, MigratesSchemaOneSnapshots) {
  store_.reset();
  const std::string old_path = dir_.path() + "/v1.db";
  {
    RawDb raw(old_path);
    raw.Exec(
        "CREATE TABLE issuers (name TEXT NOT NULL PRIMARY KEY, secret TEXT NOT NULL, created_at INTEGER NOT NULL) STRICT;"
        "CREATE TABLE sandboxes (id TEXT NOT NULL PRIMARY KEY, iss TEXT NOT NULL, sub TEXT NOT NULL) STRICT;"
        "INSERT INTO sandboxes VALUES ('sb_1', 'corp', 'alice');"
        "CREATE TABLE snapshots (id TEXT NOT NULL PRIMARY KEY, sandbox_id TEXT NOT NULL, iss TEXT NOT NULL,"
        " sub TEXT NOT NULL, image TEXT NOT NULL, created_at INTEGER NOT NULL, bytes INTEGER NOT NULL) STRICT;"
        "INSERT INTO snapshots VALUES ('snap_old', 'sb_1', 'corp', 'alice', 'host', 5, 4096);"
        "CREATE TABLE commands (id TEXT NOT NULL PRIMARY KEY, sandbox_id TEXT NOT NULL, iss TEXT NOT NULL,"
        " sub TEXT NOT NULL, argv_json TEXT NOT NULL, pty INTEGER NOT NULL, state TEXT NOT NULL,"
        " outcome_json TEXT NOT NULL, created_at INTEGER NOT NULL, ended_at INTEGER NOT NULL,"
        " init_seq INTEGER NOT NULL, UNIQUE (sandbox_id, init_seq)) STRICT;"
        "INSERT INTO commands VALUES ('cmd_old', 'sb_1', 'corp', 'alice', '[\"true\"]', 0, 'running', '', 5, 0, 1);"
        "PRAGMA user_version=1;");
  }
  auto opened = Store::Open(old_path);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ((*opened)->schema_version(), Store::latest_schema_version());
  auto old = (*opened)->GetSnapshot("snap_old");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  ASSERT_TRUE(old->has_value());
  EXPECT_EQ((*old)->bytes, 4096);
  EXPECT_EQ((*old)->uid_base, 0);
  EXPECT_EQ((*old)->limits, isolation::ResourceLimits{});
  // 2 -> 3: a command from before has reserved no seq (its adopter numbers from 1, as before).
  auto command = (*opened)->GetCommand("cmd_old");
  ASSERT_TRUE(command.ok()) << command.status().ToString();
  ASSERT_TRUE(command->has_value());
  EXPECT_EQ((*command)->init_seq, 1);
  EXPECT_EQ((*command)->seq_reserved, 0);

  // The store as it was before the migration is beside it: schema 1, its rows, 0600.
  auto list = [](const std::string& dir) {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) names.push_back(entry.path().filename());
    return names;
  };
  const std::vector<std::string> copies = list(dir_.path());
  std::vector<std::string> made;
  for (const auto& name : copies) {
    if (name.rfind("v1.db.schema-1.before-migration-", 0) == 0) made.push_back(name);
  }
  ASSERT_EQ(made.size(), 1u) << testing::PrintToString(copies);
  const std::string copy = dir_.path() + "/" + made[0];
  struct stat st;
  ASSERT_EQ(stat(copy.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  {
    RawDb raw(copy);
    EXPECT_EQ(raw.Exec("PRAGMA user_version"), "1");
    EXPECT_EQ(raw.Exec("SELECT id FROM snapshots"), "snap_old");
  }
  // Control: opening it again (now at the latest schema) copies nothing more, nor does a new store.
  opened->reset();
  auto again = Store::Open(old_path);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  const std::vector<std::string> after = list(dir_.path());
  size_t copies_after = 0;
  for (const auto& name : after) copies_after += name.find(".before-migration-") != std::string::npos;
  EXPECT_EQ(copies_after, 1u) << testing::PrintToString(after);
}

// No copy, no migration: a store that cannot be copied (its directory is full) stays at its schema.
TEST_F(StoreTest, AStoreThatCannotBeCopiedIsNotMigrated) {
  store_.reset();
  const std::string old_path = dir_.path() + "/old.db";
  {
    RawDb raw(old_path);
    raw.Exec("CREATE TABLE issuers (name TEXT NOT NULL PRIMARY KEY, secret TEXT NOT NULL, created_at INTEGER NOT NULL) STRICT;"
             "CREATE TABLE sandboxes (id TEXT NOT NULL PRIMARY KEY, iss TEXT NOT NULL, sub TEXT NOT NULL) STRICT;"
             "PRAGMA user_version=1;");
  }
  // The copy's name is taken by a directory the backup cannot replace: the copy fails.
  const std::string blocker_prefix = old_path + ".schema-1.before-migration-";
  const time_t now = time(nullptr);
  for (time_t t = now; t <= now + 2; ++t) {  // the second Open may fall in the next second or two
    struct tm tm;
    gmtime_r(&t, &tm);
    char stamp[32];
    strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
    ASSERT_EQ(mkdir((blocker_prefix + stamp).c_str(), 0700), 0);
  }
  auto refused = Store::Open(old_path);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("no copy of schema 1 before migrating it"), std::string::npos)
      << refused.status().ToString();
  {
    RawDb raw(old_path);
    EXPECT_EQ(raw.Exec("PRAGMA user_version"), "1");
  }
}

TEST_F(StoreTest, RefusesFileThatIsNotADatabase) {
  const std::string garbage = dir_.path() + "/garbage.db";
  ASSERT_TRUE(WriteNewFile(garbage, std::string(4096, 'x'), 0600).ok());
  auto refused = Store::Open(garbage);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("store:"), std::string::npos)
      << refused.status().ToString();
  // Control: an empty file is a valid empty database and gets the schema.
  const std::string empty = dir_.path() + "/empty.db";
  ASSERT_TRUE(WriteNewFile(empty, "", 0600).ok());
  auto opened = Store::Open(empty);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ((*opened)->schema_version(), Store::latest_schema_version());
}

// The settings of a connection (synchronous, foreign_keys) are its own: another connection to
// the file cannot see them. This catches the first connection SQLite opens while it lives
// (sqlite3_auto_extension runs on every new connection of the process), which is the one
// Store::Open makes, so that the test can read the settings back from it.
class FirstConnection {
 public:
  FirstConnection() {
    caught_ = nullptr;
    EXPECT_EQ(sqlite3_auto_extension(reinterpret_cast<void (*)()>(&Catch)), SQLITE_OK);
  }
  ~FirstConnection() { sqlite3_cancel_auto_extension(reinterpret_cast<void (*)()>(&Catch)); }
  FirstConnection(const FirstConnection&) = delete;
  FirstConnection& operator=(const FirstConnection&) = delete;

  // The value of PRAGMA `name` on the caught connection, as text ("" when none was caught).
  std::string Pragma(const std::string& name) const {
    if (caught_ == nullptr) return "";
    std::string value;
    const std::string sql = "PRAGMA " + name;
    EXPECT_EQ(sqlite3_exec(
                  caught_, sql.c_str(),
                  [](void* out, int columns, char** values, char**) {
                    if (columns > 0) *static_cast<std::string*>(out) = values[0] ? values[0] : "NULL";
                    return 0;
                  },
                  &value, nullptr),
              SQLITE_OK)
        << sql << ": " << sqlite3_errmsg(caught_);
    return value;
  }

 private:
  static int Catch(sqlite3* db, const char**, const sqlite3_api_routines*) {
    if (caught_ == nullptr) caught_ = db;
    return SQLITE_OK;
  }
  static inline sqlite3* caught_ = nullptr;
};

// FULL reaches the store's own connection (PRAGMA synchronous 2), along with what every store
// has: WAL and foreign keys; the store works. Control: the default is NORMAL (1).
TEST_F(StoreTest, OpenWithFullSynchronousWorks) {
  store_.reset();
  {
    FirstConnection opened;
    auto store = Store::Open(path_, Synchronous::kFull);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ(opened.Pragma("synchronous"), "2");
    EXPECT_EQ(opened.Pragma("journal_mode"), "wal");
    EXPECT_EQ(opened.Pragma("foreign_keys"), "1");
    EXPECT_TRUE((*store)->AddIssuer({"corp", "s", 1}).ok());
    auto issuer = (*store)->GetIssuer("corp");
    ASSERT_TRUE(issuer.ok()) << issuer.status().ToString();
    EXPECT_TRUE(issuer->has_value());
  }
  FirstConnection opened;
  auto store = Store::Open(path_);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(opened.Pragma("synchronous"), "1");
  EXPECT_EQ(opened.Pragma("foreign_keys"), "1");
}

// A child commits a row and is killed (kill -9: no destructor, no close, no checkpoint); the
// row must be in the file when the parent opens it.
TEST_F(StoreTest, CommittedRowSurvivesKill) {
  store_.reset();
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto store = Store::Open(path_);
    if (!store.ok()) _exit(2);
    SandboxRow row = NewSandbox("sb_crash");
    if (!(*store)->CreateSandbox(row, kUidFirst, kUidStep, 4).ok()) _exit(3);
    if (!(*store)->AppendEvent("sb_crash", "sandbox.created", "{}").ok()) _exit(4);
    ::raise(SIGKILL);
    _exit(5);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  // The commits are still only in the WAL: nothing closed or checkpointed the database.
  EXPECT_TRUE(Exists(path_ + "-wal"));

  store_ = OpenStore();
  ASSERT_NE(store_, nullptr);
  auto row = store_->GetSandbox("sb_crash");
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  ASSERT_TRUE(row->has_value());
  EXPECT_EQ((*row)->uid_base, kUidFirst);
  auto events = store_->ListEvents("sb_crash", 0);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), 1u);
  // Control: a row nobody wrote is not there.
  auto absent = store_->GetSandbox("sb_other");
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->has_value());
}

// ---------------------------------------------------------------------------------------------
// Issuers

TEST_P(StoreEngineTest, IssuersAddGetListRemove) {
  ASSERT_TRUE(store_->AddIssuer({"zeta", "z", 1}).ok());
  ASSERT_TRUE(store_->AddIssuer({"alpha", "a", 2}).ok());
  auto got = store_->GetIssuer("alpha");
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->name, "alpha");
  EXPECT_EQ((*got)->secret, "a");
  EXPECT_EQ((*got)->created_at, 2);
  auto missing = store_->GetIssuer("beta");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());

  auto list = store_->ListIssuers();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].name, "alpha");  // By name, not insertion order.
  EXPECT_EQ((*list)[1].name, "zeta");

  ASSERT_TRUE(store_->RemoveIssuer("zeta").ok());
  list = store_->ListIssuers();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name, "alpha");
}

TEST_P(StoreEngineTest, DuplicateIssuerIsEexist) {
  ASSERT_TRUE(store_->AddIssuer({"corp", "first", 1}).ok());
  Status duplicate = store_->AddIssuer({"corp", "second", 2});
  EXPECT_FALSE(duplicate.ok());
  EXPECT_EQ(duplicate.error_number(), EEXIST) << duplicate.ToString();
  auto kept = store_->GetIssuer("corp");
  ASSERT_TRUE(kept.ok());
  ASSERT_TRUE(kept->has_value());
  EXPECT_EQ((*kept)->secret, "first");
  // Control: another name is accepted.
  EXPECT_TRUE(store_->AddIssuer({"other", "second", 2}).ok());
}

TEST_P(StoreEngineTest, RemoveMissingIssuerIsEnoent) {
  Status missing = store_->RemoveIssuer("nobody");
  EXPECT_FALSE(missing.ok());
  EXPECT_EQ(missing.error_number(), ENOENT) << missing.ToString();
  // Control: removing one that exists works, once.
  ASSERT_TRUE(store_->AddIssuer({"corp", "s", 1}).ok());
  EXPECT_TRUE(store_->RemoveIssuer("corp").ok());
  EXPECT_EQ(store_->RemoveIssuer("corp").error_number(), ENOENT);
}

// ---------------------------------------------------------------------------------------------
// Transactions and concurrency

TEST_P(StoreEngineTest, FailedTransactionLeavesNothing) {
  Status failed = store_->InTransaction([&]() -> Status {
    RETURN_IF_ERROR(store_->AddIssuer({"corp", "s", 1}));
    auto row = store_->CreateSandbox(NewSandbox("sb_1"), kUidFirst, kUidStep, 4);
    if (!row.ok()) return row.status();
    return Status::Error("caller gave up", EINTR);
  });
  EXPECT_EQ(failed.message(), "caller gave up");
  EXPECT_EQ(failed.error_number(), EINTR);
  auto issuer = store_->GetIssuer("corp");
  ASSERT_TRUE(issuer.ok());
  EXPECT_FALSE(issuer->has_value());
  auto sandbox = store_->GetSandbox("sb_1");
  ASSERT_TRUE(sandbox.ok());
  EXPECT_FALSE(sandbox->has_value());

  // Control: the same body returning OK commits both rows.
  Status committed = store_->InTransaction([&]() -> Status {
    RETURN_IF_ERROR(store_->AddIssuer({"corp", "s", 1}));
    return store_->CreateSandbox(NewSandbox("sb_1"), kUidFirst, kUidStep, 4).status();
  });
  ASSERT_TRUE(committed.ok()) << committed.ToString();
  issuer = store_->GetIssuer("corp");
  ASSERT_TRUE(issuer.ok());
  EXPECT_TRUE(issuer->has_value());
  sandbox = store_->GetSandbox("sb_1");
  ASSERT_TRUE(sandbox.ok());
  EXPECT_TRUE(sandbox->has_value());
}

TEST_P(StoreEngineTest, NestedTransactionJoinsOuter) {
  Status failed = store_->InTransaction([&]() -> Status {
    Status inner = store_->InTransaction([&] { return store_->AddIssuer({"inner", "s", 1}); });
    if (!inner.ok()) return inner;
    // Visible inside the outer transaction...
    auto seen = store_->GetIssuer("inner");
    if (!seen.ok() || !seen->has_value()) return Status::Error("inner row not visible");
    return Status::Error("outer fails");
  });
  EXPECT_EQ(failed.message(), "outer fails");
  // ...and rolled back with it: the inner call did not commit on its own.
  auto issuer = store_->GetIssuer("inner");
  ASSERT_TRUE(issuer.ok());
  EXPECT_FALSE(issuer->has_value());

  // Control: when the outer one succeeds, the inner write is committed.
  ASSERT_TRUE(
      store_
          ->InTransaction([&]() -> Status {
            return store_->InTransaction([&] { return store_->AddIssuer({"inner", "s", 1}); });
          })
          .ok());
  issuer = store_->GetIssuer("inner");
  ASSERT_TRUE(issuer.ok());
  EXPECT_TRUE(issuer->has_value());
}

// Four threads creating sandboxes through `stores` (one Store shared, or one each): every create
// succeeds and the uid bases are exactly the lowest slots.
void CreateConcurrently(const std::vector<Store*>& stores, int per_thread) {
  constexpr int kThreads = 4;
  const int64_t slots = kThreads * per_thread;
  std::vector<std::vector<int64_t>> bases(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    Store* store = stores[t % stores.size()];
    threads.emplace_back([store, t, per_thread, slots, &bases] {
      for (int i = 0; i < per_thread; ++i) {
        std::string id = "sb_" + std::to_string(t) + "_" + std::to_string(i);
        auto row = store->CreateSandbox(NewSandbox(id), kUidFirst, kUidStep, slots);
        bases[t].push_back(row.ok() ? row->uid_base : -row.status().error_number());
        // Other statements interleaved with the creates of the other threads.
        (void)store->AppendEvent(id, "sandbox.created", "{}");
        (void)store->ListSandboxes("corp", "alice");
      }
    });
  }
  for (auto& thread : threads) thread.join();
  std::set<int64_t> distinct;
  for (const auto& per : bases) {
    for (int64_t base : per) {
      EXPECT_GE(base, 0) << "error " << ErrnoName(static_cast<int>(-base));
      distinct.insert(base);
    }
  }
  EXPECT_EQ(distinct.size(), static_cast<size_t>(slots));
  if (!distinct.empty()) {
    EXPECT_EQ(*distinct.begin(), kUidFirst);
    EXPECT_EQ(*distinct.rbegin(), kUidFirst + (slots - 1) * kUidStep);
  }
}

TEST_P(StoreEngineTest, ConcurrentCreatesGetDistinctUidBases) {
  constexpr int kPerThread = 50;
  CreateConcurrently({store_.get()}, kPerThread);
  // The table is now full.
  EXPECT_EQ(Create("sb_extra", 4 * kPerThread), -ENOSPC);
  // Control: one slot more and it fits.
  EXPECT_EQ(Create("sb_extra", 4 * kPerThread + 1), kUidFirst + 4 * kPerThread * kUidStep);
}

// Two connections to one database (two processes, or two nodes of a fleet): no mutex is shared,
// so distinct bases rest on the engine's transactions alone (SQLite: BEGIN IMMEDIATE and the busy
// timeout; PostgreSQL: SERIALIZABLE, a loser run again).
TEST_P(StoreEngineTest, ConcurrentCreatesOverTwoConnections) {
  std::unique_ptr<Store> second = OpenStore();
  ASSERT_NE(second, nullptr);
  CreateConcurrently({store_.get(), second.get()}, 25);
}

// Another process holding the write lock: the store waits (busy timeout) and then reports EBUSY.
TEST_F(StoreTest, WriteLockHeldElsewhereIsEbusyAfterTimeout) {
  RawDb other(path_);
  other.Exec("BEGIN IMMEDIATE");
  auto start = std::chrono::steady_clock::now();
  Status busy = store_->AddIssuer({"corp", "s", 1});
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(busy.error_number(), EBUSY) << busy.ToString();
  EXPECT_GE(waited, std::chrono::seconds(4));
  // Reads are not blocked by a writer in WAL mode.
  auto read = store_->ListIssuers();
  EXPECT_TRUE(read.ok()) << read.status().ToString();
  // Control: once the other side lets go, the same write succeeds.
  other.Exec("ROLLBACK");
  EXPECT_TRUE(store_->AddIssuer({"corp", "s", 1}).ok());
}

CORRAL_STORE_ON_BOTH_ENGINES();

}  // namespace
}  // namespace corral::supervisor
