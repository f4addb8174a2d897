// The store's checkpoints (store_checkpoints.cc), on both engines: kept with what a restore needs,
// listed by session oldest first, and gone with their snapshot (ON DELETE CASCADE), not with their
// sandbox (a checkpoint outlives it, as a snapshot does).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "supervisor/store/store.h"
#include "tests/unit/store_test_util.h"

namespace corral::supervisor {
namespace {

CheckpointRow Checkpoint(const std::string& id, const std::string& session, const std::string& snapshot, int64_t at) {
  CheckpointRow row;
  row.id = id;
  row.session_id = session;
  row.sandbox_id = "sb_1";
  row.snapshot_id = snapshot;
  row.iss = "corp";
  row.sub = "alice";
  row.agent_session = "0b8f7d1e-0000-4000-8000-000000000001";
  row.cwd = "/home/agent/repo";
  row.turns = 3;
  row.created_at = at;
  return row;
}

std::vector<std::string> IdsOf(const StatusOr<std::vector<CheckpointRow>>& rows) {
  std::vector<std::string> ids;
  EXPECT_TRUE(rows.ok()) << rows.status().ToString();
  if (rows.ok()) {
    for (const CheckpointRow& row : *rows) ids.push_back(row.id);
  }
  return ids;
}

TEST_P(StoreEngineTest, CheckpointsAreKeptAndListedBySession) {
  ASSERT_GT(Create("sb_1"), 0);
  ASSERT_TRUE(store_->InsertSnapshot({"snap_1", "sb_1", "corp", "alice", "host", 5, 100}).ok());
  ASSERT_TRUE(store_->InsertSnapshot({"snap_2", "sb_1", "corp", "alice", "host", 6, 100}).ok());
  ASSERT_TRUE(store_->InsertCheckpoint(Checkpoint("chk_b", "ses_1", "snap_2", 20)).ok());
  ASSERT_TRUE(store_->InsertCheckpoint(Checkpoint("chk_a", "ses_1", "snap_1", 10)).ok());
  ASSERT_TRUE(store_->InsertCheckpoint(Checkpoint("chk_c", "ses_2", "snap_1", 15)).ok());
  auto got = store_->GetCheckpoint("chk_a");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  const CheckpointRow& row = **got;
  EXPECT_EQ(row.session_id, "ses_1");
  EXPECT_EQ(row.sandbox_id, "sb_1");
  EXPECT_EQ(row.snapshot_id, "snap_1");
  EXPECT_EQ(row.iss, "corp");
  EXPECT_EQ(row.sub, "alice");
  EXPECT_EQ(row.agent_session, "0b8f7d1e-0000-4000-8000-000000000001");
  EXPECT_EQ(row.cwd, "/home/agent/repo");
  EXPECT_EQ(row.turns, 3);
  EXPECT_EQ(row.created_at, 10);
  EXPECT_FALSE(store_->GetCheckpoint("chk_none")->has_value());
  EXPECT_EQ(IdsOf(store_->ListCheckpoints("ses_1")), (std::vector<std::string>{"chk_a", "chk_b"}));
  EXPECT_EQ(IdsOf(store_->ListCheckpoints("ses_2")), std::vector<std::string>{"chk_c"});
  EXPECT_TRUE(IdsOf(store_->ListCheckpoints("ses_none")).empty());
  // The same id twice: refused.
  EXPECT_FALSE(store_->InsertCheckpoint(Checkpoint("chk_a", "ses_1", "snap_1", 30)).ok());
}

TEST_P(StoreEngineTest, ACheckpointGoesWithItsSnapshotNotWithItsSandbox) {
  ASSERT_GT(Create("sb_1"), 0);
  ASSERT_TRUE(store_->InsertSnapshot({"snap_1", "sb_1", "corp", "alice", "host", 5, 100}).ok());
  ASSERT_TRUE(store_->InsertSnapshot({"snap_2", "sb_1", "corp", "alice", "host", 6, 100}).ok());
  ASSERT_TRUE(store_->InsertCheckpoint(Checkpoint("chk_a", "ses_1", "snap_1", 10)).ok());
  ASSERT_TRUE(store_->InsertCheckpoint(Checkpoint("chk_b", "ses_1", "snap_2", 20)).ok());
  ASSERT_TRUE(store_->DeleteSandbox("sb_1").ok());
  EXPECT_EQ(IdsOf(store_->ListCheckpoints("ses_1")), (std::vector<std::string>{"chk_a", "chk_b"}));
  ASSERT_TRUE(store_->DeleteSnapshot("snap_1").ok());
  EXPECT_FALSE(store_->GetCheckpoint("chk_a")->has_value());
  EXPECT_EQ(IdsOf(store_->ListCheckpoints("ses_1")), std::vector<std::string>{"chk_b"});
  // A checkpoint of no snapshot cannot be.
  EXPECT_FALSE(store_->InsertCheckpoint(Checkpoint("chk_x", "ses_1", "snap_none", 30)).ok());
}

CORRAL_STORE_ON_BOTH_ENGINES();

}  // namespace
}  // namespace corral::supervisor
