// Per-user request rates: a token bucket per key that holds up to `per_minute` requests and
// refills at per_minute / 60 a second, so a user may burst a minute's worth and then goes at the
// rate. Single-threaded (the daemon's event loop); time is passed in, for tests.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace corral::supervisor {

class RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  // per_minute 0: no limit.
  explicit RateLimiter(uint64_t per_minute) : per_minute_(per_minute) {}

  // A new rate (a config reload): every bucket starts again full at it.
  void SetPerMinute(uint64_t per_minute) {
    per_minute_ = per_minute;
    buckets_.clear();
  }

  // Takes one request from `key`'s bucket; false (and nothing taken) when it is empty.
  bool Allow(const std::string& key, Clock::time_point now = Clock::now()) {
    if (per_minute_ == 0) return true;
    Prune(now);
    auto [it, fresh] = buckets_.try_emplace(key, Bucket{static_cast<double>(per_minute_), now});
    Bucket& bucket = it->second;
    if (!fresh) Refill(bucket, now);
    if (bucket.tokens < 1.0) return false;
    bucket.tokens -= 1.0;
    return true;
  }

  // Seconds until `key` may make its next request (0: now).
  uint64_t RetryAfterSeconds(const std::string& key, Clock::time_point now = Clock::now()) {
    auto it = buckets_.find(key);
    if (per_minute_ == 0 || it == buckets_.end()) return 0;
    Refill(it->second, now);
    if (it->second.tokens >= 1.0) return 0;
    const double seconds = (1.0 - it->second.tokens) * 60.0 / static_cast<double>(per_minute_);
    return std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(seconds)));
  }

  uint64_t per_minute() const { return per_minute_; }
  size_t tracked() const { return buckets_.size(); }

 private:
  struct Bucket {
    double tokens;
    Clock::time_point at;
  };

  void Refill(Bucket& bucket, Clock::time_point now) const {
    const double seconds = std::chrono::duration<double>(now - bucket.at).count();
    if (seconds <= 0) return;
    bucket.tokens = std::min(static_cast<double>(per_minute_),
                             bucket.tokens + seconds * static_cast<double>(per_minute_) / 60.0);
    bucket.at = now;
  }

  // Buckets that have refilled completely say nothing a fresh one would not: drop them, at most
  // once a minute, so the map holds only users active in the last minute.
  void Prune(Clock::time_point now) {
    if (now - pruned_at_ < std::chrono::minutes(1)) return;
    pruned_at_ = now;
    for (auto it = buckets_.begin(); it != buckets_.end();) {
      if (now - it->second.at >= std::chrono::minutes(1)) {
        it = buckets_.erase(it);
      } else {
        ++it;
      }
    }
  }

  uint64_t per_minute_;
  std::unordered_map<std::string, Bucket> buckets_;
  Clock::time_point pruned_at_{};
};

}  // namespace corral::supervisor
