// EventStream: the numbered events of one command, with a bounded replay buffer and
// backpressure.
//
// Events get seq 1, 2, 3, ... in order. Subscribers (client connections) receive each event as
// it is appended; the stream also keeps the most recent ones, up to a byte budget, so that a
// client that reconnects can resume after the last seq it saw. When the budget is exceeded the
// oldest events are dropped, and a resume from before them fails with a gap (the caller says
// so to the client, with first_seq) instead of silently skipping output.
//
// Backpressure: Blocked() is true while any subscriber reports it is full. The producer (the
// command's output pump) stops reading its pipes while the stream is blocked, so a slow client
// slows the command, not the daemon's memory. With no subscriber at all the stream is never
// blocked: output then only lands in the replay buffer.
//
// Single-threaded: used on the daemon's event loop only.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "common/status.h"

namespace corral::supervisor {

struct StreamEvent {
  enum class Kind { kOutput, kExit };
  uint64_t seq = 0;
  Kind kind = Kind::kOutput;
  int fd = 1;        // output: 1 stdout (and a PTY), 2 stderr
  std::string data;  // output bytes; for kExit the outcome as JSON text
};

class StreamSubscriber {
 public:
  virtual ~StreamSubscriber() = default;
  virtual void OnStreamEvent(const StreamEvent& event) = 0;
  virtual bool StreamFull() const = 0;
};

class EventStream {
 public:
  // `first_seq` > 1 for a command adopted after a restart: its numbering goes on above every
  // seq the previous daemon may have handed out.
  explicit EventStream(size_t max_buffer_bytes, uint64_t first_seq = 1)
      : max_bytes_(max_buffer_bytes), next_seq_(first_seq < 1 ? 1 : first_seq) {}

  // Appends, numbers, buffers and delivers an event to every subscriber.
  const StreamEvent& Append(StreamEvent::Kind kind, int fd, std::string data);

  // Replays the buffered events after `after_seq`, then delivers new ones as they come. Fails
  // with ERANGE when events after `after_seq` were dropped from the buffer (see first_seq()).
  Status Subscribe(StreamSubscriber* subscriber, uint64_t after_seq);
  void Unsubscribe(StreamSubscriber* subscriber);
  bool subscribed(const StreamSubscriber* subscriber) const;
  size_t subscriber_count() const { return subscribers_.size(); }

  bool Blocked() const;
  // The oldest seq still buffered (last_seq() + 1 when the buffer is empty).
  uint64_t first_seq() const;
  uint64_t last_seq() const { return next_seq_ - 1; }
  bool ended() const { return ended_; }
  size_t buffered_bytes() const { return buffered_bytes_; }

 private:
  size_t max_bytes_;
  uint64_t next_seq_ = 1;
  bool ended_ = false;
  std::deque<StreamEvent> buffer_;
  size_t buffered_bytes_ = 0;
  std::vector<StreamSubscriber*> subscribers_;
};

}  // namespace corral::supervisor
