// The SQLite store against real database files in a temporary directory.
//
// What the daemon relies on is checked from outside the Store where it can be: file modes with
// stat(2), journal mode and schema version with a second, raw sqlite3 connection, crash
// durability with a child process that dies by SIGKILL right after a commit.
#include "supervisor/store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/file_util.h"

namespace corral::supervisor {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string pattern = "/tmp/corral-store-XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    if (!path_.empty()) (void)RemoveTree(path_);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A raw connection, to look at the file the way another process would.
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
        SQLITE_OK) {
      ADD_FAILURE() << "sqlite3_open_v2 " << path << ": " << sqlite3_errmsg(db_);
    }
  }
  ~RawDb() { sqlite3_close(db_); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  // Runs constant SQL; returns the first column of the last row it produced ("" if none).
  std::string Exec(const std::string& sql) {
    std::string result;
    char* error = nullptr;
    int rc = sqlite3_exec(
        db_, sql.c_str(),
        [](void* out, int columns, char** values, char**) {
          if (columns > 0) *static_cast<std::string*>(out) = values[0] ? values[0] : "NULL";
          return 0;
        },
        &result, &error);
    if (rc != SQLITE_OK) {
      ADD_FAILURE() << sql << ": " << (error ? error : "?");
      sqlite3_free(error);
    }
    return result;
  }

 private:
  sqlite3* db_ = nullptr;
};

mode_t FileMode(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

auto Fields(const SandboxRow& r) {
  return std::tie(r.id, r.iss, r.sub, r.name, r.image, r.state, r.limits_json, r.idle_timeout_s,
                  r.uid_base, r.created_at, r.updated_at, r.last_active_at, r.init_pid,
                  r.init_start_time, r.source);
}
auto Fields(const SnapshotRow& r) {
  return std::tie(r.id, r.sandbox_id, r.iss, r.sub, r.image, r.created_at, r.bytes, r.uid_base, r.limits_json);
}
auto Fields(const CommandRow& r) {
  return std::tie(r.id, r.sandbox_id, r.iss, r.sub, r.argv_json, r.pty, r.state, r.outcome_json,
                  r.created_at, r.ended_at, r.init_seq, r.seq_reserved);
}

SandboxRow NewSandbox(const std::string& id, const std::string& sub = "alice",
                      int64_t created_at = 1000) {
  SandboxRow row;
  row.id = id;
  row.iss = "corp";
  row.sub = sub;
  row.image = "host";
  row.state = "created";
  row.limits_json = "{}";
  row.created_at = created_at;
  row.updated_at = created_at;
  row.last_active_at = created_at;
  return row;
}

CommandRow NewCommand(const std::string& id, const std::string& sandbox_id) {
  CommandRow row;
  row.id = id;
  row.sandbox_id = sandbox_id;
  row.iss = "corp";
  row.sub = "alice";
  row.argv_json = R"(["true"])";
  row.state = "starting";
  row.created_at = 2000;
  return row;
}

constexpr int64_t kUidFirst = 100000;
constexpr int64_t kUidStep = 65536;

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty()) << "mkdtemp failed";
    path_ = dir_.path() + "/state.db";
    store_ = OpenStore();
    ASSERT_NE(store_, nullptr);
  }

  std::unique_ptr<Store> OpenStore() {
    auto store = Store::Open(path_);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }

  // Creates a sandbox in a range of `slots` uid ranges; returns its uid_base, or -errno.
  int64_t Create(const std::string& id, int64_t slots = 8, const std::string& sub = "alice") {
    auto row = store_->CreateSandbox(NewSandbox(id, sub), kUidFirst, kUidStep, slots);
    if (!row.ok()) return -row.status().error_number();
    return row->uid_base;
  }

  TempDir dir_;
  std::string path_;
  std::unique_ptr<Store> store_;
};

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

