// The store's ledger, sessions and headless executions, on SQLite and on PostgreSQL (the fixture
// in store_test_util.h).
#include "supervisor/store/store.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include "tests/unit/store_test_util.h"

namespace corral::supervisor {
namespace {

// ---------------------------------------------------------------------------------------------
// Ledger

LedgerRow Debit(const std::string& sub, const std::string& kind, int64_t amount, int64_t at,
                const std::string& session = "") {
  LedgerRow row;
  row.iss = "corp";
  row.sub = sub;
  row.kind = kind;
  row.amount = amount;
  row.at = at;
  row.session_id = session;
  row.model = kind == "ai" ? "claude-sonnet-4-5" : "";
  row.input_tokens = kind == "ai" ? 100 : 0;
  return row;
}

TEST_P(StoreEngineTest, LedgerSumsOneUsersDebitsOfAKindInAWindow) {
  ASSERT_TRUE(store_->AddLedger(Debit("alice", "ai", 1500, 1000, "ses_a")).ok());
  ASSERT_TRUE(store_->AddLedger(Debit("alice", "ai", 250, 1999, "ses_b")).ok());
  ASSERT_TRUE(store_->AddLedger(Debit("alice", "ai", 7, 2000)).ok());       // the next window
  ASSERT_TRUE(store_->AddLedger(Debit("alice", "compute", 9000, 1500)).ok());
  ASSERT_TRUE(store_->AddLedger(Debit("bob", "ai", 100000, 1500)).ok());
  auto spent = store_->LedgerSum("corp", "alice", "ai", 1000, 2000);
  ASSERT_TRUE(spent.ok()) << spent.status().ToString();
  EXPECT_EQ(*spent, 1750);
  EXPECT_EQ(*store_->LedgerSum("corp", "alice", "ai", 2000, 3000), 7);
  EXPECT_EQ(*store_->LedgerSum("corp", "alice", "compute", 0, 3000), 9000);
  EXPECT_EQ(*store_->LedgerSum("corp", "bob", "ai", 0, 3000), 100000);
  // The user is the pair: the same sub under another issuer has spent nothing.
  EXPECT_EQ(*store_->LedgerSum("other", "alice", "ai", 0, 3000), 0);
  EXPECT_FALSE(store_->LedgerSum("corp", "alice", "dollars", 0, 3000).ok());
  EXPECT_FALSE(store_->AddLedger(Debit("alice", "dollars", 1, 1)).ok());
}

TEST_P(StoreEngineTest, LedgerRowsKeepTheirUsageAndListInOrder) {
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(store_->AddLedger(Debit(i % 2 ? "bob" : "alice", "ai", 10 + i, 100 + i)).ok());
  auto all = store_->ListLedger("", "", 0, 1000);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 5u);
  EXPECT_EQ((*all)[0].amount, 10);
  EXPECT_EQ((*all)[0].model, "claude-sonnet-4-5");
  EXPECT_EQ((*all)[0].input_tokens, 100);
  EXPECT_LT((*all)[0].id, (*all)[1].id);
  auto alice = store_->ListLedger("corp", "alice", 0, 1000);
  ASSERT_TRUE(alice.ok());
  EXPECT_EQ(alice->size(), 3u);
  // Paging by id, and the window's end is exclusive.
  auto page = store_->ListLedger("corp", "", 0, 104, (*all)[1].id, 10);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].amount, 12);
  EXPECT_EQ((*page)[1].amount, 13);
  // Control: a debit outlives a reopen (it is committed).
  store_.reset();
  store_ = OpenStore();
  ASSERT_NE(store_, nullptr);
  EXPECT_EQ(*store_->LedgerSum("corp", "alice", "ai", 0, 1000), 10 + 12 + 14);
}

