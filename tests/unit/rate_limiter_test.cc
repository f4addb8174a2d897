// The per-user token bucket behind api.requests_per_minute and relay.requests_per_minute.
#include "supervisor/relay/rate_limiter.h"

#include <gtest/gtest.h>

namespace corral::supervisor {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(RateLimiterTest, AllowsAMinutesBurstThenTheRate) {
  RateLimiter limiter(60);  // one a second
  const auto t0 = RateLimiter::Clock::time_point{} + std::chrono::hours(1);
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(limiter.Allow("alice", t0)) << i;
  EXPECT_FALSE(limiter.Allow("alice", t0));
  EXPECT_EQ(limiter.RetryAfterSeconds("alice", t0), 1u);
  // Half a second refills half a request: still no.
  EXPECT_FALSE(limiter.Allow("alice", t0 + milliseconds(500)));
  // A whole second refills one.
  EXPECT_TRUE(limiter.Allow("alice", t0 + milliseconds(1000)));
  EXPECT_FALSE(limiter.Allow("alice", t0 + milliseconds(1000)));
  // Users have their own buckets: bob is not slowed by alice.
  EXPECT_TRUE(limiter.Allow("bob", t0 + milliseconds(1000)));
  // After a minute of rest the burst is back, not more.
  const auto later = t0 + seconds(120);
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(limiter.Allow("alice", later)) << i;
  EXPECT_FALSE(limiter.Allow("alice", later));
}

TEST(RateLimiterTest, ZeroMeansNoLimitAndIdleUsersAreForgotten) {
  RateLimiter unlimited(0);
  for (int i = 0; i < 10000; ++i) ASSERT_TRUE(unlimited.Allow("alice"));
  EXPECT_EQ(unlimited.tracked(), 0u);

  RateLimiter limiter(6);
  const auto t0 = RateLimiter::Clock::time_point{} + std::chrono::hours(1);
  for (int i = 0; i < 100; ++i) limiter.Allow("user" + std::to_string(i), t0);
  EXPECT_EQ(limiter.tracked(), 100u);
  // A minute later they are all full again: one new request prunes them.
  EXPECT_TRUE(limiter.Allow("late", t0 + seconds(61)));
  EXPECT_EQ(limiter.tracked(), 1u);
}

}  // namespace
}  // namespace corral::supervisor