TEST_F(StoreTest, ReopenKeepsData) {
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
  // Control: a fresh database in another file has none of it.
  const std::string other_path = dir_.path() + "/other.db";
  auto other = Store::Open(other_path);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  auto missing = (*other)->GetIssuer("corp");
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
  EXPECT_EQ((*old)->limits_json, "{}");
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

TEST_F(StoreTest, OpenWithFullSynchronousWorks) {
  store_.reset();
  auto store = Store::Open(path_, Synchronous::kFull);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE((*store)->AddIssuer({"corp", "s", 1}).ok());
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

TEST_F(StoreTest, IssuersAddGetListRemove) {
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

TEST_F(StoreTest, DuplicateIssuerIsEexist) {
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

TEST_F(StoreTest, RemoveMissingIssuerIsEnoent) {
  Status missing = store_->RemoveIssuer("nobody");
  EXPECT_FALSE(missing.ok());
  EXPECT_EQ(missing.error_number(), ENOENT) << missing.ToString();
  // Control: removing one that exists works, once.
  ASSERT_TRUE(store_->AddIssuer({"corp", "s", 1}).ok());
  EXPECT_TRUE(store_->RemoveIssuer("corp").ok());
  EXPECT_EQ(store_->RemoveIssuer("corp").error_number(), ENOENT);
}

// ---------------------------------------------------------------------------------------------
// Sandboxes

TEST_F(StoreTest, CreateSandboxAssignsLowestFreeUidBase) {
  EXPECT_EQ(Create("sb_a"), kUidFirst);
  EXPECT_EQ(Create("sb_b"), kUidFirst + kUidStep);
  EXPECT_EQ(Create("sb_c"), kUidFirst + 2 * kUidStep);
  // A freed range is reused before a new one.
  ASSERT_TRUE(store_->DeleteSandbox("sb_b").ok());
  EXPECT_EQ(Create("sb_d"), kUidFirst + kUidStep);
  EXPECT_EQ(Create("sb_e"), kUidFirst + 3 * kUidStep);
  // The first range, too.
  ASSERT_TRUE(store_->DeleteSandbox("sb_a").ok());
  EXPECT_EQ(Create("sb_f"), kUidFirst);

  auto stored = store_->GetSandbox("sb_d");
  ASSERT_TRUE(stored.ok());
  ASSERT_TRUE(stored->has_value());
  EXPECT_EQ((*stored)->uid_base, kUidFirst + kUidStep);
}

TEST_F(StoreTest, CreateSandboxIsEnospcWhenSlotsAreFull) {
  EXPECT_EQ(Create("sb_a", 2), kUidFirst);
  EXPECT_EQ(Create("sb_b", 2), kUidFirst + kUidStep);
  EXPECT_EQ(Create("sb_c", 2), -ENOSPC);
  auto count = store_->CountSandboxes("corp", "alice");
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, 2);  // Nothing was inserted.
  // Control: with one more slot the same sandbox fits, in the next range.
  EXPECT_EQ(Create("sb_c", 3), kUidFirst + 2 * kUidStep);
  EXPECT_EQ(Create("sb_d", 0), -ENOSPC);
}

TEST_F(StoreTest, CreateSandboxIgnoresRowsOffTheGrid) {
  // A row outside the grid (e.g. from an older configuration) takes neither a slot nor
  // suggests one of its own.
  SandboxRow odd = NewSandbox("sb_odd");
  ASSERT_TRUE(store_->CreateSandbox(odd, kUidFirst + 7, kUidStep, 1).ok());
  EXPECT_EQ(Create("sb_a"), kUidFirst);
  EXPECT_EQ(Create("sb_b"), kUidFirst + kUidStep);
  // sb_odd + step lies below the next slot; it must not be handed out.
  EXPECT_EQ(Create("sb_c"), kUidFirst + 2 * kUidStep);
}

TEST_F(StoreTest, CreateSandboxRejectsInvalidRangeAndDuplicateId) {
  auto bad = store_->CreateSandbox(NewSandbox("sb_a"), kUidFirst, 0, 4);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().error_number(), EINVAL);
  bad = store_->CreateSandbox(NewSandbox("sb_a"), kUidFirst, kUidStep, int64_t{1} << 40);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().error_number(), EINVAL);
  // A range reaching uid 0xFFFFFFFF, (uid_t)-1, is refused; one just below it is the control.
  bad = store_->CreateSandbox(NewSandbox("sb_top"), 0x100000000 - kUidStep, kUidStep, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().error_number(), EINVAL);
  auto top = store_->CreateSandbox(NewSandbox("sb_top"), 0xFFFFFFFF - kUidStep, kUidStep, 1);
  ASSERT_TRUE(top.ok()) << top.status().ToString();
  EXPECT_EQ(top->uid_base, 0xFFFFFFFF - kUidStep);

  EXPECT_EQ(Create("sb_a"), kUidFirst);  // Control.
  EXPECT_EQ(Create("sb_a"), -EEXIST);
}

TEST_F(StoreTest, UpdateAndGetRoundTripEveryColumn) {
  auto created = store_->CreateSandbox(NewSandbox("sb_1"), kUidFirst, kUidStep, 4);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto before = store_->GetSandbox("sb_1");
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE(before->has_value());
  EXPECT_EQ(Fields(**before), Fields(*created));

  SandboxRow row;  // Every column differs from its value at creation.
  row.id = "sb_1";
  row.iss = "other-iss";
  row.sub = "bob";
  row.name = "my box";
  row.image = "debian";
  row.state = "running";
  row.limits_json = R"({"memory":"1G"})";
  row.idle_timeout_s = 600;
  row.uid_base = kUidFirst + 5 * kUidStep;
  row.created_at = 11;
  row.updated_at = 12;
  row.last_active_at = 13;
  row.init_pid = 4242;
  row.init_start_time = 987654321;
  row.source = "snap_abc";
  ASSERT_TRUE(store_->UpdateSandbox(row).ok());
  auto after = store_->GetSandbox("sb_1");
  ASSERT_TRUE(after.ok());
  ASSERT_TRUE(after->has_value());
  EXPECT_EQ(Fields(**after), Fields(row));

  // Text with a NUL byte, quotes and non-ASCII survives binding and reading.
  row.name = std::string("a\0b'\"é", 7);
  ASSERT_TRUE(store_->UpdateSandbox(row).ok());
  after = store_->GetSandbox("sb_1");
  ASSERT_TRUE(after.ok());
  ASSERT_TRUE(after->has_value());
  EXPECT_EQ((*after)->name, row.name);
}

TEST_F(StoreTest, UpdateMissingSandboxIsEnoentAndUidBaseStaysUnique) {
  SandboxRow ghost = NewSandbox("sb_ghost");
  Status missing = store_->UpdateSandbox(ghost);
  EXPECT_EQ(missing.error_number(), ENOENT) << missing.ToString();
  auto absent = store_->GetSandbox("sb_ghost");
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->has_value());

  ASSERT_EQ(Create("sb_a"), kUidFirst);
  ASSERT_EQ(Create("sb_b"), kUidFirst + kUidStep);
  auto b = store_->GetSandbox("sb_b");
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(b->has_value());
  SandboxRow clash = **b;
  clash.uid_base = kUidFirst;
  EXPECT_EQ(store_->UpdateSandbox(clash).error_number(), EEXIST);
  clash.uid_base = kUidFirst + 2 * kUidStep;  // Control: a free base is accepted.
  EXPECT_TRUE(store_->UpdateSandbox(clash).ok());
}

