// supervisor::SandboxEvents over a real SQLite store: a sandbox's log from a seq on, and the
// watcher told of each event appended until it is taken away.
#include "supervisor/sandboxes/sandbox_events.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <memory>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "tests/unit/store_test_util.h"

namespace corral::supervisor {
namespace {

// A store on a temporary directory (store_test_util.h), and the service over it.
class SandboxEventsTest : public StoreTest {
 protected:
  void SetUp() override {
    StoreTest::SetUp();
    events_ = std::make_unique<SandboxEvents>(*store_);
  }

  int64_t Append(const std::string& sandbox, const std::string& type) {
    auto seq = store_->AppendEvent(sandbox, type, "{}");
    EXPECT_TRUE(seq.ok());
    return seq.ok() ? *seq : -1;
  }

  std::unique_ptr<SandboxEvents> events_;
};

TEST_F(SandboxEventsTest, ListsOneSandboxFromASeqOn) {
  const int64_t started = Append("sb_1", "sandbox.started");
  Append("sb_2", "sandbox.started");
  const int64_t exited = Append("sb_1", "command.exited");
  const int64_t stopped = Append("sb_1", "sandbox.stopped");
  auto all = events_->List("sb_1", 0, 1000);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].seq, started);
  EXPECT_EQ((*all)[2].type, "sandbox.stopped");
  auto after = events_->List("sb_1", started, 1);
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->size(), 1u);
  EXPECT_EQ((*after)[0].seq, exited);
  auto none = events_->List("sb_1", stopped, 1000);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_F(SandboxEventsTest, TheWatcherHearsEachAppendUntilTakenAway) {
  std::vector<EventRow> heard;
  events_->Watch([&](const EventRow& event) { heard.push_back(event); });
  const int64_t seq = Append("sb_1", "sandbox.started");
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0].seq, seq);
  EXPECT_EQ(heard[0].sandbox_id, "sb_1");
  EXPECT_EQ(heard[0].type, "sandbox.started");
  events_->Watch(nullptr);
  Append("sb_1", "sandbox.stopped");
  EXPECT_EQ(heard.size(), 1u);
}

}  // namespace
}  // namespace corral::supervisor
