#include "supervisor/commands/event_stream.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <vector>

namespace corral::supervisor {
namespace {

class Recorder : public StreamSubscriber {
 public:
  void OnStreamEvent(const StreamEvent& event) override { seqs.push_back(event.seq); }
  bool StreamFull() const override { return full; }
  std::vector<uint64_t> seqs;
  bool full = false;
};

using Kind = StreamEvent::Kind;

TEST(EventStreamTest, NumbersEventsAndDeliversThemLive) {
  EventStream stream(1 << 20);
  Recorder r;
  ASSERT_TRUE(stream.Subscribe(&r, 0).ok());
  EXPECT_EQ(stream.Append(Kind::kOutput, 1, "a").seq, 1u);
  EXPECT_EQ(stream.Append(Kind::kOutput, 2, "b").seq, 2u);
  EXPECT_EQ(r.seqs, (std::vector<uint64_t>{1, 2}));
  EXPECT_FALSE(stream.ended());
  stream.Append(Kind::kExit, 0, "{}");
  EXPECT_TRUE(stream.ended());
}

TEST(EventStreamTest, AnAdoptedCommandsStreamNumbersAboveThePreviousDaemons) {
  EventStream stream(1 << 20, 1025);
  EXPECT_EQ(stream.first_seq(), 1025u);
  EXPECT_EQ(stream.last_seq(), 1024u);
  // A client that saw seq 10 from the previous daemon is told it may have missed some...
  Recorder before;
  Status gap = stream.Subscribe(&before, 10);
  EXPECT_EQ(gap.error_number(), ERANGE);
  // ...and resumes from what this daemon holds.
  Recorder after;
  ASSERT_TRUE(stream.Subscribe(&after, stream.first_seq() - 1).ok());
  EXPECT_EQ(stream.Append(Kind::kOutput, 1, "a").seq, 1025u);
  EXPECT_EQ(after.seqs, (std::vector<uint64_t>{1025}));
  // A client that saw everything (a clean stop stores the exact last seq) goes on seamlessly.
  Recorder seamless;
  ASSERT_TRUE(stream.Subscribe(&seamless, 1024).ok());
  EXPECT_EQ(seamless.seqs, (std::vector<uint64_t>{1025}));
}

TEST(EventStreamTest, ResumeReplaysOnlyWhatFollowsTheLastSeenSeq) {
  EventStream stream(1 << 20);
  for (int i = 0; i < 5; ++i) stream.Append(Kind::kOutput, 1, "x");
  Recorder r;
  ASSERT_TRUE(stream.Subscribe(&r, 3).ok());
  EXPECT_EQ(r.seqs, (std::vector<uint64_t>{4, 5}));
  stream.Append(Kind::kOutput, 1, "y");
  EXPECT_EQ(r.seqs.back(), 6u);
}

TEST(EventStreamTest, DroppedEventsMakeResumeFailWithAGapInsteadOfSkipping) {
  EventStream stream(1000);  // room for a few 100-byte events
  for (int i = 0; i < 50; ++i) stream.Append(Kind::kOutput, 1, std::string(100, 'x'));
  EXPECT_GT(stream.first_seq(), 1u);
  EXPECT_LE(stream.buffered_bytes(), 1000u);
  Recorder late;
  Status gap = stream.Subscribe(&late, 0);
  EXPECT_FALSE(gap.ok());
  EXPECT_EQ(gap.error_number(), ERANGE);
  EXPECT_TRUE(late.seqs.empty());
  EXPECT_FALSE(stream.subscribed(&late));
  // Positive control: resuming from just before the oldest buffered event works.
  Recorder ok;
  ASSERT_TRUE(stream.Subscribe(&ok, stream.first_seq() - 1).ok());
  EXPECT_EQ(ok.seqs.front(), stream.first_seq());
  EXPECT_EQ(ok.seqs.back(), 50u);
}

TEST(EventStreamTest, TheNewestEventIsKeptEvenWhenItAloneExceedsTheBudget) {
  EventStream stream(10);
  stream.Append(Kind::kOutput, 1, "small");
  stream.Append(Kind::kExit, 0, std::string(500, 'e'));
  EXPECT_EQ(stream.first_seq(), 2u);
  Recorder r;
  ASSERT_TRUE(stream.Subscribe(&r, 1).ok());
  EXPECT_EQ(r.seqs, (std::vector<uint64_t>{2}));
}

TEST(EventStreamTest, BlockedWhileAnySubscriberIsFullAndNeverWithoutSubscribers) {
  EventStream stream(1 << 20);
  EXPECT_FALSE(stream.Blocked());
  Recorder fast, slow;
  ASSERT_TRUE(stream.Subscribe(&fast, 0).ok());
  ASSERT_TRUE(stream.Subscribe(&slow, 0).ok());
  EXPECT_FALSE(stream.Blocked());
  slow.full = true;
  EXPECT_TRUE(stream.Blocked());
  stream.Unsubscribe(&slow);
  EXPECT_FALSE(stream.Blocked());
}

TEST(EventStreamTest, ASubscriberMayUnsubscribeFromItsCallback) {
  EventStream stream(1 << 20);
  struct OneShot : StreamSubscriber {
    EventStream* stream = nullptr;
    int calls = 0;
    void OnStreamEvent(const StreamEvent&) override {
      ++calls;
      stream->Unsubscribe(this);
    }
    bool StreamFull() const override { return false; }
  } once;
  once.stream = &stream;
  Recorder other;
  ASSERT_TRUE(stream.Subscribe(&once, 0).ok());
  ASSERT_TRUE(stream.Subscribe(&other, 0).ok());
  stream.Append(Kind::kOutput, 1, "a");
  stream.Append(Kind::kOutput, 1, "b");
  EXPECT_EQ(once.calls, 1);
  EXPECT_EQ(other.seqs.size(), 2u);
}

}  // namespace
}  // namespace corral::supervisor