TEST_F(StoreTest, ListByUserOrAllAndCount) {
  ASSERT_TRUE(store_->CreateSandbox(NewSandbox("sb_3", "alice", 30), kUidFirst, kUidStep, 8).ok());
  ASSERT_TRUE(store_->CreateSandbox(NewSandbox("sb_1", "alice", 10), kUidFirst, kUidStep, 8).ok());
  ASSERT_TRUE(store_->CreateSandbox(NewSandbox("sb_2", "bob", 20), kUidFirst, kUidStep, 8).ok());

  auto alice = store_->ListSandboxes("corp", "alice");
  ASSERT_TRUE(alice.ok());
  ASSERT_EQ(alice->size(), 2u);
  EXPECT_EQ((*alice)[0].id, "sb_1");  // Oldest first.
  EXPECT_EQ((*alice)[1].id, "sb_3");

  auto all = store_->ListSandboxes();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].id, "sb_1");
  EXPECT_EQ((*all)[1].id, "sb_2");
  EXPECT_EQ((*all)[2].id, "sb_3");

  auto other_issuer = store_->ListSandboxes("elsewhere", "alice");
  ASSERT_TRUE(other_issuer.ok());
  EXPECT_TRUE(other_issuer->empty());

  auto count = store_->CountSandboxes("corp", "alice");
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, 2);
  count = store_->CountSandboxes("corp", "bob");
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, 1);
  count = store_->CountSandboxes("corp", "carol");
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, 0);
}

TEST_F(StoreTest, EventListenerSeesEveryAppendInOrderAsStored) {
  ASSERT_GE(Create("sb_1"), 0);
  ASSERT_TRUE(store_->AppendEvent("sb_1", "before", "{}").ok());  // before the listener: not seen
  std::vector<EventRow> seen;
  store_->SetEventListener([&](const EventRow& event) { seen.push_back(event); });
  auto first = store_->AppendEvent("sb_1", "egress", R"({"decision":"denied"})");
  auto second = store_->AppendEvent("sb_2", "sandbox.started", "{}");
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_EQ(seen.size(), 2u);
  auto stored = store_->ListEvents("sb_1", *first - 1);
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 1u);
  const EventRow& row = (*stored)[0];
  EXPECT_EQ(std::tie(seen[0].seq, seen[0].sandbox_id, seen[0].type, seen[0].data_json, seen[0].at),
            std::tie(row.seq, row.sandbox_id, row.type, row.data_json, row.at));
  EXPECT_EQ(seen[0].seq, *first);
  EXPECT_EQ(seen[1].seq, *second);
  EXPECT_EQ(seen[1].sandbox_id, "sb_2");
  store_->SetEventListener(nullptr);
  ASSERT_TRUE(store_->AppendEvent("sb_1", "after", "{}").ok());
  EXPECT_EQ(seen.size(), 2u);
}

TEST_F(StoreTest, DeleteSandboxCascadesCommandsKeepsEventsAndSnapshots) {
  ASSERT_GE(Create("sb_1"), 0);
  ASSERT_GE(Create("sb_2"), 0);
  ASSERT_TRUE(store_->InsertCommand(NewCommand("cmd_1", "sb_1")).ok());
  ASSERT_TRUE(store_->InsertCommand(NewCommand("cmd_2", "sb_2")).ok());
  ASSERT_TRUE(store_->AppendEvent("sb_1", "sandbox.created", "{}").ok());
  ASSERT_TRUE(store_->InsertSnapshot({"snap_1", "sb_1", "corp", "alice", "host", 5, 100}).ok());

  ASSERT_TRUE(store_->DeleteSandbox("sb_1").ok());
  auto gone = store_->GetSandbox("sb_1");
  ASSERT_TRUE(gone.ok());
  EXPECT_FALSE(gone->has_value());
  auto command = store_->GetCommand("cmd_1");
  ASSERT_TRUE(command.ok());
  EXPECT_FALSE(command->has_value());
  // Control: the other sandbox's command is untouched.
  command = store_->GetCommand("cmd_2");
  ASSERT_TRUE(command.ok());
  EXPECT_TRUE(command->has_value());

  auto events = store_->ListEvents("sb_1", 0);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), 1u);
  auto snapshot = store_->GetSnapshot("snap_1");
  ASSERT_TRUE(snapshot.ok());
  EXPECT_TRUE(snapshot->has_value());

  EXPECT_EQ(store_->DeleteSandbox("sb_1").error_number(), ENOENT);
}

// ---------------------------------------------------------------------------------------------
// Snapshots

