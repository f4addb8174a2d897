// THREATS.md row 38: `kill -9` during a run of acknowledged budget updates (ledger debits).
//
// A child process opens the store and adds ledger rows in a loop, writing each row's id to a
// pipe right after AddLedger returned OK: a line on the pipe is an acknowledged commit, as an
// API answer would be. The parent SIGKILLs it at a random point mid-way (no destructor, no
// close, no checkpoint: the WAL holds the commits), then reopens the store and checks that every
// acknowledged row is there with its amount, that nothing else is (at most the one row committed
// but not yet acknowledged), that the sums agree, that `PRAGMA integrity_check` says ok, and
// that the store takes new writes. For both `synchronous` settings: a process kill is not a
// power cut, so NORMAL must keep every acknowledged commit as FULL does.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "supervisor/store/store.h"
#include "tests/testing/temp_dir.h"
#include "tests/unit/store_test_util.h"

namespace corral::supervisor {
namespace {

// RawDb and Exists: store_test_util.h.

constexpr int64_t kRows = 2000;  // the child would write this many if nobody stopped it

// The i-th debit (i from 1): its amount and time tell it apart from every other.
int64_t AmountOf(int64_t i) { return 1000 + 7 * i; }

LedgerRow Debit(int64_t i) {
  LedgerRow row;
  row.iss = "corp";
  row.sub = "alice";
  row.kind = i % 3 == 0 ? "compute" : "ai";
  row.amount = AmountOf(i);
  row.at = i;
  row.session_id = "ses_crash";
  row.model = row.kind == "ai" ? "claude-sonnet-4-5" : "";
  row.input_tokens = i;
  return row;
}

// What the child writes to the pipe per acknowledged debit (16 bytes: one atomic pipe write).
struct Ack {
  int64_t i;
  int64_t id;
};

// Child: add kRows debits, acknowledging each on `fd`. Exit codes say where it failed; a clean
// exit (0) means nobody killed it.
[[noreturn]] void WriteDebits(const std::string& path, Synchronous synchronous, int fd) {
  auto store = Store::Open(path, synchronous);
  if (!store.ok()) _exit(2);
  for (int64_t i = 1; i <= kRows; ++i) {
    auto id = (*store)->AddLedger(Debit(i));
    if (!id.ok()) _exit(3);
    Ack ack{i, *id};
    if (::write(fd, &ack, sizeof ack) != static_cast<ssize_t>(sizeof ack)) _exit(4);
  }
  _exit(0);
}

// Parent: reads acks from `fd` into `acks` until EOF, SIGKILLing `child` once `kill_after` have
// arrived.
void ReadAcksKillingChild(int fd, pid_t child, int64_t kill_after, std::vector<Ack>& acks) {
  bool killed = false;
  for (;;) {
    Ack ack{};
    ssize_t n = ::read(fd, &ack, sizeof ack);
    if (n < 0 && errno == EINTR) continue;
    ASSERT_GE(n, 0) << "read: " << errno;
    if (n == 0) break;
    ASSERT_EQ(n, static_cast<ssize_t>(sizeof ack));
    acks.push_back(ack);
    if (!killed && static_cast<int64_t>(acks.size()) >= kill_after) {
      ASSERT_EQ(::kill(child, SIGKILL), 0);
      killed = true;
    }
  }
}

class StoreCrashTest : public ::testing::TestWithParam<Synchronous> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    path_ = dir_.path() + "/state.db";
  }

  test::TempDir dir_{"store-crash"};
  std::string path_;
};

