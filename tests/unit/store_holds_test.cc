// Budget holds (Store::AdmitBudgetHold and the rest, supervisor/relay/model_relay.h): a model
// call's admission against its user's AI budget and every node's calls in flight, its settle
// (the hold goes as the ledger row comes) and its release, a node's start releasing its own
// holds, stale holds. On both engines; on PostgreSQL, nodes sharing one database, and several of
// them admitting and settling one user's calls at once within the documented bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <latch>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "supervisor/store/store.h"
#include "tests/unit/store_test_util.h"

namespace corral::supervisor {
namespace {

constexpr int64_t kNow = 1800000000;
constexpr int64_t kLifetime = 3900;  // the relay's default HoldLifetimeSeconds

// A call of `sub` (issuer corp) holding `estimate` against a budget of `limit` in the hour
// around kNow, admitted at `now`.
BudgetHoldRequest Call(int64_t estimate, int64_t limit = 1000, const std::string& sub = "alice", int64_t now = kNow) {
  BudgetHoldRequest request;
  request.iss = "corp";
  request.sub = sub;
  request.limit_micro_usd = limit;
  request.window = {kNow - 3600, kNow + 3600};
  request.micro_usd = estimate;
  request.now = now;
  request.stale_before = now - kLifetime;
  return request;
}

// A priced call's ledger row.
LedgerRow Priced(int64_t amount, const std::string& sub = "alice", int64_t at = kNow) {
  LedgerRow row;
  row.iss = "corp";
  row.sub = sub;
  row.kind = "ai";
  row.amount = amount;
  row.at = at;
  row.model = "claude-test-1";
  return row;
}

// The admission's answer; a failed call fails the test.
BudgetHoldAnswer Admit(Store& store, const BudgetHoldRequest& request) {
  StatusOr<BudgetHoldAnswer> answer = store.AdmitBudgetHold(request);
  EXPECT_TRUE(answer.ok()) << answer.status().ToString();
  return answer.ok() ? *answer : BudgetHoldAnswer{};
}

// ---- Both engines

class StoreHoldsTest : public StoreEngineTest {
 protected:
  int64_t Holds(const std::string& where = "TRUE") {
    const std::string count = RawExec("SELECT COUNT(*) FROM budget_holds WHERE " + where);
    return count.empty() ? -1 : std::stoll(count);
  }
  int64_t Spent(const std::string& sub = "alice") { return *store_->LedgerSum("corp", sub, "ai", 0, INT64_MAX); }
};

TEST_P(StoreHoldsTest, CallsAreAdmittedUpToTheLimitsEdgeAndNotPastIt) {
  ASSERT_TRUE(store_->AddLedger(Priced(600)).ok());
  ASSERT_TRUE(store_->AddLedger(Priced(5000, "alice", kNow - 7200)).ok());  // an earlier window's
  BudgetHoldAnswer first = Admit(*store_, Call(300));
  EXPECT_EQ(first.verdict, HoldVerdict::kAdmit);
  EXPECT_GT(first.hold_id, 0);
  EXPECT_EQ(first.state.spent, 600);
  EXPECT_EQ(first.state.held_calls, 0);
  // 600 spent + 300 held + 101 is a micro-dollar past the limit: wait for the call in flight.
  BudgetHoldAnswer over = Admit(*store_, Call(101));
  EXPECT_EQ(over.verdict, HoldVerdict::kInFlight);
  EXPECT_EQ(over.hold_id, 0);
  EXPECT_EQ(over.state.held_calls, 1);
  EXPECT_EQ(over.state.held_micro_usd, 300);
  // Control: 100 fits exactly.
  BudgetHoldAnswer edge = Admit(*store_, Call(100));
  EXPECT_EQ(edge.verdict, HoldVerdict::kAdmit);
  EXPECT_NE(edge.hold_id, first.hold_id);
  BudgetHoldAnswer full = Admit(*store_, Call(1));
  EXPECT_EQ(full.verdict, HoldVerdict::kInFlight);
  EXPECT_EQ(full.state.held_calls, 2);
  EXPECT_EQ(full.state.held_micro_usd, 400);
  EXPECT_EQ(Holds(), 2);  // a refusal holds nothing
  EXPECT_EQ(Holds("node_id = 'local'"), 2);
  // Another user's budget is theirs: alice's spending and holds do not count against bob's.
  BudgetHoldAnswer bob = Admit(*store_, Call(900, 1000, "bob"));
  EXPECT_EQ(bob.verdict, HoldVerdict::kAdmit);
  EXPECT_EQ(bob.state.spent, 0);
  EXPECT_EQ(bob.state.held_calls, 0);
}

TEST_P(StoreHoldsTest, OneCallAlwaysGoesAheadUntilTheBudgetIsSpent) {
  // Nothing in flight: a call goes ahead whatever its most, even past the whole budget.
  BudgetHoldAnswer big = Admit(*store_, Call(5000));
  ASSERT_EQ(big.verdict, HoldVerdict::kAdmit);
  // Beside it, not even a micro-dollar's call.
  EXPECT_EQ(Admit(*store_, Call(1)).verdict, HoldVerdict::kInFlight);
  ASSERT_TRUE(store_->SettleBudgetHold(big.hold_id, Priced(1200)).ok());
  BudgetHoldAnswer spent = Admit(*store_, Call(1));
  EXPECT_EQ(spent.verdict, HoldVerdict::kSpent);
  EXPECT_EQ(spent.state.spent, 1200);
  EXPECT_EQ(Holds(), 0);
  // Control: with a larger budget, the next call goes ahead again.
  EXPECT_EQ(Admit(*store_, Call(1, 1201)).verdict, HoldVerdict::kAdmit);
}

TEST_P(StoreHoldsTest, SettlingMovesTheMoneyFromHeldToSpentInOneTransaction) {
  BudgetHoldAnswer call = Admit(*store_, Call(400));
  ASSERT_EQ(call.verdict, HoldVerdict::kAdmit);
  // A settle that fails writes nothing: the hold stays and no row is written (the delete of the
  // hold is rolled back with the refused insert).
  LedgerRow bad = Priced(300);
  bad.kind = "bogus";
  EXPECT_EQ(store_->SettleBudgetHold(call.hold_id, bad).status().error_number(), EINVAL);
  EXPECT_EQ(Holds(), 1);
  EXPECT_EQ(Spent(), 0);
  EXPECT_EQ(Admit(*store_, Call(700)).verdict, HoldVerdict::kInFlight);  // still held: 400 + 700 > 1000
  // Settled: the 400 held becomes the 300 it cost, at once.
  StatusOr<int64_t> row = store_->SettleBudgetHold(call.hold_id, Priced(300));
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  EXPECT_GT(*row, 0);
  EXPECT_EQ(Holds(), 0);
  EXPECT_EQ(Spent(), 300);
  BudgetHoldAnswer next = Admit(*store_, Call(700));
  EXPECT_EQ(next.verdict, HoldVerdict::kAdmit);
  EXPECT_EQ(next.state.spent, 300);
  EXPECT_EQ(next.state.held_calls, 0);
  // Released without a price (no answer): nothing held, nothing spent; a second release is harmless.
  ASSERT_TRUE(store_->ReleaseBudgetHold(next.hold_id).ok());
  EXPECT_EQ(Holds(), 0);
  EXPECT_EQ(Spent(), 300);
  EXPECT_TRUE(store_->ReleaseBudgetHold(next.hold_id).ok());
  // A call whose hold went meanwhile (its node restarted, or it lapsed) is still paid for.
  ASSERT_TRUE(store_->SettleBudgetHold(next.hold_id, Priced(50)).ok());
  EXPECT_EQ(Spent(), 350);
  EXPECT_EQ(Holds(), 0);
}

TEST_P(StoreHoldsTest, HoldsOlderThanTheLongestCallAreNotCountedAndAreDeleted) {
  // A hold left by a node that died: made long before now.
  ASSERT_EQ(Admit(*store_, Call(900, 1000, "alice", kNow - 5000)).verdict, HoldVerdict::kAdmit);
  ASSERT_EQ(Admit(*store_, Call(900, 1000, "bob", kNow - 5000)).verdict, HoldVerdict::kAdmit);
  BudgetHoldAnswer now = Admit(*store_, Call(900));
  EXPECT_EQ(now.verdict, HoldVerdict::kAdmit);
  EXPECT_EQ(now.state.held_calls, 0);
  EXPECT_EQ(Holds("sub = 'alice'"), 1);                                   // the lapsed one is gone
  EXPECT_EQ(Holds("sub = 'alice' AND created_at = " + std::to_string(kNow)), 1);
  EXPECT_EQ(Holds("sub = 'bob'"), 1);  // another user's is theirs to find lapsed
  // The edge: a hold exactly as old as the lifetime still counts, a second older does not.
  BudgetHoldAnswer at_edge = Admit(*store_, Call(900, 1000, "alice", kNow + kLifetime));
  EXPECT_EQ(at_edge.verdict, HoldVerdict::kInFlight);
  EXPECT_EQ(at_edge.state.held_calls, 1);
  BudgetHoldAnswer past = Admit(*store_, Call(900, 1000, "alice", kNow + kLifetime + 1));
  EXPECT_EQ(past.verdict, HoldVerdict::kAdmit);
  EXPECT_EQ(past.state.held_calls, 0);
}

TEST_P(StoreHoldsTest, ANodesStartReleasesItsHolds) {
  ASSERT_EQ(Admit(*store_, Call(100)).verdict, HoldVerdict::kAdmit);
  ASSERT_EQ(Admit(*store_, Call(100, 1000, "bob")).verdict, HoldVerdict::kAdmit);
  EXPECT_EQ(Holds(), 2);
  StatusOr<int64_t> released = store_->ReleaseNodeBudgetHolds();
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_EQ(*released, 2);
  EXPECT_EQ(Holds(), 0);
  EXPECT_EQ(*store_->ReleaseNodeBudgetHolds(), 0);
  EXPECT_EQ(Admit(*store_, Call(5000)).state.held_calls, 0);
}

INSTANTIATE_TEST_SUITE_P(Engines, StoreHoldsTest,
                         ::testing::Values(StoreBackend::kSqlite, StoreBackend::kPostgresql), EngineName);

// A SQLite store is one node's: the holds written under its former node id are its own, and its
// start releases them.
TEST_F(StoreTest, ASqliteStoreReleasesTheHoldsOfItsFormerNodeId) {
  ASSERT_EQ(Admit(*store_, Call(100)).verdict, HoldVerdict::kAdmit);
  store_.reset();
  StoreOptions options;
  options.path = path_;
  options.node_id = "renamed";
  auto reopened = Store::Open(options);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_EQ(*(*reopened)->ReleaseNodeBudgetHolds(), 1);
  EXPECT_EQ(Admit(**reopened, Call(5000)).state.held_calls, 0);
}

// ---- PostgreSQL: nodes sharing one database

class FleetHoldsTest : public StoreFixtureOf<::testing::Test> {
 protected:
  StoreBackend backend() const override { return StoreBackend::kPostgresql; }