TEST_F(StoreTest, SnapshotsCrud) {
  SnapshotRow a{"snap_a", "sb_1", "corp", "alice", "host", 20, 1 << 20, 0xC0010000, R"({"disk_bytes":1})"};
  SnapshotRow b{"snap_b", "sb_2", "corp", "alice", "debian", 10, 5};
  SnapshotRow c{"snap_c", "sb_3", "corp", "bob", "host", 30, 7};
  for (const SnapshotRow& row : {a, b, c}) ASSERT_TRUE(store_->InsertSnapshot(row).ok());
  EXPECT_EQ(store_->InsertSnapshot(a).error_number(), EEXIST);
  auto counted = store_->CountSnapshots("corp", "alice");
  ASSERT_TRUE(counted.ok());
  EXPECT_EQ(*counted, 2);

  auto got = store_->GetSnapshot("snap_a");
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(Fields(**got), Fields(a));

  auto alice = store_->ListSnapshots("corp", "alice");
  ASSERT_TRUE(alice.ok());
  ASSERT_EQ(alice->size(), 2u);
  EXPECT_EQ((*alice)[0].id, "snap_b");  // Oldest first.
  EXPECT_EQ((*alice)[1].id, "snap_a");

  ASSERT_TRUE(store_->DeleteSnapshot("snap_a").ok());
  got = store_->GetSnapshot("snap_a");
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value());
  EXPECT_EQ(store_->DeleteSnapshot("snap_a").error_number(), ENOENT);
  alice = store_->ListSnapshots("corp", "alice");
  ASSERT_TRUE(alice.ok());
  EXPECT_EQ(alice->size(), 1u);
}

// ---------------------------------------------------------------------------------------------
// Commands

TEST_F(StoreTest, InsertCommandNumbersPerSandbox) {
  ASSERT_GE(Create("sb_1"), 0);
  ASSERT_GE(Create("sb_2"), 0);
  auto first = store_->InsertCommand(NewCommand("cmd_1", "sb_1"));
  auto second = store_->InsertCommand(NewCommand("cmd_2", "sb_1"));
  auto other = store_->InsertCommand(NewCommand("cmd_3", "sb_2"));
  auto third = store_->InsertCommand(NewCommand("cmd_4", "sb_1"));
  ASSERT_TRUE(first.ok() && second.ok() && other.ok() && third.ok());
  EXPECT_EQ(first->init_seq, 1);
  EXPECT_EQ(second->init_seq, 2);
  EXPECT_EQ(other->init_seq, 1);
  EXPECT_EQ(third->init_seq, 3);
  auto stored = store_->GetCommand("cmd_4");
  ASSERT_TRUE(stored.ok());
  ASSERT_TRUE(stored->has_value());
  EXPECT_EQ(Fields(**stored), Fields(*third));

  // A caller's init_seq is ignored, a duplicate id refused, a missing sandbox refused.
  CommandRow preset = NewCommand("cmd_5", "sb_2");
  preset.init_seq = 99;
  auto assigned = store_->InsertCommand(preset);
  ASSERT_TRUE(assigned.ok());
  EXPECT_EQ(assigned->init_seq, 2);
  EXPECT_EQ(store_->InsertCommand(NewCommand("cmd_1", "sb_2")).status().error_number(), EEXIST);
  EXPECT_EQ(store_->InsertCommand(NewCommand("cmd_x", "sb_none")).status().error_number(), ENOENT);
}

TEST_F(StoreTest, UpdateCommandRoundTrip) {
  ASSERT_GE(Create("sb_1"), 0);
  auto inserted = store_->InsertCommand(NewCommand("cmd_1", "sb_1"));
  ASSERT_TRUE(inserted.ok());
  CommandRow row = *inserted;
  row.argv_json = R"(["sh","-c","exit 3"])";
  row.pty = true;
  row.state = "exited";
  row.outcome_json = R"({"status":"exited","code":3})";
  row.ended_at = 2500;
  row.seq_reserved = 2048;
  ASSERT_TRUE(store_->UpdateCommand(row).ok());
  auto got = store_->GetCommand("cmd_1");
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(Fields(**got), Fields(row));
  EXPECT_TRUE((*got)->pty);

  EXPECT_EQ(store_->UpdateCommand(NewCommand("cmd_none", "sb_1")).error_number(), ENOENT);
}

