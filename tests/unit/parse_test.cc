#include "common/parse.h"

#include <gtest/gtest.h>

namespace corral {
namespace {

TEST(ParseSizeTest, AcceptsSuffixes) {
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("64K"), 64u << 10);
  EXPECT_EQ(*ParseSize("64M"), 64u << 20);
  EXPECT_EQ(*ParseSize("64m"), 64u << 20);
  EXPECT_EQ(*ParseSize("2G"), 2ull << 30);
  EXPECT_EQ(*ParseSize("1T"), 1ull << 40);
  EXPECT_EQ(*ParseSize("64MiB"), 64u << 20);
  EXPECT_EQ(*ParseSize("64MB"), 64u << 20);
  EXPECT_EQ(*ParseSize("1.5G"), 3ull << 29);
}

TEST(ParseSizeTest, RejectsGarbage) {
  for (const char* bad : {"", "M", "-1M", "1X", "64 M", "1..5G", "0x10", "1.M", "iB", "99999999999999999999"}) {
    EXPECT_FALSE(ParseSize(bad).ok()) << bad;
  }
}

TEST(ParseSizeTest, RejectsOverflow) { EXPECT_FALSE(ParseSize("99999999999T").ok()); }

TEST(ParseSecondsTest, Fractions) {
  EXPECT_EQ(*ParseSecondsToMicros("2"), 2000000u);
  EXPECT_EQ(*ParseSecondsToMicros("0.25"), 250000u);
  EXPECT_EQ(*ParseSecondsToMicros(".5"), 500000u);
  EXPECT_EQ(*ParseSecondsToMicros("1.0000001"), 1000000u);
  EXPECT_FALSE(ParseSecondsToMicros("-1").ok());
  EXPECT_FALSE(ParseSecondsToMicros("1s").ok());
  EXPECT_FALSE(ParseSecondsToMicros("").ok());
}

TEST(ParseFixedPointTest, Cores) {
  EXPECT_EQ(*ParseFixedPoint("1.5", 1000), 1500u);
  EXPECT_EQ(*ParseFixedPoint("0.01", 1000), 10u);
  EXPECT_EQ(*ParseFixedPoint("2", 1000), 2000u);
  EXPECT_FALSE(ParseFixedPoint("1,5", 1000).ok());
}

TEST(ParseUintTest, Strict) {
  EXPECT_EQ(*ParseUint("0"), 0u);
  EXPECT_EQ(*ParseUint("18446744073709551615"), UINT64_MAX);
  EXPECT_FALSE(ParseUint("18446744073709551616").ok());
  EXPECT_FALSE(ParseUint("+1").ok());
  EXPECT_FALSE(ParseUint("1 ").ok());
}

TEST(StatusTest, CarriesErrnoName) {
  Status s = ErrnoError("mount /proc", EPERM);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "mount /proc: EPERM");
  EXPECT_EQ(s.WithContext("setup").ToString(), "setup: mount /proc: EPERM");
  EXPECT_EQ(Status().ToString(), "OK");
}

}  // namespace
}  // namespace corral
