#include "supervisor/commands/event_stream.h"

#include <algorithm>
#include <cerrno>

namespace corral::supervisor {
namespace {

// What an event costs in the buffer besides its data, so that a flood of empty events is
// bounded too.
constexpr size_t kEventOverhead = 64;

}  // namespace

const StreamEvent& EventStream::Append(StreamEvent::Kind kind, int fd, std::string data) {
  StreamEvent event;
  event.seq = next_seq_++;
  event.kind = kind;
  event.fd = fd;
  event.data = std::move(data);
  if (kind == StreamEvent::Kind::kExit) ended_ = true;
  buffered_bytes_ += event.data.size() + kEventOverhead;
  buffer_.push_back(std::move(event));
  // Drop the oldest, but always keep the newest (the exit event in particular).
  while (buffered_bytes_ > max_bytes_ && buffer_.size() > 1) {
    buffered_bytes_ -= buffer_.front().data.size() + kEventOverhead;
    buffer_.pop_front();
  }
  const StreamEvent& appended = buffer_.back();
  // A subscriber may unsubscribe itself (or others) from its callback: iterate over a copy.
  std::vector<StreamSubscriber*> subscribers = subscribers_;
  for (StreamSubscriber* subscriber : subscribers) {
    if (subscribed(subscriber)) subscriber->OnStreamEvent(appended);
  }
  return appended;
}

Status EventStream::Subscribe(StreamSubscriber* subscriber, uint64_t after_seq) {
  if (after_seq + 1 < first_seq()) {
    return Status::Error("events " + std::to_string(after_seq + 1) + " to " +
                             std::to_string(first_seq() - 1) + " were dropped from the replay buffer",
                         ERANGE);
  }
  if (!subscribed(subscriber)) subscribers_.push_back(subscriber);
  for (const StreamEvent& event : buffer_) {
    if (event.seq > after_seq) subscriber->OnStreamEvent(event);
  }
  return Status();
}

void EventStream::Unsubscribe(StreamSubscriber* subscriber) {
  subscribers_.erase(std::remove(subscribers_.begin(), subscribers_.end(), subscriber), subscribers_.end());
}

bool EventStream::subscribed(const StreamSubscriber* subscriber) const {
  return std::find(subscribers_.begin(), subscribers_.end(), subscriber) != subscribers_.end();
}

bool EventStream::Blocked() const {
  return std::any_of(subscribers_.begin(), subscribers_.end(),
                     [](const StreamSubscriber* s) { return s->StreamFull(); });
}

uint64_t EventStream::first_seq() const { return buffer_.empty() ? next_seq_ : buffer_.front().seq; }

}  // namespace corral::supervisor
