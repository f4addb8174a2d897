// The webhook outbox in the store (Store::InsertOutbox and the rest, supervisor/webhooks/): an
// event and its deliveries written together, an event recorded once however often it is written,
// leases (one node at a time; a dead node's rows taken over after its lease), attempts recorded,
// pruning, and a session's usage from the ledger. On both engines; on PostgreSQL, nodes sharing
// one database claiming at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "supervisor/store/store.h"
#include "tests/unit/store_test_util.h"

namespace corral::supervisor {
namespace {

constexpr int64_t kNowMs = 1800000000000;
constexpr int64_t kLeaseMs = 50000;

OutboxRow Delivery(const std::string& id, const std::string& url = "http://127.0.0.1:9/h", int64_t due_ms = kNowMs) {
  OutboxRow row;
  row.id = id;
  row.url = url;
  row.type = "sandbox.stopped";
  row.body = R"({"id":")" + id + R"(","type":"sandbox.stopped"})";
  row.created_at = due_ms / 1000;
  row.next_attempt_ms = due_ms;
  return row;
}

OutboxAttempt Failed(const OutboxRow& row, int64_t next_ms, bool give_up = false) {
  OutboxAttempt attempt;
  attempt.id = row.id;
  attempt.url = row.url;
  attempt.at = kNowMs / 1000;
  attempt.next_attempt_ms = next_ms;
  attempt.error = "HTTP 503";
  attempt.give_up = give_up;
  return attempt;
}

std::vector<std::string> Ids(const std::vector<OutboxRow>& rows) {
  std::vector<std::string> ids;
  for (const OutboxRow& row : rows) ids.push_back(row.id + " " + row.url);
  return ids;
}

TEST_P(StoreEngineTest, AnEventAndItsDeliveriesAreWrittenTogether) {
  ASSERT_EQ(Create("sb_1"), kUidFirst);
  const std::vector<OutboxRow> rows = {Delivery("wh_1", "http://a/"), Delivery("wh_1", "http://b/")};
  auto seq = store_->AppendEvent("sb_1", "sandbox.stopped", R"({"reason":"idle"})", rows);
  ASSERT_TRUE(seq.ok()) << seq.status().ToString();
  auto events = store_->ListEvents("sb_1", 0);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ(events->front().seq, *seq);
  auto outbox = store_->ListOutbox();
  ASSERT_TRUE(outbox.ok());
  ASSERT_EQ(outbox->size(), 2u);
  EXPECT_EQ((*outbox)[0].body, rows[0].body);  // the bytes, as written
  EXPECT_EQ((*outbox)[0].attempts, 0);
  EXPECT_EQ((*outbox)[0].delivered_at, 0);

  // Inside a caller's transaction that then fails (the write the event is about), neither the
  // event nor its deliveries stay.
  Status failed = store_->InTransaction([&]() -> Status {
    RETURN_IF_ERROR(store_->AppendEvent("sb_1", "sandbox.stopped", "{}", {Delivery("wh_2")}).status());
    return Status::Error("the caller's next write failed", EIO);
  });
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(store_->ListEvents("sb_1", 0)->size(), 1u);
  EXPECT_EQ(store_->ListOutbox()->size(), 2u);
  EXPECT_EQ(*store_->OutboxDepth(), 2);
}

TEST_P(StoreEngineTest, AnEventWrittenTwiceIsRecordedOnce) {
  OutboxRow first = Delivery("wh_once");
  ASSERT_TRUE(store_->InsertOutbox({first}).ok());
  OutboxRow again = first;
  again.body = "{\"a later write\":true}";
  ASSERT_TRUE(store_->InsertOutbox({again}).ok());  // no error: the first one stays
  auto outbox = store_->ListOutbox();
  ASSERT_EQ(outbox->size(), 1u);
  EXPECT_EQ(outbox->front().body, first.body);
  // Another URL of the same event is another delivery (the control).
  ASSERT_TRUE(store_->InsertOutbox({Delivery("wh_once", "http://other/")}).ok());
  EXPECT_EQ(store_->ListOutbox()->size(), 2u);
}

TEST_P(StoreEngineTest, ClaimsLeaseDueRowsToOneNodeAtATime) {
  ASSERT_TRUE(store_->InsertOutbox({Delivery("wh_a", "http://a/", kNowMs - 10), Delivery("wh_b", "http://a/", kNowMs),
                                    Delivery("wh_later", "http://a/", kNowMs + 60000)})
                  .ok());
  auto claimed = store_->ClaimOutbox(kNowMs, kLeaseMs, 10);
  ASSERT_TRUE(claimed.ok()) << claimed.status().ToString();
  EXPECT_EQ(Ids(*claimed), (std::vector<std::string>{"wh_a http://a/", "wh_b http://a/"}));  // due, earliest first
  EXPECT_EQ(claimed->front().lease_node, store_->node_id());
  EXPECT_EQ(claimed->front().lease_until_ms, kNowMs + kLeaseMs);
  // Leased: nobody (this node included) claims them again until the lease ends.
  EXPECT_TRUE(store_->ClaimOutbox(kNowMs + 1000, kLeaseMs, 10)->empty());
  std::unique_ptr<Store> other = OpenNode("node-b");
  ASSERT_NE(other, nullptr);
  EXPECT_TRUE(other->ClaimOutbox(kNowMs + 1000, kLeaseMs, 10)->empty());
  // The limit.
  ASSERT_TRUE(store_->InsertOutbox({Delivery("wh_c"), Delivery("wh_d")}).ok());
  EXPECT_EQ(other->ClaimOutbox(kNowMs, kLeaseMs, 1)->size(), 1u);

  // This node died holding wh_a and wh_b: after the lease, another node takes them over, and
  // the dead node's late report of an attempt changes nothing.
  auto taken = other->ClaimOutbox(kNowMs + kLeaseMs, kLeaseMs, 10);
  ASSERT_TRUE(taken.ok());
  std::vector<std::string> ids = Ids(*taken);
  EXPECT_TRUE(std::find(ids.begin(), ids.end(), "wh_a http://a/") != ids.end()) << ::testing::PrintToString(ids);
  EXPECT_EQ(taken->front().lease_node, "node-b");
  OutboxAttempt late = Failed(claimed->front(), kNowMs + 1);
  late.delivered = true;
  EXPECT_FALSE(*store_->FinishOutboxAttempt(late));
  OutboxAttempt done = late;
  EXPECT_TRUE(*other->FinishOutboxAttempt(done));  // the control: the holder records it
  auto rows = store_->ListOutbox();
  for (const OutboxRow& row : *rows) {
    if (row.id == "wh_a") {
      EXPECT_GT(row.delivered_at, 0);
      EXPECT_EQ(row.attempts, 1);
      EXPECT_EQ(row.lease_node, "");
    }
  }
}

TEST_P(StoreEngineTest, AttemptsAreRecordedAndTheRowComesDueAgain) {
  ASSERT_TRUE(store_->InsertOutbox({Delivery("wh_r")}).ok());
  auto claimed = store_->ClaimOutbox(kNowMs, kLeaseMs, 10);
  ASSERT_EQ(claimed->size(), 1u);
  ASSERT_TRUE(*store_->FinishOutboxAttempt(Failed(claimed->front(), kNowMs + 20000)));
  // Released, but not due before its next attempt.
  EXPECT_TRUE(store_->ClaimOutbox(kNowMs + 19999, kLeaseMs, 10)->empty());
  auto again = store_->ClaimOutbox(kNowMs + 20000, kLeaseMs, 10);
  ASSERT_EQ(again->size(), 1u);
  EXPECT_EQ(again->front().attempts, 1);
  EXPECT_EQ(again->front().last_error, "HTTP 503");
  EXPECT_EQ(again->front().body, claimed->front().body);  // the same bytes every attempt
  // Given up: recorded, never claimed again, not counted as pending.
  ASSERT_TRUE(*store_->FinishOutboxAttempt(Failed(again->front(), kNowMs + 40000, /*give_up=*/true)));
  EXPECT_TRUE(store_->ClaimOutbox(kNowMs + 10000000, kLeaseMs, 10)->empty());
  EXPECT_EQ(*store_->OutboxDepth(), 0);
  auto rows = store_->ListOutbox();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_GT(rows->front().given_up_at, 0);
  EXPECT_EQ(rows->front().attempts, 2);
  EXPECT_EQ(rows->front().delivered_at, 0);
}

TEST_P(StoreEngineTest, ALeaseIsReleasedAtTheNodesRestartAndOldRowsArePruned) {
  ASSERT_TRUE(store_->InsertOutbox({Delivery("wh_1"), Delivery("wh_2")}).ok());
  ASSERT_EQ(store_->ClaimOutbox(kNowMs, kLeaseMs, 10)->size(), 2u);
  std::unique_ptr<Store> other = OpenNode("node-b");
  ASSERT_TRUE(other->ClaimOutbox(kNowMs, kLeaseMs, 10)->empty());
  ASSERT_EQ(*other->ReleaseOutboxLeases(), 0);  // another node's leases are not its own
  ASSERT_EQ(*store_->ReleaseOutboxLeases(), 2);
  auto claimed = store_->ClaimOutbox(kNowMs, kLeaseMs, 10);
  ASSERT_EQ(claimed->size(), 2u);
  OutboxAttempt delivered = Failed((*claimed)[0], 0);
  delivered.delivered = true;
  delivered.at = 1000;
  ASSERT_TRUE(*store_->FinishOutboxAttempt(delivered));
  EXPECT_EQ(*store_->OutboxDepth(), 1);
  EXPECT_EQ(*store_->PruneOutbox(1000), 0);  // not before 1000
  EXPECT_EQ(*store_->PruneOutbox(1001), 1);  // the delivered row; the pending one stays
  auto rows = store_->ListOutbox();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ(rows->front().id, (*claimed)[1].id);
}

TEST_P(StoreEngineTest, NodesClaimingAtOnceNeverHoldOneRowTogether) {
  std::vector<OutboxRow> rows;
  for (int i = 0; i < 200; ++i) rows.push_back(Delivery("wh_" + std::to_string(i)));
  ASSERT_TRUE(store_->InsertOutbox(rows).ok());
  // SQLite: connections of one file (one node's processes); PostgreSQL: nodes of a fleet.
  std::vector<std::unique_ptr<Store>> nodes;
  for (int n = 0; n < 4; ++n) nodes.push_back(OpenNode("node-" + std::to_string(n)));
  std::vector<std::vector<std::string>> got(nodes.size());
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (size_t n = 0; n < nodes.size(); ++n) {
    threads.emplace_back([&, n] {
      for (int round = 0; round < 40; ++round) {
        auto claimed = nodes[n]->ClaimOutbox(kNowMs, kLeaseMs, 7);
        if (!claimed.ok()) {
          if (claimed.status().error_number() != EBUSY) ++errors;
          continue;
        }
        for (const OutboxRow& row : *claimed) got[n].push_back(row.id);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(errors.load(), 0);
  std::map<std::string, int> holders;
  for (const auto& ids : got) {
    for (const std::string& id : ids) ++holders[id];
  }
  for (const auto& [id, count] : holders) EXPECT_EQ(count, 1) << id << " was claimed by " << count << " nodes";
  EXPECT_EQ(holders.size(), rows.size());  // every row claimed once: 4 nodes x 40 rounds x 7 > 200
}

TEST_P(StoreEngineTest, ASessionsUsageIsItsLedgerRows) {
  LedgerRow call;
  call.iss = "corp";
  call.sub = "alice";
  call.kind = "ai";
  call.at = 1000;
  call.session_id = "ses_1";
  call.amount = 300;
  call.input_tokens = 10;
  call.output_tokens = 20;
  call.cache_write_tokens = 3;
  call.cache_read_tokens = 4;
  ASSERT_TRUE(store_->AddLedger(call).ok());
  ASSERT_TRUE(store_->AddLedger(call).ok());
  LedgerRow other = call;
  other.session_id = "ses_2";  // another session's call does not count
  ASSERT_TRUE(store_->AddLedger(other).ok());
  auto usage = store_->SessionUsage("ses_1");
  ASSERT_TRUE(usage.ok()) << usage.status().ToString();
  EXPECT_EQ(usage->id, 2);  // calls
  EXPECT_EQ(usage->amount, 600);
  EXPECT_EQ(usage->input_tokens, 20);
  EXPECT_EQ(usage->output_tokens, 40);
  EXPECT_EQ(usage->cache_write_tokens, 6);
  EXPECT_EQ(usage->cache_read_tokens, 8);
  EXPECT_EQ(store_->SessionUsage("ses_none")->id, 0);
}

CORRAL_STORE_ON_BOTH_ENGINES();

}  // namespace
}  // namespace corral::supervisor
