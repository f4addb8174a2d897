// The usage report over a real SQLite store: the ledger's sums in the budget's window, plus the
// compute the running sandboxes counted that the meter has not debited yet.
#include "supervisor/relay/usage.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "common/file_util.h"
#include "tests/testing/temp_dir.h"

namespace corral::supervisor {
namespace {

class UsageReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = Store::Open(dir_ + "/corrald.db");
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    budget_.compute_ms = 10000;
    budget_.window = BudgetWindow::kDay;
  }
  void TearDown() override { store_.reset(); }

  void Debit(const std::string& sub, const std::string& sandbox, int64_t ms, int64_t at) {
    LedgerRow row;
    row.iss = "acme";
    row.sub = sub;
    row.kind = "compute";
    row.amount = ms;
    row.at = at;
    row.sandbox_id = sandbox;
    ASSERT_TRUE(store_->AddLedger(row).ok());
  }

  test::TempDir tmp_{"usage"};
  const std::string dir_ = tmp_.path();
  std::unique_ptr<Store> store_;
  Budget budget_;
  const int64_t now_ = 1795600000;  // inside the day window [1795564800, 1795651200)
};

TEST_F(UsageReportTest, TheLedgerAlone) {
  Debit("alice", "sb_a", 1500, now_ - 10);
  Debit("alice", "sb_a", 250, now_ - 5);
  Debit("alice", "sb_b", 1000, now_ - 100000);  // the day before: another window
  Debit("bob", "sb_c", 7000, now_ - 1);         // another user
  auto report = UsageReport(*store_, "acme", "alice", budget_, now_);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_DOUBLE_EQ((*report)["compute"]["spent_s"].get<double>(), 1.75);
  EXPECT_DOUBLE_EQ((*report)["compute"]["remaining_s"].get<double>(), 8.25);
  ASSERT_EQ((*report)["sandboxes"].size(), 1u);
  EXPECT_EQ((*report)["sandboxes"][0]["sandbox"], "sb_a");
}

TEST_F(UsageReportTest, AddsWhatRunningSandboxesCountedSinceTheirLastDebit) {
  Debit("alice", "sb_a", 1500, now_ - 10);
  // sb_a has 400 ms not debited yet; sb_new ran only since the last debit.
  auto report = UsageReport(*store_, "acme", "alice", budget_, now_, {{"sb_a", 400}, {"sb_new", 2100}});
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_DOUBLE_EQ((*report)["compute"]["spent_s"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ((*report)["compute"]["remaining_s"].get<double>(), 6.0);
  ASSERT_EQ((*report)["sandboxes"].size(), 2u);
  EXPECT_EQ((*report)["sandboxes"][0]["sandbox"], "sb_a");
  EXPECT_DOUBLE_EQ((*report)["sandboxes"][0]["compute_s"].get<double>(), 1.9);
  EXPECT_EQ((*report)["sandboxes"][1]["sandbox"], "sb_new");
  EXPECT_DOUBLE_EQ((*report)["sandboxes"][1]["compute_s"].get<double>(), 2.1);
  // Once the meter debits it, it is in the ledger and no longer unmetered: the same total.
  Debit("alice", "sb_a", 400, now_);
  Debit("alice", "sb_new", 2100, now_);
  auto later = UsageReport(*store_, "acme", "alice", budget_, now_);
  ASSERT_TRUE(later.ok());
  EXPECT_EQ((*later)["compute"], (*report)["compute"]);
  EXPECT_EQ((*later)["sandboxes"], (*report)["sandboxes"]);
  // Past the budget, nothing remains (never below zero).
  auto over = UsageReport(*store_, "acme", "alice", budget_, now_, {{"sb_a", 9000}});
  ASSERT_TRUE(over.ok());
  EXPECT_DOUBLE_EQ((*over)["compute"]["remaining_s"].get<double>(), 0.0);
}

}  // namespace
}  // namespace corral::supervisor