TEST_P(StoreEngineTest, LedgerTotalsSumOneUserByKindSandboxAndSessionInAWindow) {
  LedgerRow a = Debit("alice", "ai", 1500, 1000, "ses_a");
  a.sandbox_id = "sb_1";
  LedgerRow b = Debit("alice", "ai", 250, 1100, "ses_a");
  b.sandbox_id = "sb_1";
  LedgerRow c = Debit("alice", "ai", 40, 1200, "ses_b");
  c.sandbox_id = "sb_1";
  LedgerRow cpu1 = Debit("alice", "compute", 900, 1300);
  cpu1.sandbox_id = "sb_1";
  LedgerRow cpu2 = Debit("alice", "compute", 100, 1400);
  cpu2.sandbox_id = "sb_2";
  for (const LedgerRow& row : {a, b, c, cpu1, cpu2}) ASSERT_TRUE(store_->AddLedger(row).ok());
  ASSERT_TRUE(store_->AddLedger(Debit("alice", "ai", 7, 2000, "ses_a")).ok());  // the next window
  ASSERT_TRUE(store_->AddLedger(Debit("bob", "ai", 5, 1500, "ses_a")).ok());    // another user
  auto totals = store_->LedgerTotals("corp", "alice", 1000, 2000);
  ASSERT_TRUE(totals.ok()) << totals.status().ToString();
  ASSERT_EQ(totals->size(), 4u);
  EXPECT_EQ((*totals)[0].kind, "ai");
  EXPECT_EQ((*totals)[0].session_id, "ses_a");
  EXPECT_EQ((*totals)[0].amount, 1750);
  EXPECT_EQ((*totals)[0].count, 2);
  EXPECT_EQ((*totals)[1].session_id, "ses_b");
  EXPECT_EQ((*totals)[1].amount, 40);
  EXPECT_EQ((*totals)[2].kind, "compute");
  EXPECT_EQ((*totals)[2].sandbox_id, "sb_1");
  EXPECT_EQ((*totals)[2].amount, 900);
  EXPECT_EQ((*totals)[3].sandbox_id, "sb_2");
  EXPECT_EQ((*totals)[3].amount, 100);
  // Control: an empty window has no totals.
  EXPECT_TRUE(store_->LedgerTotals("corp", "alice", 3000, 4000)->empty());
}

TEST_P(StoreEngineTest, SandboxKeepsItsBudgetBilledCpuAndEgressRules) {
  ASSERT_GE(Create("sb_1"), 0);
  auto row = store_->GetSandbox("sb_1");
  ASSERT_TRUE(row.ok() && row->has_value());
  EXPECT_EQ((*row)->budget, Budget{});
  EXPECT_EQ((*row)->cpu_billed_usec, 0);
  EXPECT_EQ((*row)->egress, std::nullopt);
  SandboxRow changed = **row;
  changed.budget.compute_ms = 5000;
  changed.budget.window = BudgetWindow::kDay;
  changed.cpu_billed_usec = 123456;
  changed.egress = EgressRules{{"*.example.test"}, {443}, {}};
  ASSERT_TRUE(store_->UpdateSandbox(changed).ok());
  // UpdateSandbox leaves the rules alone (a row read before a change must not undo it); only
  // SetSandboxEgress writes them.
  EXPECT_EQ((*store_->GetSandbox("sb_1"))->egress, std::nullopt);
  ASSERT_TRUE(store_->SetSandboxEgress("sb_1", *changed.egress).ok());
  EXPECT_EQ(store_->SetSandboxEgress("sb_none", {}).error_number(), ENOENT);
  store_.reset();
  store_ = OpenStore();
  ASSERT_NE(store_, nullptr);
  auto reread = store_->GetSandbox("sb_1");
  ASSERT_TRUE(reread.ok() && reread->has_value());
  EXPECT_EQ((*reread)->budget, changed.budget);
  EXPECT_EQ((*reread)->cpu_billed_usec, 123456);
  EXPECT_EQ((*reread)->egress, changed.egress);
}

// ---------------------------------------------------------------------------------------------
// Sessions

SessionRow NewSession(const std::string& id, const std::string& sandbox, const std::string& sub = "alice") {
  SessionRow row;
  row.id = id;
  row.sandbox_id = sandbox;
  row.iss = "corp";
  row.sub = sub;
  row.state = "initializing";
  row.agent_session = "0b8f7d1e-3c1a-4a8e-9a52-6d2b6e0f1a23";
  row.options_json = R"({"model":"claude-sonnet-5-5"})";
  row.budget.ai_micro_usd = 5000000;
  row.created_at = row.updated_at = 100;
  return row;
}