  int64_t Holds(const std::string& where = "TRUE") {
    const std::string count = RawExec("SELECT COUNT(*) FROM budget_holds WHERE " + where);
    return count.empty() ? -1 : std::stoll(count);
  }
};

TEST_F(FleetHoldsTest, EveryNodeCountsTheOthersHoldsAndARestartReleasesItsOwnOnly) {
  std::unique_ptr<Store> a = OpenNode("a");
  std::unique_ptr<Store> b = OpenNode("b");
  ASSERT_TRUE(a && b);
  ASSERT_EQ(Admit(*a, Call(400)).verdict, HoldVerdict::kAdmit);
  // b sees a's call in flight: 400 + 300 fit, 400 + 300 + 301 do not.
  BudgetHoldAnswer on_b = Admit(*b, Call(300));
  EXPECT_EQ(on_b.verdict, HoldVerdict::kAdmit);
  EXPECT_EQ(on_b.state.held_calls, 1);
  EXPECT_EQ(on_b.state.held_micro_usd, 400);
  BudgetHoldAnswer waits = Admit(*b, Call(301));
  EXPECT_EQ(waits.verdict, HoldVerdict::kInFlight);
  EXPECT_EQ(waits.state.held_calls, 2);
  EXPECT_EQ(Holds("node_id = 'a'"), 1);
  EXPECT_EQ(Holds("node_id = 'b'"), 1);
  // a restarts: its hold goes (its call died with it), b's stays.
  a.reset();
  std::unique_ptr<Store> a_again = OpenNode("a");
  ASSERT_NE(a_again, nullptr);
  EXPECT_EQ(*a_again->ReleaseNodeBudgetHolds(), 1);
  EXPECT_EQ(Holds("node_id = 'a'"), 0);
  EXPECT_EQ(Holds("node_id = 'b'"), 1);
  BudgetHoldAnswer after = Admit(*b, Call(700));
  EXPECT_EQ(after.verdict, HoldVerdict::kAdmit);
  EXPECT_EQ(after.state.held_calls, 1);
  EXPECT_EQ(after.state.held_micro_usd, 300);
}

// A user's admissions take turns on a row lock (budget_users), on every node; other users' do
// not wait for them. A turn held past a second (another node stuck in the middle of one) is EBUSY:
// the relay's 429, retried.
TEST_F(FleetHoldsTest, AUsersAdmissionsTakeTurnsAndOtherUsersDoNotWait) {
  std::unique_ptr<Store> b = OpenNode("b");
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(Admit(*store_, Call(100)).verdict, HoldVerdict::kAdmit);
  // Another node in the middle of an admission of alice's: her row locked for 3 s.
  std::thread other([this] {
    RawExec("BEGIN; UPDATE budget_users SET iss = iss WHERE sub = 'alice'; SELECT pg_sleep(3); COMMIT");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto seconds_since = [](std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Admit(*b, Call(100, 1000, "bob")).verdict, HoldVerdict::kAdmit);
  EXPECT_LT(seconds_since(start), 0.5);  // bob's turn is his own
  start = std::chrono::steady_clock::now();
  StatusOr<BudgetHoldAnswer> waited = b->AdmitBudgetHold(Call(100));
  EXPECT_EQ(waited.status().error_number(), EBUSY) << waited.status().ToString();
  EXPECT_GE(seconds_since(start), 0.9);
  EXPECT_LT(seconds_since(start), 2.0);
  other.join();
  // Her turn is free again: admitted beside her call in flight (the refused one held nothing).
  BudgetHoldAnswer after = Admit(*b, Call(100));
  EXPECT_EQ(after.verdict, HoldVerdict::kAdmit);
  EXPECT_EQ(after.state.held_calls, 1);
}

// What the nodes of a concurrent run did (each thread adds its own under the lock).
struct RunTotals {
  std::mutex mu;
  int64_t admitted = 0;
  int64_t alone = 0;           // admitted with no call in flight on any node
  int64_t max_alone_cost = 0;  // the dearest of those, as priced
  int64_t in_flight = 0;       // told to wait for calls in flight
  int64_t busy = 0;            // admissions that lost to concurrent ones at every attempt
  int64_t settle_busy = 0;     // settles that did, written as the relay does then
  int64_t settled = 0;         // the sum of what the settled calls cost
  std::vector<int64_t> admitted_by_node;
  std::vector<std::string> errors;
};

// One node's calls for one user, as its relay makes them, until the budget is spent: admit; when
// admitted, "call" (a pause), price it (60..100 micro-dollars, less than the 300 it holds, as a
// call costs less than its most) and settle; when told to wait, wait and try again.
void RunNode(Store& store, int64_t limit, size_t node, RunTotals& totals) {
  std::minstd_rand random(7919u * static_cast<unsigned>(node + 1));
  for (int round = 0; round < 100000; ++round) {
    StatusOr<BudgetHoldAnswer> answer = store.AdmitBudgetHold(Call(300, limit));
    std::unique_lock lock(totals.mu);
    if (!answer.ok() && answer.status().error_number() == EBUSY) {
      ++totals.busy;
      continue;
    }
    if (!answer.ok()) {
      totals.errors.push_back(answer.status().ToString());
      return;
    }
    if (answer->verdict == HoldVerdict::kSpent) return;
    if (answer->verdict == HoldVerdict::kInFlight) {
      ++totals.in_flight;
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(200 + random() % 300));
      continue;
    }
    const int64_t cost = 60 + static_cast<int64_t>(random() % 41);
    ++totals.admitted;
    ++totals.admitted_by_node[node];
    if (answer->state.held_calls == 0) {
      ++totals.alone;
      totals.max_alone_cost = std::max(totals.max_alone_cost, cost);
    }
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(500 + random() % 1500));  // the call
    StatusOr<int64_t> settled = store.SettleBudgetHold(answer->hold_id, Priced(cost));
    lock.lock();
    if (!settled.ok() && settled.status().error_number() == EBUSY) {
      // The relay's way (ModelRelay's Reservation::Settle): the row alone, then the hold goes.
      ++totals.settle_busy;
      settled = store.AddLedger(Priced(cost));
      Status released = store.ReleaseBudgetHold(answer->hold_id);
      if (!released.ok()) totals.errors.push_back(released.ToString());
    }
    if (!settled.ok()) {
      totals.errors.push_back(settled.status().ToString());
      return;
    }
    totals.settled += cost;
  }
  totals.errors.push_back("the budget was never spent");
}

// Six nodes, each its own connection and node id, admit and settle one user's calls at once
// until the budget is spent. The bound of model_relay.h holds for the fleet: what was spent is
// at most limit - 1 + the cost of a call admitted with none in flight, every settled cost is in
// the ledger once (no money lost, none counted twice), and no hold is left.
TEST_F(FleetHoldsTest, ConcurrentNodesSpendOneUsersBudgetWithinTheBoundAndLoseNothing) {
  constexpr int kNodes = 6;
  constexpr int64_t kLimit = 40000;  // about 500 calls of 60..100
  std::vector<std::unique_ptr<Store>> nodes;
  for (int i = 0; i < kNodes; ++i) {
    nodes.push_back(OpenNode("node-" + std::to_string(i)));
    ASSERT_NE(nodes.back(), nullptr);
  }
  RunTotals totals;
  totals.admitted_by_node.resize(kNodes);
  std::vector<std::thread> threads;
  std::latch ready(kNodes);  // all start at once: none finds the budget spent by the others
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kNodes; ++i) {
    threads.emplace_back([&, i] {
      ready.arrive_and_wait();
      RunNode(*nodes[static_cast<size_t>(i)], kLimit, static_cast<size_t>(i), totals);
    });
  }
  for (auto& thread : threads) thread.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const std::string& error : totals.errors) ADD_FAILURE() << error;

