// What only the PostgreSQL store has: its schema table and migrations by several nodes at once,
// connection strings, a server that cannot be reached or closes the connection, and
// transactions that lose to a concurrent one and run again. Against the run's PostgreSQL server
// (tests/testing/postgres.h), a database of its own per test. The methods' answers on both
// engines: the TEST_Ps of store_test.cc, store_sandboxes_test.cc and store_sessions_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "supervisor/store/sql_postgres.h"
#include "supervisor/store/store.h"
#include "tests/unit/store_test_util.h"

namespace corral::supervisor {
namespace {

class PostgresStoreTest : public StoreFixtureOf<::testing::Test> {
 protected:
  StoreBackend backend() const override { return StoreBackend::kPostgresql; }
};

TEST_F(PostgresStoreTest, SchemaIsLatestWithOneRowPerMigration) {
  const int latest = Store::latest_schema_version(StoreBackend::kPostgresql);
  EXPECT_GE(latest, 1);
  EXPECT_EQ(store_->schema_version(), latest);
  EXPECT_EQ(store_->backend(), StoreBackend::kPostgresql);
  EXPECT_EQ(RawExec("SELECT COUNT(*) FROM corral_schema"), std::to_string(latest));
  EXPECT_EQ(RawExec("SELECT MAX(version) FROM corral_schema"), std::to_string(latest));
  // The tables are PostgreSQL's own types: the ledger's amounts are BIGINT, a bundle BYTEA.
  EXPECT_EQ(RawExec("SELECT data_type FROM information_schema.columns WHERE table_name = 'ledger' "
                    "AND column_name = 'amount'"),
            "bigint");
  // Opening it again migrates nothing.
  store_ = OpenStore();
  ASSERT_NE(store_, nullptr);
  EXPECT_EQ(RawExec("SELECT COUNT(*) FROM corral_schema"), std::to_string(latest));
}

TEST_F(PostgresStoreTest, RefusesADatabaseFromANewerCorrald) {
  const int latest = Store::latest_schema_version(StoreBackend::kPostgresql);
  store_.reset();
  RawExec("INSERT INTO corral_schema (version) VALUES (" + std::to_string(latest + 1) + ")");
  auto refused = Store::Open(Options());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("newer than this corrald supports"), std::string::npos)
      << refused.status().ToString();
  // Control: back at the latest version, it opens.
  RawExec("DELETE FROM corral_schema WHERE version > " + std::to_string(latest));
  auto opened = Store::Open(Options());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ((*opened)->schema_version(), latest);
}

// Nodes of a fleet started at once on a new database: each migration runs once (the advisory
// lock), and every node opens.
TEST_F(PostgresStoreTest, NodesOpeningANewDatabaseAtOnceMigrateItOnce) {
  std::optional<std::string> fresh = test::Postgres::Get().CreateDatabase();
  ASSERT_TRUE(fresh.has_value());
  other_urls_.push_back(*fresh);
  StoreOptions options = Options();
  options.url = *fresh;
  constexpr int kNodes = 6;
  std::vector<std::thread> nodes;
  std::atomic<int> opened{0};
  std::vector<std::string> errors(kNodes);
  for (int i = 0; i < kNodes; ++i) {
    nodes.emplace_back([&, i] {
      auto store = Store::Open(options);
      if (store.ok()) {
        ++opened;
      } else {
        errors[static_cast<size_t>(i)] = store.status().ToString();
      }
    });
  }
  for (auto& node : nodes) node.join();
  EXPECT_EQ(opened.load(), kNodes);
  for (const std::string& error : errors) EXPECT_EQ(error, "");
  const int latest = Store::latest_schema_version(StoreBackend::kPostgresql);
  EXPECT_EQ(test::Postgres::Get().Exec(*fresh, "SELECT COUNT(*) FROM corral_schema"), std::to_string(latest));
}

TEST_F(PostgresStoreTest, ConnectionStringsThatDoNotParseOrReachNothingAreRefusedClearly) {
  StoreOptions options = Options();
  options.url = "postgresql://corral:hunter2@/db?host=/nonexistent-corral-dir&nonsense=1";
  auto unparsable = Store::Open(options);
  ASSERT_FALSE(unparsable.ok());
  EXPECT_EQ(unparsable.status().error_number(), EINVAL) << unparsable.status().ToString();
  EXPECT_EQ(unparsable.status().message().find("hunter2"), std::string::npos) << unparsable.status().ToString();

  options.url = "postgresql://corral:hunter2@/db?host=/nonexistent-corral-dir";
  const auto start = std::chrono::steady_clock::now();
  auto unreachable = Store::Open(options);
  ASSERT_FALSE(unreachable.ok());
  EXPECT_EQ(unreachable.status().error_number(), ECONNREFUSED) << unreachable.status().ToString();
  EXPECT_EQ(unreachable.status().message().find("hunter2"), std::string::npos) << unreachable.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // Control: this test's own URL opens.
  EXPECT_TRUE(Store::Open(Options()).ok());
}

// The server closes the store's connection while it is idle (a restart, an administrator):
// the next call makes a new one, without an error.
TEST_F(PostgresStoreTest, AConnectionClosedByTheServerIsReplacedBeforeTheNextCall) {
  ASSERT_TRUE(store_->AddIssuer({"before", "s", 1}).ok());
  const std::string terminated =
      RawExec("SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() "
              "AND application_name = 'corrald'");
  EXPECT_EQ(terminated, "1");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the server's message arrives
  Status added = store_->AddIssuer({"after", "s", 2});
  EXPECT_TRUE(added.ok()) << added.ToString();
  auto list = store_->ListIssuers();
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(list->size(), 2u);
}

// While the database refuses connections, calls fail at once with ECONNREFUSED (the API's 503);
// when it accepts them again, the store reconnects on its own.
TEST_F(PostgresStoreTest, WhileTheDatabaseIsUnreachableCallsFailFastAndRecover) {
  ASSERT_TRUE(store_->AddIssuer({"kept", "s", 1}).ok());
  test::Postgres& server = test::Postgres::Get();
  const std::string db = RawExec("SELECT current_database()");
  server.Exec(server.AdminUrl(), "ALTER DATABASE " + db + " ALLOW_CONNECTIONS false");
  server.Exec(server.AdminUrl(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '" + db +
                                     "' AND application_name = 'corrald'");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    auto refused = store_->GetIssuer("kept");
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().error_number(), ECONNREFUSED) << refused.status().ToString();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  }
  // A transaction is refused the same way, and runs nothing.
  Status in_transaction = store_->InTransaction([&] { return store_->AddIssuer({"lost", "s", 2}); });
  EXPECT_EQ(in_transaction.error_number(), ECONNREFUSED) << in_transaction.ToString();