TEST_F(StoreTest, ListCommandsNewestFirstActiveOnlyAndLimit) {
  ASSERT_GE(Create("sb_1"), 0);
  ASSERT_GE(Create("sb_2"), 0);
  for (int i = 1; i <= 5; ++i) {
    auto row = store_->InsertCommand(NewCommand("cmd_" + std::to_string(i), "sb_1"));
    ASSERT_TRUE(row.ok());
    if (i % 2 == 0) {  // cmd_2 and cmd_4 have exited.
      row->state = "exited";
      row->outcome_json = "{}";
      ASSERT_TRUE(store_->UpdateCommand(*row).ok());
    }
  }
  ASSERT_TRUE(store_->InsertCommand(NewCommand("cmd_other", "sb_2")).ok());

  auto ids = [](const std::vector<CommandRow>& rows) {
    std::vector<std::string> out;
    for (const auto& r : rows) out.push_back(r.id);
    return out;
  };
  auto all = store_->ListCommands("sb_1", false);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(ids(*all), (std::vector<std::string>{"cmd_5", "cmd_4", "cmd_3", "cmd_2", "cmd_1"}));
  auto active = store_->ListCommands("sb_1", true);
  ASSERT_TRUE(active.ok());
  EXPECT_EQ(ids(*active), (std::vector<std::string>{"cmd_5", "cmd_3", "cmd_1"}));
  auto limited = store_->ListCommands("sb_1", false, 2);
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ(ids(*limited), (std::vector<std::string>{"cmd_5", "cmd_4"}));
  auto none = store_->ListCommands("sb_1", false, -1);  // Not SQLite's "no limit".
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

// ---------------------------------------------------------------------------------------------
// Events

TEST_F(StoreTest, EventsAppendAndListAfterSeq) {
  const int64_t before = time(nullptr);
  std::vector<int64_t> seqs;
  for (int i = 0; i < 4; ++i) {
    auto seq =
        store_->AppendEvent("sb_1", "e" + std::to_string(i), R"({"i":)" + std::to_string(i) + "}");
    ASSERT_TRUE(seq.ok()) << seq.status().ToString();
    seqs.push_back(*seq);
    auto interleaved = store_->AppendEvent("sb_2", "other", "{}");
    ASSERT_TRUE(interleaved.ok());
    EXPECT_GT(*interleaved, *seq);
  }
  EXPECT_TRUE(std::is_sorted(seqs.begin(), seqs.end()));
  EXPECT_EQ(std::set<int64_t>(seqs.begin(), seqs.end()).size(), seqs.size());

  auto all = store_->ListEvents("sb_1", 0);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 4u);
  for (size_t i = 0; i < all->size(); ++i) {
    EXPECT_EQ((*all)[i].seq, seqs[i]);
    EXPECT_EQ((*all)[i].sandbox_id, "sb_1");
    EXPECT_EQ((*all)[i].type, "e" + std::to_string(i));
    EXPECT_EQ((*all)[i].data_json, R"({"i":)" + std::to_string(i) + "}");
    EXPECT_GE((*all)[i].at, before);
    EXPECT_LE((*all)[i].at, time(nullptr));
  }
  auto after = store_->ListEvents("sb_1", seqs[1]);
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->size(), 2u);
  EXPECT_EQ((*after)[0].seq, seqs[2]);
  auto limited = store_->ListEvents("sb_1", seqs[0], 1);
  ASSERT_TRUE(limited.ok());
  ASSERT_EQ(limited->size(), 1u);
  EXPECT_EQ((*limited)[0].seq, seqs[1]);
  auto past_end = store_->ListEvents("sb_1", seqs[3]);
  ASSERT_TRUE(past_end.ok());
  EXPECT_TRUE(past_end->empty());
}

// A client resumes from the last seq it saw, so a seq is never handed out twice, even after the
// newest events are deleted (as a future retention pass would).
TEST_F(StoreTest, EventSeqIsNeverReused) {
  auto first = store_->AppendEvent("sb_1", "a", "{}");
  auto last = store_->AppendEvent("sb_1", "b", "{}");
  ASSERT_TRUE(first.ok() && last.ok());
  {
    RawDb raw(path_);
    raw.Exec("DELETE FROM events WHERE seq = " + std::to_string(*last));
    EXPECT_EQ(raw.Exec("SELECT MAX(seq) FROM events"), std::to_string(*first));  // Control.
  }
  auto next = store_->AppendEvent("sb_1", "c", "{}");
  ASSERT_TRUE(next.ok());
  EXPECT_GT(*next, *last);
}

// ---------------------------------------------------------------------------------------------
// Transactions and concurrency

TEST_F(StoreTest, FailedTransactionLeavesNothing) {
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

TEST_F(StoreTest, NestedTransactionJoinsOuter) {
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

TEST_F(StoreTest, ConcurrentCreatesGetDistinctUidBases) {
  constexpr int kPerThread = 50;
  CreateConcurrently({store_.get()}, kPerThread);
  // The table is now full.
  EXPECT_EQ(Create("sb_extra", 4 * kPerThread), -ENOSPC);
  // Control: one slot more and it fits.
  EXPECT_EQ(Create("sb_extra", 4 * kPerThread + 1), kUidFirst + 4 * kPerThread * kUidStep);
}

// Two connections to one file (two processes, as far as SQLite knows): no mutex is shared, so
// distinct bases rest on BEGIN IMMEDIATE and the busy timeout alone.
TEST_F(StoreTest, ConcurrentCreatesOverTwoConnections) {
  auto second = Store::Open(path_);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  CreateConcurrently({store_.get(), second->get()}, 25);
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

// ---------------------------------------------------------------------------------------------
// Ledger

LedgerRow Debit(const std::string& sub, const std::string& kind, int64_t amount, int64_t at,
                const std::string& session = "") {
  LedgerRow row;
  row.iss = "corp";
  row.sub = sub;
  row.kind = kind;
  row.amount = amount;
  row.at = at;
  row.session_id = session;
  row.model = kind == "ai" ? "claude-sonnet-4-5" : "";
  row.input_tokens = kind == "ai" ? 100 : 0;
  return row;
}

TEST_F(StoreTest, LedgerSumsOneUsersDebitsOfAKindInAWindow) {
  ASSERT_TRUE(store_->AddLedger(Debit("alice", "ai", 1500, 1000, "ses_a")).ok());
  ASSERT_TRUE(store_->AddLedger(Debit("alice", "ai", 250, 1999, "ses_b")).ok());
  ASSERT_TRUE(store_->AddLedger(Debit("alice", "ai", 7, 2000)).ok());       // the next window
  ASSERT_TRUE(store_->AddLedger(Debit("alice", "compute", 9000, 1500)).ok());
  ASSERT_TRUE(store_->AddLedger(Debit("bob", "ai", 100000, 1500)).ok());
  auto spent = store_->LedgerSum("corp", "alice", "ai", 1000, 2000);
  ASSERT_TRUE(spent.ok()) << spent.status().ToString();
  EXPECT_EQ(*spent, 1750);
  EXPECT_EQ(*store_->LedgerSum("corp", "alice", "ai", 2000, 3000), 7);
  EXPECT_EQ(*store_->LedgerSum("corp", "alice", "compute", 0, 3000), 9000);
  EXPECT_EQ(*store_->LedgerSum("corp", "bob", "ai", 0, 3000), 100000);
  // The user is the pair: the same sub under another issuer has spent nothing.
  EXPECT_EQ(*store_->LedgerSum("other", "alice", "ai", 0, 3000), 0);
  EXPECT_FALSE(store_->LedgerSum("corp", "alice", "dollars", 0, 3000).ok());
  EXPECT_FALSE(store_->AddLedger(Debit("alice", "dollars", 1, 1)).ok());
}

TEST_F(StoreTest, LedgerRowsKeepTheirUsageAndListInOrder) {
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(store_->AddLedger(Debit(i % 2 ? "bob" : "alice", "ai", 10 + i, 100 + i)).ok());
  auto all = store_->ListLedger("", "", 0, 1000);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 5u);
  EXPECT_EQ((*all)[0].amount, 10);
  EXPECT_EQ((*all)[0].model, "claude-sonnet-4-5");
  EXPECT_EQ((*all)[0].input_tokens, 100);
  EXPECT_LT((*all)[0].id, (*all)[1].id);
  auto alice = store_->ListLedger("corp", "alice", 0, 1000);
  ASSERT_TRUE(alice.ok());
  EXPECT_EQ(alice->size(), 3u);
  // Paging by id, and the window's end is exclusive.
  auto page = store_->ListLedger("corp", "", 0, 104, (*all)[1].id, 10);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].amount, 12);
  EXPECT_EQ((*page)[1].amount, 13);
  // Control: a debit outlives a reopen (it is committed).
  store_.reset();
  store_ = OpenStore();
  ASSERT_NE(store_, nullptr);
  EXPECT_EQ(*store_->LedgerSum("corp", "alice", "ai", 0, 1000), 10 + 12 + 14);
}