  const int64_t spent = *nodes[0]->LedgerSum("corp", "alice", "ai", 0, INT64_MAX);
  auto rows = nodes[0]->ListLedger("corp", "alice", 0, INT64_MAX);
  ASSERT_TRUE(rows.ok());
  // Nothing lost or counted twice: the ledger is what the calls cost, one row each.
  EXPECT_EQ(spent, totals.settled);
  EXPECT_EQ(static_cast<int64_t>(rows->size()), totals.admitted);
  EXPECT_EQ(Holds(), 0);
  // The bound: the budget is spent (every node stopped on a refusal), by less than one call.
  EXPECT_GE(spent, kLimit);
  EXPECT_LE(spent, kLimit - 1 + totals.max_alone_cost);
  // The run did what it is meant to: many calls, on several nodes (a node that keeps losing
  // serialization races may get few or none), that waited for one another.
  EXPECT_GE(totals.alone, 1);
  EXPECT_GT(totals.admitted, 400);
  EXPECT_GT(totals.in_flight, 0);
  EXPECT_GE(std::count_if(totals.admitted_by_node.begin(), totals.admitted_by_node.end(),
                          [](int64_t on_node) { return on_node > 0; }),
            kNodes / 2);
  std::string by_node;
  for (int64_t on_node : totals.admitted_by_node) by_node += " " + std::to_string(on_node);
  std::printf("%d nodes: %lld calls admitted (by node:%s; %lld with none in flight), %lld waits, %lld admissions "
              "and %lld settles busy, spent %lld of %lld (bound %lld) in %.2f s\n",
              kNodes, static_cast<long long>(totals.admitted), by_node.c_str(), static_cast<long long>(totals.alone),
              static_cast<long long>(totals.in_flight), static_cast<long long>(totals.busy),
              static_cast<long long>(totals.settle_busy), static_cast<long long>(spent),
              static_cast<long long>(kLimit), static_cast<long long>(kLimit - 1 + totals.max_alone_cost), seconds);
}

}  // namespace
}  // namespace corral::supervisor