TEST_P(StoreEngineTest, SessionsRoundTripAndGoWithTheirSandbox) {
  ASSERT_GE(Create("sb_1"), 0);
  ASSERT_GE(Create("sb_2", 8, "bob"), 0);
  ASSERT_TRUE(store_->InsertSession(NewSession("ses_a", "sb_1")).ok());
  ASSERT_TRUE(store_->InsertSession(NewSession("ses_b", "sb_1")).ok());
  ASSERT_TRUE(store_->InsertSession(NewSession("ses_c", "sb_2", "bob")).ok());
  // A session needs its sandbox; ids are unique.
  EXPECT_FALSE(store_->InsertSession(NewSession("ses_d", "sb_nope")).ok());
  EXPECT_FALSE(store_->InsertSession(NewSession("ses_a", "sb_1")).ok());

  SessionRow row = NewSession("ses_a", "sb_1");
  row.state = "completed";
  row.outcome_json = R"({"outcome":"completed"})";
  row.cost_micro_usd = 21000;
  row.turns = 2;
  row.ended_at = 200;
  ASSERT_TRUE(store_->UpdateSession(row).ok());
  auto got = store_->GetSession("ses_a");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->state, "completed");
  EXPECT_EQ((*got)->cost_micro_usd, 21000);
  EXPECT_EQ((*got)->turns, 2);
  EXPECT_EQ((*got)->agent_session, "0b8f7d1e-3c1a-4a8e-9a52-6d2b6e0f1a23");
  EXPECT_EQ((*got)->options_json, R"({"model":"claude-sonnet-5-5"})");
  EXPECT_EQ(store_->UpdateSession(NewSession("ses_zz", "sb_1")).error_number(), ENOENT);

  auto alices = store_->ListSessions("corp", "alice");
  ASSERT_TRUE(alices.ok());
  ASSERT_EQ(alices->size(), 2u);
  EXPECT_EQ((*alices)[0].id, "ses_a");
  EXPECT_EQ(store_->ListSessions("corp", "bob")->size(), 1u);
  EXPECT_EQ(store_->ListSessions("", "", "sb_1")->size(), 2u);
  EXPECT_EQ(store_->ListSessions("other", "alice")->size(), 0u);

  // Destroying the sandbox takes its sessions (their transcripts lived in its files).
  ASSERT_TRUE(store_->DeleteSandbox("sb_1").ok());
  EXPECT_FALSE(store_->GetSession("ses_a")->has_value());
  EXPECT_TRUE(store_->GetSession("ses_c")->has_value());
}

// ---------------------------------------------------------------------------------------------
// Executions

ExecutionRow NewExecution(const std::string& id, const std::string& sub = "alice", int64_t created_at = 100) {
  ExecutionRow row;
  row.id = id;
  row.iss = "corp";
  row.sub = sub;
  row.state = "running";
  row.sandbox_id = "sb_gone";  // no sandbox row: a record outlives its sandbox
  row.session_id = "ses_1";
  row.request_json = R"({"task":"fix the bug"})";
  row.created_at = row.updated_at = created_at;
  return row;
}

TEST_P(StoreEngineTest, ExecutionsRoundTripEveryColumnAndListOnlyTheirUsers) {
  ASSERT_TRUE(store_->InsertExecution(NewExecution("exe_a", "alice", 100)).ok());
  ASSERT_TRUE(store_->InsertExecution(NewExecution("exe_b", "alice", 101)).ok());
  ASSERT_TRUE(store_->InsertExecution(NewExecution("exe_c", "bob", 102)).ok());
  EXPECT_EQ(store_->InsertExecution(NewExecution("exe_a")).error_number(), EEXIST);

  ExecutionRow row = NewExecution("exe_a");
  row.state = "completed";
  row.base_commit = "8a59dee6b0ec2b4e753ebb806791a626a42c9f9f";
  row.head_commit = "76e477164e4deafa4533cfba1332c6b92b018ad9";
  row.summary = "done";
  row.outcome = "completed";
  row.cost_micro_usd = 12345;
  row.usage_json = R"({"input_tokens":10})";
  row.files_json = R"([{"path":"a","status":"modified"}])";
  row.diff = "diff --git a/a b/a\n";  // any bytes, NUL included
  row.diff += '\xff';
  row.diff += '\0';
  row.diff += "binary";
  row.diff_truncated = true;
  row.bundle_bytes = 7;
  row.error = "none";
  row.updated_at = row.ended_at = 300;
  ASSERT_TRUE(store_->UpdateExecution(row).ok());
  auto got = store_->GetExecution("exe_a");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  const ExecutionRow& e = **got;
  EXPECT_EQ(std::tie(e.id, e.iss, e.sub, e.state, e.sandbox_id, e.session_id, e.request_json, e.base_commit,
                     e.head_commit, e.summary, e.outcome, e.cost_micro_usd, e.usage_json, e.files_json, e.diff,
                     e.diff_truncated, e.bundle_bytes, e.error, e.created_at, e.updated_at, e.ended_at),
            std::tie(row.id, row.iss, row.sub, row.state, row.sandbox_id, row.session_id, row.request_json,
                     row.base_commit, row.head_commit, row.summary, row.outcome, row.cost_micro_usd, row.usage_json,
                     row.files_json, row.diff, row.diff_truncated, row.bundle_bytes, row.error, row.created_at,
                     row.updated_at, row.ended_at));
  EXPECT_EQ(e.diff.size(), 27u);
  EXPECT_EQ(store_->UpdateExecution(NewExecution("exe_zz")).error_number(), ENOENT);
  EXPECT_FALSE(store_->GetExecution("exe_zz")->has_value());

  // Another user's are not listed; the owner's come oldest first.
  auto alices = store_->ListExecutions("corp", "alice");
  ASSERT_TRUE(alices.ok());
  ASSERT_EQ(alices->size(), 2u);
  EXPECT_EQ((*alices)[0].id, "exe_a");
  EXPECT_EQ((*alices)[1].id, "exe_b");
  auto bobs = store_->ListExecutions("corp", "bob");
  ASSERT_EQ(bobs->size(), 1u);
  EXPECT_EQ((*bobs)[0].id, "exe_c");
  EXPECT_EQ(store_->ListExecutions("other", "alice")->size(), 0u);
  EXPECT_EQ(store_->ListExecutions("", "", "running")->size(), 2u);
}