TEST_P(StoreCrashTest, EveryAcknowledgedDebitSurvivesKill9) {
  std::random_device seed_source;
  const unsigned seed = seed_source();
  std::mt19937 random(seed);
  // Mid-way, and past the WAL's automatic checkpoint (1,000 pages) for some runs.
  const int64_t kill_after = std::uniform_int_distribution<int64_t>(300, 1500)(random);
  SCOPED_TRACE("seed " + std::to_string(seed) + ", kill after " + std::to_string(kill_after) + " acks");

  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  // The smallest pipe (one page: 256 acks), so that the child cannot run far ahead of what the
  // parent has read, and the kill lands mid-way.
  ASSERT_GT(::fcntl(fds[1], F_SETPIPE_SZ, 4096), 0) << errno;
  const int64_t pipe_acks = ::fcntl(fds[1], F_GETPIPE_SZ) / static_cast<int64_t>(sizeof(Ack));

  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fds[0]);
    WriteDebits(path_, GetParam(), fds[1]);
  }
  ::close(fds[1]);

  // Read acks; SIGKILL the child after `kill_after` of them, then drain the pipe: what the child
  // wrote before it died was acknowledged too.
  std::vector<Ack> acks;
  ASSERT_NO_FATAL_FAILURE(ReadAcksKillingChild(fds[0], child, kill_after, acks));
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);

  // Positive controls: the child really died by the kill, mid-way (it had more to write), after
  // acknowledging at least what we waited for; and without closing the store (the commits are in
  // the WAL, not yet checkpointed into the database by a clean close).
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child was not killed; it exited with " << WEXITSTATUS(status);
  ASSERT_EQ(WTERMSIG(status), SIGKILL);
  const int64_t acked = static_cast<int64_t>(acks.size());
  ASSERT_GE(acked, kill_after);
  ASSERT_LE(acked, kill_after + pipe_acks + 1);
  ASSERT_LT(acked, kRows) << "the child wrote everything before the kill";
  EXPECT_TRUE(Exists(path_ + "-wal"));
  for (int64_t k = 0; k < acked; ++k) ASSERT_EQ(acks[k].i, k + 1);

  // Reopen as the daemon does after a crash.
  auto reopened = Store::Open(path_, GetParam());
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  Store& store = **reopened;

  auto rows = store.ListLedger("", "", 0, kRows + 1);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  // Every acknowledged debit, in order, with its id and amount; beyond them at most the one the
  // child committed and was killed before acknowledging.
  ASSERT_GE(static_cast<int64_t>(rows->size()), acked) << "acknowledged debits lost";
  ASSERT_LE(static_cast<int64_t>(rows->size()), acked + 1) << "debits nobody wrote";
  int64_t expected_ai = 0, expected_compute = 0;
  for (size_t k = 0; k < rows->size(); ++k) {
    const LedgerRow& row = (*rows)[k];
    const int64_t i = static_cast<int64_t>(k) + 1;
    if (k < acks.size()) {
      EXPECT_EQ(row.id, acks[k].id) << "debit " << i;
    }
    const LedgerRow want = Debit(i);
    EXPECT_EQ(row.at, want.at) << "debit " << i;
    EXPECT_EQ(row.amount, want.amount) << "debit " << i;
    EXPECT_EQ(row.kind, want.kind) << "debit " << i;
    EXPECT_EQ(row.input_tokens, want.input_tokens) << "debit " << i;
    (want.kind == "ai" ? expected_ai : expected_compute) += want.amount;
  }
  auto ai = store.LedgerSum("corp", "alice", "ai", 0, kRows + 1);
  auto compute = store.LedgerSum("corp", "alice", "compute", 0, kRows + 1);
  ASSERT_TRUE(ai.ok() && compute.ok());
  EXPECT_EQ(*ai, expected_ai);
  EXPECT_EQ(*compute, expected_compute);
  {
    RawDb raw(path_);
    EXPECT_EQ(raw.Exec("PRAGMA integrity_check"), "ok");
  }

  // The store takes new writes, and they are kept.
  LedgerRow next = Debit(kRows + 1);
  auto next_id = store.AddLedger(next);
  ASSERT_TRUE(next_id.ok()) << next_id.status().ToString();
  EXPECT_GT(*next_id, rows->back().id);
  reopened->reset();
  auto again = Store::Open(path_, GetParam());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  auto tail = (*again)->ListLedger("", "", 0, kRows + 2, rows->back().id);
  ASSERT_TRUE(tail.ok());
  ASSERT_EQ(tail->size(), 1u);
  EXPECT_EQ((*tail)[0].id, *next_id);
  EXPECT_EQ((*tail)[0].amount, next.amount);
  RawDb raw(path_);
  EXPECT_EQ(raw.Exec("PRAGMA integrity_check"), "ok");
  EXPECT_EQ(raw.Exec("SELECT COUNT(*) FROM ledger"), std::to_string(rows->size() + 1));
}

INSTANTIATE_TEST_SUITE_P(BothModes, StoreCrashTest,
                         ::testing::Values(Synchronous::kNormal, Synchronous::kFull),
                         [](const ::testing::TestParamInfo<Synchronous>& mode) {
                           return mode.param == Synchronous::kFull ? std::string("Full") : std::string("Normal");
                         });

}  // namespace
}  // namespace corral::supervisor
