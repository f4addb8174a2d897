// The store's nodes and what each node holds: node rows (register, heartbeat, drain kept across
// a register), and "the daemon's" sandboxes, sessions and executions as this node's. On both
// engines; two nodes sharing one database on PostgreSQL (a SQLite store is one node's: it takes
// every row as its own when it opens).
#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include "supervisor/store/store.h"
#include "tests/unit/store_test_util.h"

namespace corral::supervisor {
namespace {

NodeRow Node(const std::string& id, int64_t at_ms = 1000) {
  NodeRow row;
  row.id = id;
  row.address = "10.0.0.1:7080";
  row.version = "0.1.0";
  row.started_at = 1;
  row.heartbeat_at = at_ms;
  row.max_sandboxes = 100;
  row.sandboxes = 3;
  row.memory_total = 8ll << 30;
  row.memory_available = 4ll << 30;
  return row;
}

ExecutionRow Running(const std::string& id) {
  ExecutionRow row;
  row.id = id;
  row.iss = "corp";
  row.sub = "alice";
  row.state = "running";
  return row;
}

std::vector<std::string> Ids(const std::vector<SandboxRow>& rows) {
  std::vector<std::string> ids;
  for (const SandboxRow& row : rows) ids.push_back(row.id);
  return ids;
}

TEST_P(StoreEngineTest, NodesRegisterHeartbeatAndStayDrainedAcrossARegister) {
  ASSERT_TRUE(store_->RegisterNode(Node("b")).ok());
  ASSERT_TRUE(store_->RegisterNode(Node("a")).ok());
  auto nodes = store_->ListNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].id, "a");  // by id
  EXPECT_EQ((*nodes)[0].memory_total, 8ll << 30);
  EXPECT_FALSE((*nodes)[0].drained);

  ASSERT_TRUE(store_->HeartbeatNode("a", 5000, 7, 1ll << 30).ok());
  auto a = store_->GetNode("a");
  ASSERT_TRUE(a.ok() && a->has_value());
  EXPECT_EQ((*a)->heartbeat_at, 5000);
  EXPECT_EQ((*a)->sandboxes, 7);
  EXPECT_EQ((*a)->memory_available, 1ll << 30);
  EXPECT_EQ(store_->HeartbeatNode("gone", 5000, 0, 0).error_number(), ENOENT);

  // Drained by the operator: a restart (a new register) keeps it so.
  ASSERT_TRUE(store_->SetNodeDrained("a", true).ok());
  ASSERT_TRUE(store_->RegisterNode(Node("a", 9000)).ok());
  a = store_->GetNode("a");
  ASSERT_TRUE(a.ok() && a->has_value());
  EXPECT_TRUE((*a)->drained);
  EXPECT_EQ((*a)->heartbeat_at, 9000);
  EXPECT_EQ(store_->SetNodeDrained("gone", true).error_number(), ENOENT);
  // Control: undrained, and the other node never was.
  ASSERT_TRUE(store_->SetNodeDrained("a", false).ok());
  EXPECT_FALSE((*store_->GetNode("a"))->drained);
  EXPECT_FALSE((*store_->GetNode("b"))->drained);
}

TEST_P(StoreEngineTest, WhatThisNodeInsertsIsItsOwn) {
  EXPECT_EQ(store_->node_id(), "local");
  ASSERT_GE(Create("sb_1"), 0);
  EXPECT_EQ((*store_->GetSandbox("sb_1"))->node_id, "local");
  SnapshotRow snapshot;
  snapshot.id = "snap_1";
  snapshot.sandbox_id = "sb_1";
  snapshot.iss = "corp";
  snapshot.sub = "alice";
  snapshot.image = "host";
  snapshot.node_id = "someone-else";  // the store decides
  ASSERT_TRUE(store_->InsertSnapshot(snapshot).ok());
  EXPECT_EQ((*store_->GetSnapshot("snap_1"))->node_id, "local");
  ExecutionRow execution = Running("exe_1");
  ASSERT_TRUE(store_->InsertExecution(execution).ok());
  EXPECT_EQ((*store_->GetExecution("exe_1"))->node_id, "local");
  // An update of a row without its node (as the daemon's own copy is) keeps the node.
  execution.summary = "updated";
  ASSERT_TRUE(store_->UpdateExecution(execution).ok());
  EXPECT_EQ((*store_->GetExecution("exe_1"))->node_id, "local");
  EXPECT_EQ((*store_->GetExecution("exe_1"))->summary, "updated");
  SandboxRow sandbox = **store_->GetSandbox("sb_1");
  sandbox.node_id = "";
  sandbox.state = "running";
  ASSERT_TRUE(store_->UpdateSandbox(sandbox).ok());
  EXPECT_EQ((*store_->GetSandbox("sb_1"))->node_id, "local");
  EXPECT_EQ(Ids(*store_->ListNodeSandboxes()), std::vector<std::string>{"sb_1"});
}

