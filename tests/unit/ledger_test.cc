// supervisor::Ledger over a real SQLite store: the export's pages (filters, window, paging) and
// the usage report it passes through.
#include "supervisor/relay/ledger.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <memory>
#include <string>

#include "common/file_util.h"
#include "tests/unit/store_test_util.h"

namespace corral::supervisor {
namespace {

// A store on a temporary directory (store_test_util.h), and the service over it.
class LedgerTest : public StoreTest {
 protected:
  void SetUp() override {
    StoreTest::SetUp();
    ledger_ = std::make_unique<Ledger>(*store_);
  }

  int64_t Debit(const std::string& iss, const std::string& sub, int64_t ms, int64_t at) {
    LedgerRow row;
    row.iss = iss;
    row.sub = sub;
    row.kind = "compute";
    row.amount = ms;
    row.at = at;
    row.sandbox_id = "sb_a";
    auto id = store_->AddLedger(row);
    EXPECT_TRUE(id.ok());
    return id.ok() ? *id : -1;
  }

  std::unique_ptr<Ledger> ledger_;
};

TEST_F(LedgerTest, PagesSayWhetherMoreFollow) {
  const int64_t first = Debit("acme", "alice", 100, 1000);
  const int64_t second = Debit("acme", "alice", 200, 1001);
  const int64_t third = Debit("acme", "alice", 300, 1002);
  auto page = ledger_->Page({"", "", 0, 2000, 0, 2});
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->rows.size(), 2u);
  EXPECT_EQ(page->rows[0].id, first);
  EXPECT_EQ(page->rows[1].id, second);
  EXPECT_TRUE(page->more);
  auto rest = ledger_->Page({"", "", 0, 2000, second, 2});
  ASSERT_TRUE(rest.ok());
  ASSERT_EQ(rest->rows.size(), 1u);
  EXPECT_EQ(rest->rows[0].id, third);
  EXPECT_FALSE(rest->more);
  // Exactly `limit` rows left: no next page.
  auto exact = ledger_->Page({"", "", 0, 2000, first, 2});
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->rows.size(), 2u);
  EXPECT_FALSE(exact->more);
}

TEST_F(LedgerTest, FiltersByUserAndWindow) {
  Debit("acme", "alice", 100, 1000);
  const int64_t bob = Debit("acme", "bob", 200, 1000);
  Debit("globex", "bob", 300, 1000);
  Debit("acme", "bob", 400, 3000);  // outside [0, 2000)
  auto page = ledger_->Page({"acme", "bob", 0, 2000, 0, 10});
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->rows.size(), 1u);
  EXPECT_EQ(page->rows[0].id, bob);
  EXPECT_EQ(page->rows[0].amount, 200);
  auto issuer = ledger_->Page({"acme", "", 0, 5000, 0, 10});
  ASSERT_TRUE(issuer.ok());
  EXPECT_EQ(issuer->rows.size(), 3u);
}

TEST_F(LedgerTest, ReportsTheUsersWindow) {
  const int64_t now = 1795600000;  // inside the day [1795564800, 1795651200)
  Debit("acme", "alice", 1500, now - 10);
  Debit("acme", "alice", 700, 1795564800 - 1);  // the day before
  Budget budget;
  budget.compute_ms = 10000;
  auto report = ledger_->Report("acme", "alice", budget, now, {{"sb_a", 250}});
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_DOUBLE_EQ((*report)["compute"]["spent_s"].get<double>(), 1.75);  // 1500 ms debited + 250 not yet
}

}  // namespace
}  // namespace corral::supervisor
