// When a session's workspace is scanned and what a turn's end reports (workspace_watch.h), on a
// real event loop and worker pool over a temp directory standing for the sandbox's root. The
// scans read as the agent (ScopedFsIdentity: setgroups), which needs root; elsewhere these skip.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include "supervisor/sessions/workspace_watch.h"
#include "tests/testing/temp_dir.h"

namespace corral::supervisor {
namespace {

class WorkspaceWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "scans switch the thread's groups (setgroups): root only";
    dir_.Put("ws/keep.txt", "k");
  }
  void TearDown() override { pool_.join(); }

  std::shared_ptr<WorkspaceWatch> Make(std::chrono::milliseconds interval = std::chrono::milliseconds(0)) {
    WorkspaceWatchOptions options;
    options.dir = "/ws";
    options.interval = interval;
    options.max_turn_files = 2;
    WorkspaceWatch::OpenRoot open_root = [this]() -> StatusOr<FileAccess> {
      if (refuse_) return Status::Error("sandbox is busy", EBUSY);
      FileAccess access;
      access.root.reset(open(dir_.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
      access.uid = getuid();
      access.gid = getgid();
      return access;
    };
    WorkspaceWatch::Sink sink{[this](const FileChange& c) { changes_.push_back(c); },
                              [this](const TurnFiles& f) { ends_.push_back(f); }};
    return std::make_shared<WorkspaceWatch>(io_, pool_, options, open_root, sink);
  }

  // Runs the loop until `done` or 10 s.
  void RunUntil(const std::function<bool()>& done) {
    auto guard = boost::asio::make_work_guard(io_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      io_.restart();
      io_.run_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(done()) << "not within 10 s";
  }

  test::TempDir dir_{"wswatch"};
  boost::asio::io_context io_;
  boost::asio::thread_pool pool_{1};
  bool refuse_ = false;
  std::vector<FileChange> changes_;
  std::vector<TurnFiles> ends_;
};

TEST_F(WorkspaceWatchTest, ATurnsEndReportsWhatChangedSinceTheBaselineOnce) {
  auto watch = Make();
  watch->Start();
  RunUntil([&] { return !watch->scanning(); });
  watch->TurnStarted();
  dir_.Put("ws/new.txt", "n");
  ASSERT_EQ(unlink(dir_.Join("ws/keep.txt").c_str()), 0);
  watch->TurnEnded(false);
  RunUntil([&] { return !ends_.empty(); });
  ASSERT_EQ(ends_.size(), 1u);
  ASSERT_EQ(ends_[0].files.size(), 2u);
  EXPECT_EQ(ends_[0].files[0].path, "keep.txt");
  EXPECT_EQ(ends_[0].files[0].kind, ChangeKind::kDelete);
  EXPECT_EQ(ends_[0].files[1].path, "new.txt");
  EXPECT_EQ((ends_[0].created + ends_[0].deleted), 2u);
  EXPECT_TRUE(ends_[0].observed);
  EXPECT_FALSE(ends_[0].truncated);
  EXPECT_EQ(changes_.size(), 2u);  // each change as an event too
  // The next turn starts from there: nothing changed, nothing reported.
  watch->TurnStarted();
  watch->TurnEnded(false);
  RunUntil([&] { return ends_.size() == 2; });
  EXPECT_TRUE(ends_[1].files.empty());
  EXPECT_EQ(changes_.size(), 2u);
}

TEST_F(WorkspaceWatchTest, PeriodicScansReportChangesBeforeTheTurnEnds) {
  auto watch = Make(std::chrono::milliseconds(50));
  watch->Start();
  RunUntil([&] { return !watch->scanning(); });
  watch->TurnStarted();
  dir_.Put("ws/early.txt", "e");
  RunUntil([&] { return !changes_.empty(); });  // no TurnEnded yet
  EXPECT_EQ(changes_[0].path, "early.txt");
  EXPECT_TRUE(ends_.empty());
  watch->TurnEnded(false);
  RunUntil([&] { return !ends_.empty(); });
  ASSERT_EQ(ends_[0].files.size(), 1u);  // reported once, in the turn's files
  EXPECT_EQ(changes_.size(), 1u);
}

TEST_F(WorkspaceWatchTest, MoreChangesThanTheBoundAreCountedAndTruncated) {
  auto watch = Make();
  watch->Start();
  RunUntil([&] { return !watch->scanning(); });
  for (int i = 0; i < 5; ++i) dir_.Put("ws/f" + std::to_string(i), "x");
  watch->TurnEnded(false);
  RunUntil([&] { return !ends_.empty(); });
  EXPECT_EQ(ends_[0].files.size(), 2u);  // max_turn_files
  EXPECT_EQ(changes_.size(), 2u);
  EXPECT_EQ(ends_[0].created, 5u);
  EXPECT_TRUE(ends_[0].truncated);
}

TEST_F(WorkspaceWatchTest, AnUnscannableWorkspaceEndsTheTurnUnobservedAndStopReportsWhatWaits) {
  auto watch = Make();
  watch->Start();
  RunUntil([&] { return !watch->scanning(); });
  refuse_ = true;  // frozen for a copy
  dir_.Put("ws/unseen.txt", "u");
  watch->TurnEnded(false);
  RunUntil([&] { return !ends_.empty(); });
  EXPECT_FALSE(ends_[0].observed);
  EXPECT_TRUE(ends_[0].files.empty());
  refuse_ = false;  // the baseline was kept: the next turn sees the change
  watch->TurnEnded(false);
  RunUntil([&] { return ends_.size() == 2; });
  ASSERT_EQ(ends_[1].files.size(), 1u);
  EXPECT_EQ(ends_[1].files[0].path, "unseen.txt");
  // A turn whose scan is still to come when the session ends: Stop hands it over, and nothing
  // is reported after.
  watch->TurnEnded(false);
  std::vector<TurnFiles> waiting = watch->Stop();
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_FALSE(waiting[0].observed);
  RunUntil([&] { return !watch->scanning(); });
  EXPECT_EQ(ends_.size(), 2u);
}

}  // namespace
}  // namespace corral::supervisor