  server.Exec(server.AdminUrl(), "ALTER DATABASE " + db + " ALLOW_CONNECTIONS true");
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // past the pause between attempts
  auto back = store_->GetIssuer("kept");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->has_value());
  auto lost = store_->GetIssuer("lost");
  ASSERT_TRUE(lost.ok());
  EXPECT_FALSE(lost->has_value());
}

// A transaction that read what another node then changed loses at its commit
// (serialization failure) and is run again, seeing the change: two nodes cannot both take the
// last slot of a limit checked in a transaction.
TEST_F(PostgresStoreTest, ATransactionThatLostToAnotherNodeRunsAgainOnWhatItWrote) {
  std::unique_ptr<Store> other = OpenStore();
  ASSERT_NE(other, nullptr);
  int attempts = 0;
  int64_t counted = -1;
  Status status = store_->InTransaction([&]() -> Status {
    ++attempts;
    ASSIGN_OR_RETURN(counted, store_->CountAllSandboxes());
    if (attempts == 1) {
      // The other node creates a sandbox and commits between this one's read and its write.
      auto row = other->CreateSandbox(NewSandbox("sb_other"), kUidFirst, kUidStep, 8);
      if (!row.ok()) return row.status();
    }
    if (counted >= 1) return Status::Error("the limit of 1 sandbox is reached", EDQUOT);
    return store_->CreateSandbox(NewSandbox("sb_mine"), kUidFirst, kUidStep, 8).status();
  });
  EXPECT_EQ(attempts, 2);
  EXPECT_EQ(counted, 1);
  EXPECT_EQ(status.error_number(), EDQUOT) << status.ToString();
  EXPECT_FALSE(store_->GetSandbox("sb_mine")->has_value());
  EXPECT_EQ(*store_->CountAllSandboxes(), 1);
  // Control: with nobody else writing, one attempt creates it.
  attempts = 0;
  ASSERT_TRUE(store_->DeleteSandbox("sb_other").ok());
  status = store_->InTransaction([&]() -> Status {
    ++attempts;
    ASSIGN_OR_RETURN(counted, store_->CountAllSandboxes());
    if (counted >= 1) return Status::Error("the limit of 1 sandbox is reached", EDQUOT);
    return store_->CreateSandbox(NewSandbox("sb_mine"), kUidFirst, kUidStep, 8).status();
  });
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(attempts, 1);
}

// Text PostgreSQL cannot hold is refused with EINVAL, not cut short at the NUL.
TEST_F(PostgresStoreTest, TextWithANulByteIsRefusedNotTruncated) {
  Status refused = store_->AddIssuer({std::string("a\0b", 3), "s", 1});
  EXPECT_EQ(refused.error_number(), EINVAL) << refused.ToString();
  EXPECT_EQ(store_->ListIssuers()->size(), 0u);
  // Control: any other text, bytes of UTF-8 included, round-trips.
  ASSERT_TRUE(store_->AddIssuer({"caf\xc3\xa9 'quoted' \"x\" ?1 $1", "s", 1}).ok());
  auto got = store_->GetIssuer("caf\xc3\xa9 'quoted' \"x\" ?1 $1");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
}

TEST(PostgresParametersTest, QuestionMarksOutsideQuotesBecomeDollars) {
  using store_internal::PostgresParameters;
  EXPECT_EQ(PostgresParameters("SELECT a FROM t WHERE b = ?1 AND c = ?12"), "SELECT a FROM t WHERE b = $1 AND c = $12");
  EXPECT_EQ(PostgresParameters("SELECT '?1', \"?2\" FROM t WHERE x = ?3"), "SELECT '?1', \"?2\" FROM t WHERE x = $3");
  EXPECT_EQ(PostgresParameters("SELECT 'it''s ?1' WHERE y = ?2"), "SELECT 'it''s ?1' WHERE y = $2");
  // Control: a ? not followed by a digit is left alone.
  EXPECT_EQ(PostgresParameters("SELECT ? , ?x"), "SELECT ? , ?x");
}

}  // namespace
}  // namespace corral::supervisor