// A SQLite store is one node's: opened under another node id (the host renamed), every row is
// the new id's, and none is lost from the daemon's view.
TEST_F(StoreTest, ASqliteStoreTakesEveryRowAsItsNodesOwn) {
  ASSERT_GE(Create("sb_1"), 0);
  ASSERT_TRUE(store_->InsertExecution(Running("exe_1")).ok());
  store_.reset();
  StoreOptions options;
  options.path = path_;
  options.node_id = "renamed";
  auto reopened = Store::Open(options);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  store_ = std::move(*reopened);
  EXPECT_EQ((*store_->GetSandbox("sb_1"))->node_id, "renamed");
  EXPECT_EQ(Ids(*store_->ListNodeSandboxes()), std::vector<std::string>{"sb_1"});
  auto failed = store_->FailRunningExecutions("restarted", 5);
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->size(), 1u);
}

// Two nodes on one PostgreSQL database: each has its own uid ranges, sandboxes, running
// executions and sessions; the users' and the issuers' counts and lists span both.
class TwoNodesTest : public StoreFixtureOf<::testing::Test> {
 protected:
  StoreBackend backend() const override { return StoreBackend::kPostgresql; }

};

TEST_F(TwoNodesTest, EachNodeHasItsOwnSandboxesAndUidRanges) {
  std::unique_ptr<Store> a = OpenNode("a");
  std::unique_ptr<Store> b = OpenNode("b");
  ASSERT_TRUE(a && b);
  auto on_a = a->CreateSandbox(NewSandbox("sb_a"), kUidFirst, kUidStep, 1);
  auto on_b = b->CreateSandbox(NewSandbox("sb_b"), kUidFirst, kUidStep, 1);
  ASSERT_TRUE(on_a.ok()) << on_a.status().ToString();
  ASSERT_TRUE(on_b.ok()) << on_b.status().ToString();
  // The same (only) uid range on both: uids are a host's.
  EXPECT_EQ(on_a->uid_base, kUidFirst);
  EXPECT_EQ(on_b->uid_base, kUidFirst);
  EXPECT_EQ(a->CreateSandbox(NewSandbox("sb_a2"), kUidFirst, kUidStep, 1).status().error_number(), ENOSPC);
  EXPECT_EQ(Ids(*a->ListNodeSandboxes()), std::vector<std::string>{"sb_a"});
  EXPECT_EQ(Ids(*b->ListNodeSandboxes()), std::vector<std::string>{"sb_b"});
  EXPECT_EQ(*a->CountAllSandboxes(), 1);  // this node's, for its own maximum
  // A user's and an issuer's span the fleet.
  EXPECT_EQ(Ids(*a->ListSandboxes("corp", "alice")), (std::vector<std::string>{"sb_a", "sb_b"}));
  EXPECT_EQ(*b->CountSandboxes("corp", "alice"), 2);
  EXPECT_EQ(*b->CountAllSandboxes("corp"), 2);
  EXPECT_EQ(Ids(*b->ListSandboxes()).size(), 2u);

  // Running executions and sessions: recovery of one node touches its own only.
  ASSERT_TRUE(a->InsertExecution(Running("exe_a")).ok());
  ASSERT_TRUE(b->InsertExecution(Running("exe_b")).ok());
  SessionRow session;
  session.id = "ses_b";
  session.sandbox_id = "sb_b";
  session.iss = "corp";
  session.sub = "alice";
  session.state = "processing";
  ASSERT_TRUE(b->InsertSession(session).ok());
  auto failed = a->FailRunningExecutions("a restarted", 9);
  ASSERT_TRUE(failed.ok());
  ASSERT_EQ(failed->size(), 1u);
  EXPECT_EQ((*failed)[0].id, "exe_a");
  EXPECT_EQ((*b->GetExecution("exe_b"))->state, "running");
  EXPECT_TRUE(a->ListNodeSessions()->empty());
  ASSERT_EQ(b->ListNodeSessions()->size(), 1u);
  // Control: a PostgreSQL store takes no other node's rows when it opens.
  std::unique_ptr<Store> a_again = OpenNode("a");
  EXPECT_EQ(Ids(*a_again->ListNodeSandboxes()), std::vector<std::string>{"sb_a"});
}

