#include "common/hex.h"

#include <cstdio>

#include <gtest/gtest.h>

namespace corral {
namespace {

TEST(HexTest, EveryByteAsPrintfWritesIt) {
  std::string all;
  std::string expected;
  for (int b = 0; b < 256; ++b) {
    all.push_back(static_cast<char>(b));
    char two[3];
    std::snprintf(two, sizeof(two), "%02x", b);
    expected += two;
  }
  EXPECT_EQ(HexLower(all), expected);
  EXPECT_EQ(HexLower(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(all.data()), all.size())), expected);
}

TEST(HexTest, EmptyAndOrder) {
  EXPECT_EQ(HexLower(std::string_view()), "");
  const uint8_t bytes[] = {0x01, 0xf0};
  EXPECT_EQ(HexLower(bytes), "01f0");  // the high nibble first, bytes in order
}

}  // namespace
}  // namespace corral