TEST_F(StoreTest, LedgerTotalsSumOneUserByKindSandboxAndSessionInAWindow) {
  LedgerRow a = Debit("alice", "ai", 1500, 1000, "ses_a");
  a.sandbox_id = "sb_1";
  LedgerRow b = Debit("alice", "ai", 250, 1100, "ses_a");
  b.sandbox_id = "sb_1";
  LedgerRow c = Debit("alice", "ai", 40, 1200, "ses_b");
  c.sandbox_id = "sb_1";
  LedgerRow cpu1 = Debit("alice", "compute", 900, 1300);
  cpu1.sandbox_id = "sb_1";
  LedgerRow cpu2 = Debit("alice", "compute", 100, 1400);
  cpu2.sandbox_id = "sb_2";
  for (const LedgerRow& row : {a, b, c, cpu1, cpu2}) ASSERT_TRUE(store_->AddLedger(row).ok());
  ASSERT_TRUE(store_->AddLedger(Debit("alice", "ai", 7, 2000, "ses_a")).ok());  // the next window
  ASSERT_TRUE(store_->AddLedger(Debit("bob", "ai", 5, 1500, "ses_a")).ok());    // another user
  auto totals = store_->LedgerTotals("corp", "alice", 1000, 2000);
  ASSERT_TRUE(totals.ok()) << totals.status().ToString();
  ASSERT_EQ(totals->size(), 4u);
  EXPECT_EQ((*totals)[0].kind, "ai");
  EXPECT_EQ((*totals)[0].session_id, "ses_a");
  EXPECT_EQ((*totals)[0].amount, 1750);
  EXPECT_EQ((*totals)[0].count, 2);
  EXPECT_EQ((*totals)[1].session_id, "ses_b");
  EXPECT_EQ((*totals)[1].amount, 40);
  EXPECT_EQ((*totals)[2].kind, "compute");
  EXPECT_EQ((*totals)[2].sandbox_id, "sb_1");
  EXPECT_EQ((*totals)[2].amount, 900);
  EXPECT_EQ((*totals)[3].sandbox_id, "sb_2");
  EXPECT_EQ((*totals)[3].amount, 100);
  // Control: an empty window has no totals.
  EXPECT_TRUE(store_->LedgerTotals("corp", "alice", 3000, 4000)->empty());
}

TEST_F(StoreTest, SandboxKeepsItsBudgetBilledCpuAndEgressRules) {
  ASSERT_GE(Create("sb_1"), 0);
  auto row = store_->GetSandbox("sb_1");
  ASSERT_TRUE(row.ok() && row->has_value());
  EXPECT_EQ((*row)->budget_json, "{}");
  EXPECT_EQ((*row)->cpu_billed_usec, 0);
  EXPECT_EQ((*row)->egress_json, "");
  SandboxRow changed = **row;
  changed.budget_json = R"({"compute_ms":5000,"window":"day"})";
  changed.cpu_billed_usec = 123456;
  changed.egress_json = R"({"domains":["*.example.test"],"ports":[443],"cidrs":[]})";
  ASSERT_TRUE(store_->UpdateSandbox(changed).ok());
  // UpdateSandbox leaves the rules alone (a row read before a change must not undo it); only
  // SetSandboxEgress writes them.
  EXPECT_EQ((*store_->GetSandbox("sb_1"))->egress_json, "");
  ASSERT_TRUE(store_->SetSandboxEgress("sb_1", changed.egress_json).ok());
  EXPECT_EQ(store_->SetSandboxEgress("sb_none", "{}").error_number(), ENOENT);
  store_.reset();
  store_ = OpenStore();
  ASSERT_NE(store_, nullptr);
  auto reread = store_->GetSandbox("sb_1");
  ASSERT_TRUE(reread.ok() && reread->has_value());
  EXPECT_EQ((*reread)->budget_json, changed.budget_json);
  EXPECT_EQ((*reread)->cpu_billed_usec, 123456);
  EXPECT_EQ((*reread)->egress_json, changed.egress_json);
}