// A stopped sandbox moving from node a to node b (supervisor/sandboxes/moves.cc): b picks its
// lowest free range, then takes the row in one transaction, only if it is still a's and stopped;
// a range b took meanwhile is refused (EEXIST) rather than shared.
TEST_F(TwoNodesTest, ASandboxIsTakenByAnotherNodeOnlyWhileStoppedWhereItWas) {
  std::unique_ptr<Store> a = OpenNode("a");
  std::unique_ptr<Store> b = OpenNode("b");
  ASSERT_TRUE(a && b);
  auto moving = a->CreateSandbox(NewSandbox("sb_m"), kUidFirst, kUidStep, 4);
  ASSERT_TRUE(moving.ok()) << moving.status().ToString();
  ASSERT_TRUE(b->CreateSandbox(NewSandbox("sb_b0"), kUidFirst, kUidStep, 4).ok());
  auto free = b->FreeUidBase(kUidFirst, kUidStep, 4);
  ASSERT_TRUE(free.ok()) << free.status().ToString();
  EXPECT_EQ(*free, kUidFirst + kUidStep);  // b's first is taken; a's uids are a's

  // Running where it is: not taken (nor by the wrong "from" node).
  moving->state = "running";
  ASSERT_TRUE(a->UpdateSandbox(*moving).ok());
  EXPECT_FALSE(*b->TakeSandbox("sb_m", "a", *free, 10));
  moving->state = "stopped";
  ASSERT_TRUE(a->UpdateSandbox(*moving).ok());
  EXPECT_FALSE(*b->TakeSandbox("sb_m", "c", *free, 10));
  EXPECT_FALSE(*b->TakeSandbox("sb_nope", "a", *free, 10));
  // A range b holds: refused, the row unchanged.
  EXPECT_EQ(b->TakeSandbox("sb_m", "a", kUidFirst, 10).status().error_number(), EEXIST);
  EXPECT_EQ((*a->GetSandbox("sb_m"))->node_id, "a");

  // Stopped on a, a free range of b: b's now, in b's range, a's list without it.
  auto taken = b->TakeSandbox("sb_m", "a", *free, 10);
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_TRUE(*taken);
  auto row = a->GetSandbox("sb_m");
  ASSERT_TRUE(row.ok() && row->has_value());
  EXPECT_EQ((*row)->node_id, "b");
  EXPECT_EQ((*row)->uid_base, kUidFirst + kUidStep);
  EXPECT_EQ((*row)->updated_at, 10);
  EXPECT_TRUE(a->ListNodeSandboxes()->empty());
  EXPECT_EQ(Ids(*b->ListNodeSandboxes()), (std::vector<std::string>{"sb_m", "sb_b0"}));  // oldest first
  // Taken once: a second take (a replay) finds it b's already.
  EXPECT_FALSE(*b->TakeSandbox("sb_m", "a", kUidFirst + 2 * kUidStep, 11));
  // a's range is free again for a's next sandbox; b's next is past the moved one's.
  EXPECT_EQ(*a->FreeUidBase(kUidFirst, kUidStep, 4), kUidFirst);
  EXPECT_EQ(*b->FreeUidBase(kUidFirst, kUidStep, 4), kUidFirst + 2 * kUidStep);
}

TEST_F(TwoNodesTest, ASnapshotIsTakenByAnotherNodeWithItsOwners) {
  std::unique_ptr<Store> a = OpenNode("a");
  std::unique_ptr<Store> b = OpenNode("b");
  ASSERT_TRUE(a && b);
  SnapshotRow snap{"snap_m", "sb_1", "corp", "alice", "host", 20, 1 << 20, kUidFirst + 3 * kUidStep};
  ASSERT_TRUE(a->InsertSnapshot(snap).ok());
  EXPECT_EQ(a->ListNodeSnapshots()->size(), 1u);
  EXPECT_TRUE(b->ListNodeSnapshots()->empty());
  EXPECT_FALSE(*b->TakeSnapshot("snap_m", "c"));  // not c's
  EXPECT_FALSE(*b->TakeSnapshot("snap_nope", "a"));
  ASSERT_TRUE(*b->TakeSnapshot("snap_m", "a"));
  auto row = a->GetSnapshot("snap_m");
  ASSERT_TRUE(row.ok() && row->has_value());
  EXPECT_EQ((*row)->node_id, "b");
  EXPECT_EQ((*row)->uid_base, kUidFirst + 3 * kUidStep);  // whose its files are: unchanged
  EXPECT_TRUE(a->ListNodeSnapshots()->empty());
  EXPECT_EQ(b->ListNodeSnapshots()->size(), 1u);
  EXPECT_FALSE(*b->TakeSnapshot("snap_m", "a"));  // once
}

CORRAL_STORE_ON_BOTH_ENGINES();

}  // namespace
}  // namespace corral::supervisor
