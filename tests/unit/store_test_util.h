// The fixtures and helpers of the store's unit tests (store_test.cc, store_sandboxes_test.cc,
// store_sessions_test.cc): a store in a temporary directory (StoreTest: SQLite, for what only a
// file has) or on either engine (StoreEngineTest, a TEST_P over SQLite and a database of its own
// in the run's PostgreSQL server, tests/testing/postgres.h), a raw connection to look at the
// database the way another process would, and rows to insert.
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/file_util.h"
#include "supervisor/store/store.h"
#include "tests/testing/postgres.h"
#include "tests/testing/temp_dir.h"

namespace corral::supervisor {

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

inline mode_t FileMode(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

inline bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

inline auto Fields(const SandboxRow& r) {
  return std::tie(r.id, r.iss, r.sub, r.name, r.image, r.state, r.limits, r.idle_timeout_s,
                  r.uid_base, r.created_at, r.updated_at, r.last_active_at, r.init_pid,
                  r.init_start_time, r.source);
}
inline auto Fields(const SnapshotRow& r) {
  return std::tie(r.id, r.sandbox_id, r.iss, r.sub, r.image, r.created_at, r.bytes, r.uid_base, r.limits);
}
inline auto Fields(const CommandRow& r) {
  return std::tie(r.id, r.sandbox_id, r.iss, r.sub, r.argv_json, r.pty, r.state, r.outcome_json,
                  r.created_at, r.ended_at, r.init_seq, r.seq_reserved);
}

inline SandboxRow NewSandbox(const std::string& id, const std::string& sub = "alice",
                      int64_t created_at = 1000) {
  SandboxRow row;
  row.id = id;
  row.iss = "corp";
  row.sub = sub;
  row.image = "host";
  row.state = "created";
  row.limits = {};
  row.created_at = created_at;
  row.updated_at = created_at;
  row.last_active_at = created_at;
  return row;
}

inline CommandRow NewCommand(const std::string& id, const std::string& sandbox_id) {
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

inline constexpr int64_t kUidFirst = 100000;
inline constexpr int64_t kUidStep = 65536;

// A store for each test: SQLite in the temp dir, or a new database in the run's PostgreSQL.
template <typename Base>
class StoreFixtureOf : public Base {
 protected:
  virtual StoreBackend backend() const { return StoreBackend::kSqlite; }
  bool postgres() const { return backend() == StoreBackend::kPostgresql; }

  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    path_ = dir_.path() + "/state.db";
    if (postgres()) {
      std::optional<std::string> url = test::Postgres::Get().CreateDatabase();
      if (!url) GTEST_SKIP() << test::Postgres::Get().why_not();
      url_ = *url;
    }
    store_ = OpenStore();
    ASSERT_NE(store_, nullptr);
  }

  void TearDown() override {
    store_.reset();
    if (!url_.empty()) test::Postgres::Get().DropDatabase(url_);
    for (const std::string& url : other_urls_) test::Postgres::Get().DropDatabase(url);
  }

  StoreOptions Options() const {
    StoreOptions options;
    options.backend = backend();
    options.path = path_;
    options.url = url_;
    return options;
  }

  // Another connection to the same database (a second process, or a second node).
  std::unique_ptr<Store> OpenStore() {
    auto store = Store::Open(Options());
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }

  // Another node's connection to the same database (PostgreSQL: a second node of the fleet).
  std::unique_ptr<Store> OpenNode(const std::string& id) {
    StoreOptions options = Options();
    options.node_id = id;
    auto store = Store::Open(options);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(*store) : nullptr;
  }

  // A store in a fresh database of its own (SQLite: another file), for controls.
  std::unique_ptr<Store> OpenOther() {
    StoreOptions options = Options();
    options.path = dir_.path() + "/other-" + std::to_string(other_urls_.size() + other_files_++) + ".db";
    if (postgres()) {
      std::optional<std::string> url = test::Postgres::Get().CreateDatabase();
      if (!url) return nullptr;
      options.url = *url;
      other_urls_.push_back(*url);
    }
    auto store = Store::Open(options);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }

  // Runs SQL on a raw connection of the engine's own; the first column of its last row.
  std::string RawExec(const std::string& sql) {
    if (postgres()) return test::Postgres::Get().Exec(url_, sql);
    RawDb raw(path_);
    return raw.Exec(sql);
  }

  // Creates a sandbox in a range of `slots` uid ranges; returns its uid_base, or -errno.
  int64_t Create(const std::string& id, int64_t slots = 8, const std::string& sub = "alice") {
    auto row = store_->CreateSandbox(NewSandbox(id, sub), kUidFirst, kUidStep, slots);
    if (!row.ok()) return -row.status().error_number();
    return row->uid_base;
  }

  test::TempDir dir_{"store"};
  std::string path_;
  std::string url_;  // PostgreSQL: this test's database
  std::vector<std::string> other_urls_;  // and those of OpenOther
  int other_files_ = 0;
  std::unique_ptr<Store> store_;
};

// SQLite only: what is about the file (its mode, WAL, locks, migrations of old files, backups).
using StoreTest = StoreFixtureOf<::testing::Test>;

// Either engine: the same methods must give the same answers on both.
class StoreEngineTest : public StoreFixtureOf<::testing::TestWithParam<StoreBackend>> {
 protected:
  StoreBackend backend() const override { return GetParam(); }
};

inline std::string EngineName(const ::testing::TestParamInfo<StoreBackend>& info) {
  return info.param == StoreBackend::kPostgresql ? "PostgreSQL" : "SQLite";
}

// In each test program with TEST_P(StoreEngineTest, ...).
#define CORRAL_STORE_ON_BOTH_ENGINES()                                                                  \
  INSTANTIATE_TEST_SUITE_P(Engines, StoreEngineTest,                                                   \
                           ::testing::Values(StoreBackend::kSqlite, StoreBackend::kPostgresql), EngineName)

}  // namespace corral::supervisor