// ---------------------------------------------------------------------------------------------
// Sessions

SessionRow NewSession(const std::string& id, const std::string& sandbox, const std::string& sub = "alice") {
  SessionRow row;
  row.id = id;
  row.sandbox_id = sandbox;
  row.iss = "corp";
  row.sub = sub;
  row.state = "initializing";
  row.agent_session = "0b8f7d1e-3c1a-4a8e-9a52-6d2b6e0f1a23";
  row.options_json = R"({"model":"claude-sonnet-5-5"})";
  row.budget_json = R"({"ai_usd":5})";
  row.created_at = row.updated_at = 100;
  return row;
}

TEST_F(StoreTest, SessionsRoundTripAndGoWithTheirSandbox) {
  ASSERT_GE(Create("sb_1"), 0);
  ASSERT_GE(Create("sb_2", 8, "bob"), 0);
  ASSERT_TRUE(store_->InsertSession(NewSession("ses_a", "sb_1")).ok());
  ASSERT_TRUE(store_->InsertSession(NewSession("ses_b", "sb_1")).ok());
  ASSERT_TRUE(store_->InsertSession(NewSession("ses_c", "sb_2", "bob")).ok());
  // A session needs its sandbox; ids are unique.
  EXPECT_FALSE(store_->InsertSession(NewSession("ses_d", "sb_nope")).ok());
  EXPECT_FALSE(store_->InsertSession(NewSession("ses_a", "sb_1")).ok());

  SessionRow row = NewSession("ses_a", "sb_1");
  row.state = "completed";
  row.outcome_json = R"({"outcome":"completed"})";
  row.cost_micro_usd = 21000;
  row.turns = 2;
  row.ended_at = 200;
  ASSERT_TRUE(store_->UpdateSession(row).ok());
  auto got = store_->GetSession("ses_a");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->state, "completed");
  EXPECT_EQ((*got)->cost_micro_usd, 21000);
  EXPECT_EQ((*got)->turns, 2);
  EXPECT_EQ((*got)->agent_session, "0b8f7d1e-3c1a-4a8e-9a52-6d2b6e0f1a23");
  EXPECT_EQ((*got)->options_json, R"({"model":"claude-sonnet-5-5"})");
  EXPECT_EQ(store_->UpdateSession(NewSession("ses_zz", "sb_1")).error_number(), ENOENT);

  auto alices = store_->ListSessions("corp", "alice");
  ASSERT_TRUE(alices.ok());
  ASSERT_EQ(alices->size(), 2u);
  EXPECT_EQ((*alices)[0].id, "ses_a");
  EXPECT_EQ(store_->ListSessions("corp", "bob")->size(), 1u);
  EXPECT_EQ(store_->ListSessions("", "", "sb_1")->size(), 2u);
  EXPECT_EQ(store_->ListSessions("other", "alice")->size(), 0u);

  // Destroying the sandbox takes its sessions (their transcripts lived in its files).
  ASSERT_TRUE(store_->DeleteSandbox("sb_1").ok());
  EXPECT_FALSE(store_->GetSession("ses_a")->has_value());
  EXPECT_TRUE(store_->GetSession("ses_c")->has_value());
}

// ---------------------------------------------------------------------------------------------
// Executions

ExecutionRow NewExecution(const std::string& id, const std::string& sub = "alice", int64_t created_at = 100) {
  ExecutionRow row;
  row.id = id;
  row.iss = "corp";
  row.sub = sub;
  row.state = "running";
  row.sandbox_id = "sb_gone";  // no sandbox row: a record outlives its sandbox
  row.session_id = "ses_1";
  row.request_json = R"({"task":"fix the bug"})";
  row.created_at = row.updated_at = created_at;
  return row;
}