TEST_P(StoreEngineTest, ExecutionBundlesAreBytesStoredApartAndGoWithTheirRecord) {
  ASSERT_TRUE(store_->InsertExecution(NewExecution("exe_a")).ok());
  ASSERT_TRUE(store_->InsertExecution(NewExecution("exe_b")).ok());
  // A bundle needs its record.
  EXPECT_FALSE(store_->SetExecutionBundle("exe_nope", "x").ok());
  EXPECT_FALSE(store_->GetExecutionBundle("exe_a")->has_value());
  std::string bundle = "# v2 git bundle\n";
  for (int i = 0; i < 256; ++i) bundle += static_cast<char>(i);
  ASSERT_TRUE(store_->SetExecutionBundle("exe_a", bundle).ok());
  auto got = store_->GetExecutionBundle("exe_a");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  EXPECT_EQ(**got, bundle);
  EXPECT_EQ(RawExec(postgres() ? "SELECT pg_typeof(data)::text FROM execution_bundles"
                               : "SELECT typeof(data) FROM execution_bundles"),
            postgres() ? "bytea" : "blob");
  // Replaced, and an empty one is still there (not NULL).
  ASSERT_TRUE(store_->SetExecutionBundle("exe_b", "").ok());
  ASSERT_TRUE(store_->GetExecutionBundle("exe_b")->has_value());
  EXPECT_EQ(**store_->GetExecutionBundle("exe_b"), "");
  ASSERT_TRUE(store_->SetExecutionBundle("exe_a", "second").ok());
  EXPECT_EQ(**store_->GetExecutionBundle("exe_a"), "second");
  ASSERT_TRUE(store_->DeleteExecution("exe_a").ok());
  EXPECT_FALSE(store_->GetExecutionBundle("exe_a")->has_value());
  EXPECT_EQ(store_->DeleteExecution("exe_a").error_number(), ENOENT);
  EXPECT_TRUE(store_->GetExecutionBundle("exe_b")->has_value());
}

TEST_P(StoreEngineTest, RecoveryFailsRunningExecutionsAndLeavesEndedOnes) {
  ASSERT_TRUE(store_->InsertExecution(NewExecution("exe_run1")).ok());
  ASSERT_TRUE(store_->InsertExecution(NewExecution("exe_run2", "bob")).ok());
  ExecutionRow done = NewExecution("exe_done");
  done.state = "completed";
  done.ended_at = 150;
  ASSERT_TRUE(store_->InsertExecution(done).ok());
  ExecutionRow bad = NewExecution("exe_bad");
  bad.state = "dreaming";  // the table takes the three states only
  EXPECT_FALSE(store_->InsertExecution(bad).ok());

  auto failed = store_->FailRunningExecutions("daemon restarted", 500);
  ASSERT_TRUE(failed.ok()) << failed.status().ToString();
  ASSERT_EQ(failed->size(), 2u);
  for (const auto& row : *failed) {
    EXPECT_EQ(row.state, "failed");
    EXPECT_EQ(row.error, "daemon restarted");
  }
  for (const char* id : {"exe_run1", "exe_run2"}) {
    auto row = store_->GetExecution(id);
    ASSERT_TRUE(row.ok() && row->has_value());
    EXPECT_EQ((*row)->state, "failed") << id;
    EXPECT_EQ((*row)->error, "daemon restarted") << id;
    EXPECT_EQ((*row)->ended_at, 500) << id;
    EXPECT_EQ((*row)->sandbox_id, "sb_gone") << id;  // the rest is kept
  }
  auto kept = store_->GetExecution("exe_done");
  EXPECT_EQ((*kept)->state, "completed");
  EXPECT_EQ((*kept)->ended_at, 150);
  EXPECT_EQ((*kept)->error, "");
  // Nothing is left running: a second pass finds nothing.
  EXPECT_EQ(store_->FailRunningExecutions("again", 600)->size(), 0u);
}

CORRAL_STORE_ON_BOTH_ENGINES();

}  // namespace
}  // namespace corral::supervisor
