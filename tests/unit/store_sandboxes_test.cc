// The store's sandboxes (and their uid ranges), snapshots, commands and events, on SQLite and on
// PostgreSQL (the fixture in store_test_util.h).
#include "supervisor/store/store.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include "tests/unit/store_test_util.h"

namespace corral::supervisor {
namespace {

// ---------------------------------------------------------------------------------------------
// Sandboxes

TEST_P(StoreEngineTest, CreateSandboxAssignsLowestFreeUidBase) {
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

TEST_P(StoreEngineTest, CreateSandboxIsEnospcWhenSlotsAreFull) {
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

TEST_P(StoreEngineTest, CreateSandboxIgnoresRowsOffTheGrid) {
  // A row outside the grid (e.g. from an older configuration) takes neither a slot nor
  // suggests one of its own.
  SandboxRow odd = NewSandbox("sb_odd");
  ASSERT_TRUE(store_->CreateSandbox(odd, kUidFirst + 7, kUidStep, 1).ok());
  EXPECT_EQ(Create("sb_a"), kUidFirst);
  EXPECT_EQ(Create("sb_b"), kUidFirst + kUidStep);
  // sb_odd + step lies below the next slot; it must not be handed out.
  EXPECT_EQ(Create("sb_c"), kUidFirst + 2 * kUidStep);
}

TEST_P(StoreEngineTest, CreateSandboxRejectsInvalidRangeAndDuplicateId) {
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

TEST_P(StoreEngineTest, UpdateAndGetRoundTripEveryColumn) {
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
  row.limits.memory_bytes = 1ull << 30;
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

  // Text with quotes and non-ASCII survives binding and reading.
  row.name = "a'b\"é ?1 $1";
  ASSERT_TRUE(store_->UpdateSandbox(row).ok());
  after = store_->GetSandbox("sb_1");
  ASSERT_TRUE(after.ok());
  ASSERT_TRUE(after->has_value());
  EXPECT_EQ((*after)->name, row.name);
  // A NUL byte too in SQLite; PostgreSQL's TEXT cannot hold one and refuses it (EINVAL), the row
  // left as it was (the API refuses a name with a NUL before it reaches the store).
  const std::string kept = row.name;
  row.name = std::string("a\0b'\"é", 7);
  Status nul = store_->UpdateSandbox(row);
  after = store_->GetSandbox("sb_1");
  ASSERT_TRUE(after.ok());
  ASSERT_TRUE(after->has_value());
  if (postgres()) {
    EXPECT_EQ(nul.error_number(), EINVAL) << nul.ToString();
    EXPECT_EQ((*after)->name, kept);
  } else {
    EXPECT_TRUE(nul.ok()) << nul.ToString();
    EXPECT_EQ((*after)->name, row.name);
  }
}

TEST_P(StoreEngineTest, UpdateMissingSandboxIsEnoentAndUidBaseStaysUnique) {
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

TEST_P(StoreEngineTest, ListByUserOrAllAndCount) {
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

TEST_P(StoreEngineTest, EventListenerSeesEveryAppendInOrderAsStored) {
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

TEST_P(StoreEngineTest, DeleteSandboxCascadesCommandsKeepsEventsAndSnapshots) {
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

TEST_P(StoreEngineTest, SnapshotsCrud) {
  SnapshotRow a{"snap_a", "sb_1", "corp", "alice", "host", 20, 1 << 20, 0xC0010000, {.disk_bytes = 1}};
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

TEST_P(StoreEngineTest, InsertCommandNumbersPerSandbox) {
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

TEST_P(StoreEngineTest, UpdateCommandRoundTrip) {
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

TEST_P(StoreEngineTest, ListCommandsNewestFirstActiveOnlyAndLimit) {
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

TEST_P(StoreEngineTest, EventsAppendAndListAfterSeq) {
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
TEST_P(StoreEngineTest, EventSeqIsNeverReused) {
  auto first = store_->AppendEvent("sb_1", "a", "{}");
  auto last = store_->AppendEvent("sb_1", "b", "{}");
  ASSERT_TRUE(first.ok() && last.ok());
  RawExec("DELETE FROM events WHERE seq = " + std::to_string(*last));
  EXPECT_EQ(RawExec("SELECT MAX(seq) FROM events"), std::to_string(*first));  // Control.
  auto next = store_->AppendEvent("sb_1", "c", "{}");
  ASSERT_TRUE(next.ok());
  EXPECT_GT(*next, *last);
}

CORRAL_STORE_ON_BOTH_ENGINES();

}  // namespace
}  // namespace corral::supervisor