TEST_F(StoreTest, ExecutionsRoundTripEveryColumnAndListOnlyTheirUsers) {
  ASSERT_TRUE(store_->InsertExecution(NewExecution("exe_a", "alice", 100)).ok());
  ASSERT_TRUE(store_->InsertExecution(NewExecution("exe_b", "alice", 101)).ok());
  ASSERT_TRUE(store_->InsertExecution(NewExecution("exe_c", "bob", 102)).ok());
  EXPECT_EQ(store_->InsertExecution(NewExecution("exe_a")).error_number(), EEXIST);

  ExecutionRow row = NewExecution("exe_a");
  row.state = "completed";
  row.base_commit = "8a59dee6b0ec2b4e753ebb806791a626a42c9f9f";
  row.head_commit = "76e477164e4deafa4533cfba1332c6b92b018ad9";
  row.summary = "done";
  row.outcome = "completed";
  row.cost_micro_usd = 12345;
  row.usage_json = R"({"input_tokens":10})";
  row.files_json = R"([{"path":"a","status":"modified"}])";
  row.diff = "diff --git a/a b/a\n";  // any bytes, NUL included
  row.diff += '\xff';
  row.diff += '\0';
  row.diff += "binary";
  row.diff_truncated = true;
  row.bundle_bytes = 7;
  row.error = "none";
  row.updated_at = row.ended_at = 300;
  ASSERT_TRUE(store_->UpdateExecution(row).ok());
  auto got = store_->GetExecution("exe_a");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  const ExecutionRow& e = **got;
  EXPECT_EQ(std::tie(e.id, e.iss, e.sub, e.state, e.sandbox_id, e.session_id, e.request_json, e.base_commit,
                     e.head_commit, e.summary, e.outcome, e.cost_micro_usd, e.usage_json, e.files_json, e.diff,
                     e.diff_truncated, e.bundle_bytes, e.error, e.created_at, e.updated_at, e.ended_at),
            std::tie(row.id, row.iss, row.sub, row.state, row.sandbox_id, row.session_id, row.request_json,
                     row.base_commit, row.head_commit, row.summary, row.outcome, row.cost_micro_usd, row.usage_json,
                     row.files_json, row.diff, row.diff_truncated, row.bundle_bytes, row.error, row.created_at,
                     row.updated_at, row.ended_at));
  EXPECT_EQ(e.diff.size(), 27u);
  EXPECT_EQ(store_->UpdateExecution(NewExecution("exe_zz")).error_number(), ENOENT);
  EXPECT_FALSE(store_->GetExecution("exe_zz")->has_value());

  // Another user's are not listed; the owner's come oldest first.
  auto alices = store_->ListExecutions("corp", "alice");
  ASSERT_TRUE(alices.ok());
  ASSERT_EQ(alices->size(), 2u);
  EXPECT_EQ((*alices)[0].id, "exe_a");
  EXPECT_EQ((*alices)[1].id, "exe_b");
  auto bobs = store_->ListExecutions("corp", "bob");
  ASSERT_EQ(bobs->size(), 1u);
  EXPECT_EQ((*bobs)[0].id, "exe_c");
  EXPECT_EQ(store_->ListExecutions("other", "alice")->size(), 0u);
  EXPECT_EQ(store_->ListExecutions("", "", "running")->size(), 2u);
}

TEST_F(StoreTest, ExecutionBundlesAreBytesStoredApartAndGoWithTheirRecord) {
  ASSERT_TRUE(store_->InsertExecution(NewExecution("exe_a")).ok());
  ASSERT_TRUE(store_->InsertExecution(NewExecution("exe_b")).ok());
  // A bundle needs its record.
  EXPECT_FALSE(store_->SetExecutionBundle("exe_nope", "x").ok());
  EXPECT_FALSE(store_->GetExecutionBundle("exe_a")->has_value());
  std::string bundle = "# v2 git bundle\n";
  for (int i = 0; i < 256; ++i) bundle += static_cast<char>(i);
  ASSERT_TRUE(store_->SetExecutionBundle("exe_a", bundle).ok());
  auto got = store_->GetExecutionBundle("exe_a");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  EXPECT_EQ(**got, bundle);
  RawDb raw(path_);
  EXPECT_EQ(raw.Exec("SELECT typeof(data) FROM execution_bundles"), "blob");
  // Replaced, and an empty one is still there (not NULL).
  ASSERT_TRUE(store_->SetExecutionBundle("exe_b", "").ok());
  ASSERT_TRUE(store_->GetExecutionBundle("exe_b")->has_value());
  EXPECT_EQ(**store_->GetExecutionBundle("exe_b"), "");
  ASSERT_TRUE(store_->SetExecutionBundle("exe_a", "second").ok());
  EXPECT_EQ(**store_->GetExecutionBundle("exe_a"), "second");
  ASSERT_TRUE(store_->DeleteExecution("exe_a").ok());
  EXPECT_FALSE(store_->GetExecutionBundle("exe_a")->has_value());
  EXPECT_EQ(store_->DeleteExecution("exe_a").error_number(), ENOENT);
  EXPECT_TRUE(store_->GetExecutionBundle("exe_b")->has_value());
}

TEST_F(StoreTest, RecoveryFailsRunningExecutionsAndLeavesEndedOnes) {
  ASSERT_TRUE(store_->InsertExecution(NewExecution("exe_run1")).ok());
  ASSERT_TRUE(store_->InsertExecution(NewExecution("exe_run2", "bob")).ok());
  ExecutionRow done = NewExecution("exe_done");
  done.state = "completed";
  done.ended_at = 150;
  ASSERT_TRUE(store_->InsertExecution(done).ok());
  ExecutionRow bad = NewExecution("exe_bad");
  bad.state = "dreaming";  // the table takes the three states only
  EXPECT_FALSE(store_->InsertExecution(bad).ok());

  auto failed = store_->FailRunningExecutions("daemon restarted", 500);
  ASSERT_TRUE(failed.ok()) << failed.status().ToString();
  ASSERT_EQ(failed->size(), 2u);
  for (const auto& row : *failed) {
    EXPECT_EQ(row.state, "failed");
    EXPECT_EQ(row.error, "daemon restarted");
  }
  for (const char* id : {"exe_run1", "exe_run2"}) {
    auto row = store_->GetExecution(id);
    ASSERT_TRUE(row.ok() && row->has_value());
    EXPECT_EQ((*row)->state, "failed") << id;
    EXPECT_EQ((*row)->error, "daemon restarted") << id;
    EXPECT_EQ((*row)->ended_at, 500) << id;
    EXPECT_EQ((*row)->sandbox_id, "sb_gone") << id;  // the rest is kept
  }
  auto kept = store_->GetExecution("exe_done");
  EXPECT_EQ((*kept)->state, "completed");
  EXPECT_EQ((*kept)->ended_at, 150);
  EXPECT_EQ((*kept)->error, "");
  // Nothing is left running: a second pass finds nothing.
  EXPECT_EQ(store_->FailRunningExecutions("again", 600)->size(), 0u);
}

}  // namespace
}  // namespace corral::supervisor

