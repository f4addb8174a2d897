// Where the fleet serves a request (supervisor/fleet/fleet_router.h): the node that holds a
// sandbox, snapshot, session or execution, from the catalog in the shared store; unavailable,
// naming the node and since when, for a node that is down; and where a new sandbox goes (the best
// of two by room, never a node that is down, drained or unreachable). A store that is one node's
// answers "here" for everything.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>

#include <boost/asio/io_context.hpp>

#include "common/unix_time.h"
#include "supervisor/fleet/fleet_router.h"
#include "tests/unit/store_test_util.h"

namespace corral::supervisor {
namespace {

NodeRow Node(const std::string& id, bool alive, const std::string& address, int64_t available_gib = 4) {
  NodeRow row;
  row.id = id;
  row.address = address;
  row.version = "0.1.0";
  row.heartbeat_at = alive ? UnixNowMs() : 1'000'000;  // 1970: long silent
  row.max_sandboxes = 100;
  row.sandboxes = 10;
  row.memory_total = 8ll << 30;
  row.memory_available = available_gib << 30;
  return row;
}

SnapshotRow SnapshotOf(const std::string& id, const std::string& sandbox) {
  SnapshotRow snapshot;
  snapshot.id = id;
  snapshot.sandbox_id = sandbox;
  snapshot.iss = "corp";
  snapshot.sub = "alice";
  return snapshot;
}

class FleetRouterTest : public StoreFixtureOf<::testing::Test> {
 protected:
  StoreBackend backend() const override { return StoreBackend::kPostgresql; }

  void SetUp() override {
    StoreFixtureOf<::testing::Test>::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    b_ = OpenNode("b");
    ASSERT_NE(b_, nullptr);
    // This node ("local"), b (alive, reachable), c (silent), d (alive, no address).
    ASSERT_TRUE(store_->RegisterNode(Node(store_->node_id(), true, "10.0.0.1:7080")).ok());
    ASSERT_TRUE(store_->RegisterNode(Node("b", true, "10.0.0.2:7080")).ok());
    ASSERT_TRUE(store_->RegisterNode(Node("c", false, "10.0.0.3:7080")).ok());
    ASSERT_TRUE(store_->RegisterNode(Node("d", true, "")).ok());
    registry_ = std::make_unique<NodeRegistry>(io_, *store_, NodeSettings{});
    router_ = std::make_unique<FleetRouter>(*store_, *registry_);
  }

  // A sandbox that node `node` holds (the store that makes a row marks it with its node).
  void SandboxOn(const std::string& id, Store& on) {
    ASSERT_TRUE(on.CreateSandbox(NewSandbox(id), kUidFirst, kUidStep, 64).ok());
  }
  void MoveTo(const std::string& id, const std::string& node) {
    RawExec("UPDATE sandboxes SET node_id = '" + node + "' WHERE id = '" + id + "'");
  }

  boost::asio::io_context io_;
  std::unique_ptr<Store> b_;
  std::unique_ptr<NodeRegistry> registry_;
  std::unique_ptr<FleetRouter> router_;
};

TEST_F(FleetRouterTest, WhatAnotherNodeHoldsIsThatNodes) {
  SandboxOn("sb_here", *store_);
  SandboxOn("sb_b", *b_);
  auto here = router_->Locate(FleetResource::kSandbox, "sb_here");
  ASSERT_TRUE(here.ok()) << here.status().ToString();
  EXPECT_TRUE(here->here);
  auto there = router_->Locate(FleetResource::kSandbox, "sb_b");
  ASSERT_TRUE(there.ok()) << there.status().ToString();
  EXPECT_FALSE(there->here);
  EXPECT_EQ(there->node_id, "b");
  EXPECT_EQ(there->address, "10.0.0.2:7080");
  // What the store does not have is answered here (the handler's not_found).
  auto unknown = router_->Locate(FleetResource::kSandbox, "sb_nope");
  ASSERT_TRUE(unknown.ok());
  EXPECT_TRUE(unknown->here);
}

TEST_F(FleetRouterTest, SnapshotsSessionsAndExecutionsAreWhereTheirNodeIs) {
  SandboxOn("sb_b", *b_);
  ASSERT_TRUE(b_->InsertSnapshot(SnapshotOf("snap_b", "sb_b")).ok());
  SessionRow session;
  session.id = "ses_b";
  session.sandbox_id = "sb_b";
  session.iss = "corp";
  session.sub = "alice";
  session.state = "idle";
  ASSERT_TRUE(store_->InsertSession(session).ok());  // a session is where its sandbox is
  ExecutionRow execution;
  execution.id = "exe_b";
  execution.iss = "corp";
  execution.sub = "alice";
  execution.state = "running";
  ASSERT_TRUE(b_->InsertExecution(execution).ok());
  for (auto [kind, id] : {std::pair{FleetResource::kSnapshot, "snap_b"}, std::pair{FleetResource::kSession, "ses_b"},
                          std::pair{FleetResource::kExecution, "exe_b"}}) {
    auto target = router_->Locate(kind, id);
    ASSERT_TRUE(target.ok()) << id << ": " << target.status().ToString();
    EXPECT_FALSE(target->here) << id;
    EXPECT_EQ(target->node_id, "b") << id;
  }
  // Control: the same kinds, this node's.
  ExecutionRow mine = execution;
  mine.id = "exe_here";
  ASSERT_TRUE(store_->InsertExecution(mine).ok());
  EXPECT_TRUE(router_->Locate(FleetResource::kExecution, "exe_here")->here);
}

TEST_F(FleetRouterTest, ADownOrUnreachableNodesThingsAreUnavailableSayingWhy) {
  SandboxOn("sb_c", *b_);
  MoveTo("sb_c", "c");
  auto down = router_->Locate(FleetResource::kSandbox, "sb_c");
  EXPECT_EQ(down.status().error_number(), EAGAIN);
  EXPECT_NE(down.status().message().find("on node c, not heard from since 1970-01-01T00:16:40Z"), std::string::npos)
      << down.status().message();
  SandboxOn("sb_d", *b_);
  MoveTo("sb_d", "d");
  auto unreachable = router_->Locate(FleetResource::kSandbox, "sb_d");
  EXPECT_EQ(unreachable.status().error_number(), EAGAIN);
  EXPECT_NE(unreachable.status().message().find("no node.address"), std::string::npos);
  SandboxOn("sb_gone", *b_);
  MoveTo("sb_gone", "removed-node");
  auto gone = router_->Locate(FleetResource::kSandbox, "sb_gone");
  EXPECT_EQ(gone.status().error_number(), EAGAIN);
  EXPECT_NE(gone.status().message().find("not in the fleet"), std::string::npos);
}

TEST_F(FleetRouterTest, PlacementTakesTheRoomierOfTwoOpenNodes) {
  // local: 4 of 8 GiB free; b: 7 of 8 (more room by far). c and d are never candidates.
  ASSERT_TRUE(store_->RegisterNode(Node("b", true, "10.0.0.2:7080", 7)).ok());
  for (size_t first : {0, 1}) {
    router_->SetRandom([first, call = 0](size_t n) mutable { return call++ == 0 ? first % n : 0; });
    auto placed = router_->Place("");
    ASSERT_TRUE(placed.ok()) << placed.status().ToString();
    EXPECT_FALSE(placed->here);
    EXPECT_EQ(placed->node_id, "b");
  }
  // Rooms within kSameRoom: the first of the two, whichever it is.
  ASSERT_TRUE(store_->RegisterNode(Node("b", true, "10.0.0.2:7080", 4)).ok());
  // (The open nodes by id: b, then this one.)
  router_->SetRandom([call = 0](size_t n) mutable { return call++ == 0 ? 1 % n : 0; });
  EXPECT_TRUE(router_->Place("")->here);
  router_->SetRandom([](size_t) { return 0; });
  EXPECT_FALSE(router_->Place("")->here);
  // A drained node is no candidate, however roomy.
  ASSERT_TRUE(store_->RegisterNode(Node("b", true, "10.0.0.2:7080", 8)).ok());
  ASSERT_TRUE(store_->SetNodeDrained("b", true).ok());
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(router_->Place("")->here);
}

TEST_F(FleetRouterTest, ASandboxFromASnapshotGoesWhereTheSnapshotIs) {
  SandboxOn("sb_b", *b_);
  ASSERT_TRUE(b_->InsertSnapshot(SnapshotOf("snap_b", "sb_b")).ok());
  router_->SetRandom([](size_t n) { return n - 1; });  // by room alone: this node (the last by id)
  auto placed = router_->Place("snap_b");
  ASSERT_TRUE(placed.ok()) << placed.status().ToString();
  EXPECT_EQ(placed->node_id, "b");
}

TEST_F(FleetRouterTest, NoOpenNodeIsHereWhichSaysWhyNot) {
  ASSERT_TRUE(store_->SetNodeDrained("b", true).ok());
  ASSERT_TRUE(store_->SetNodeDrained(store_->node_id(), true).ok());
  auto placed = router_->Place("");
  ASSERT_TRUE(placed.ok());
  EXPECT_TRUE(placed->here);
}

TEST(FleetRoom, IsTheSmallerOfFreeMemoryAndFreeSandboxShares) {
  NodeRow row = Node("n", true, "x:1", 6);  // 6 of 8 GiB free: 0.75
  row.sandboxes = 50;                          // of 100: 0.5
  EXPECT_DOUBLE_EQ(FleetRouter::Room(row), 0.5);
  row.sandboxes = 10;
  EXPECT_DOUBLE_EQ(FleetRouter::Room(row), 0.75);
  row.max_sandboxes = 0;  // no maximum: memory alone
  EXPECT_DOUBLE_EQ(FleetRouter::Room(row), 0.75);
  row.max_sandboxes = 5;  // over its maximum: none
  EXPECT_DOUBLE_EQ(FleetRouter::Room(row), 0.0);
  row = Node("n", true, "x:1");
  row.memory_total = 0;  // memory unread: the sandbox share alone
  EXPECT_DOUBLE_EQ(FleetRouter::Room(row), 0.9);
}

// A store that is one node's: everything here, without a catalog.
TEST(FleetRouterSqlite, OneNodesStoreAnswersHereForEverything) {
  test::TempDir dir("router");
  StoreOptions options;
  options.path = dir.path() + "/state.db";
  auto store = Store::Open(options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  boost::asio::io_context io;
  NodeRegistry registry(io, **store, NodeSettings{});
  FleetRouter router(**store, registry);
  ASSERT_TRUE((*store)->CreateSandbox(NewSandbox("sb_1"), kUidFirst, kUidStep, 8).ok());
  ASSERT_TRUE((*store)->RegisterNode(Node("other", true, "10.0.0.9:1", 8)).ok());
  EXPECT_TRUE(router.Locate(FleetResource::kSandbox, "sb_1")->here);
  EXPECT_TRUE(router.Place("")->here);
}

}  // namespace
}  // namespace corral::supervisor
