// The binary frames of the WebSocket protocol (docs/PROTOCOL.md): 14-byte big-endian header.
#include "api/ws_frames.h"

#include <gtest/gtest.h>

#include <string>

namespace corral::api {
namespace {

std::string Bytes(std::initializer_list<int> bytes) {
  std::string out;
  for (int b : bytes) out.push_back(static_cast<char>(b));
  return out;
}

TEST(WsFramesTest, OutputFrameLayoutByteByByte) {
  std::string frame = EncodeOutputFrame(0x01020304u, 2, 0x0a0b0c0d0e0f1011ull, "hi");
  EXPECT_EQ(frame, Bytes({1, 2, 0x01, 0x02, 0x03, 0x04, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11}) + "hi");
  ASSERT_EQ(frame.size(), kFrameHeaderBytes + 2);
}

TEST(WsFramesTest, StdinFrameHasFdZeroAndSeqZero) {
  std::string frame = EncodeStdinFrame(7, "ls\n");
  EXPECT_EQ(frame, Bytes({2, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0}) + "ls\n");
}

TEST(WsFramesTest, RoundTrip) {
  const std::string data("\0\xff binary \n", 11);
  for (uint8_t fd : {1, 2}) {
    std::string encoded = EncodeOutputFrame(0xffffffffu, fd, UINT64_MAX, data);
    auto decoded = DecodeFrame(encoded);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(decoded->header.type, FrameType::kOutput);
    EXPECT_EQ(decoded->header.fd, fd);
    EXPECT_EQ(decoded->header.channel, 0xffffffffu);
    EXPECT_EQ(decoded->header.seq, UINT64_MAX);
    EXPECT_EQ(decoded->data, data);
  }
  std::string encoded = EncodeStdinFrame(42, "input");
  auto decoded = DecodeFrame(encoded);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->header.type, FrameType::kStdin);
  EXPECT_EQ(decoded->header.fd, 0);
  EXPECT_EQ(decoded->header.channel, 42u);
  EXPECT_EQ(decoded->header.seq, 0u);
  EXPECT_EQ(decoded->data, "input");
}

TEST(WsFramesTest, DecodesBigEndianFields) {
  auto decoded = DecodeFrame(Bytes({1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 2}));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->header.channel, 256u);
  EXPECT_EQ(decoded->header.seq, 258u);
  EXPECT_TRUE(decoded->data.empty());
}

TEST(WsFramesTest, HeaderOnlyIsValidAndEmpty) {
  auto decoded = DecodeFrame(EncodeStdinFrame(1, ""));
  ASSERT_TRUE(decoded.ok());
  EXPECT_TRUE(decoded->data.empty());
}

TEST(WsFramesTest, DataPointsIntoTheMessage) {
  std::string encoded = EncodeOutputFrame(1, 1, 1, "abc");
  auto decoded = DecodeFrame(encoded);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->data.data(), encoded.data() + kFrameHeaderBytes);
}

TEST(WsFramesTest, ShortFramesAreRejected) {
  std::string full = EncodeOutputFrame(1, 1, 1, "");
  for (size_t size = 0; size < kFrameHeaderBytes; ++size) {
    auto decoded = DecodeFrame(full.substr(0, size));
    ASSERT_FALSE(decoded.ok()) << size;
    EXPECT_NE(decoded.status().message().find("shorter than its 14-byte header"), std::string::npos)
        << decoded.status().message();
  }
}

TEST(WsFramesTest, UnknownTypesAndWrongFdsAreRejected) {
  EXPECT_FALSE(DecodeFrame(Bytes({0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1})).ok());
  EXPECT_FALSE(DecodeFrame(Bytes({3, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1})).ok());
  EXPECT_FALSE(DecodeFrame(Bytes({255, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1})).ok());
  // Output: fd 1 or 2 only.
  EXPECT_FALSE(DecodeFrame(Bytes({1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1})).ok());
  EXPECT_FALSE(DecodeFrame(Bytes({1, 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1})).ok());
  // Stdin: fd 0 only.
  EXPECT_FALSE(DecodeFrame(Bytes({2, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})).ok());
  EXPECT_TRUE(DecodeFrame(Bytes({2, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})).ok());
}

TEST(WsFramesTest, EncodeFrameWritesTheHeaderAsGiven) {
  FrameHeader header{FrameType::kStdin, 0, 0x80000000u, 0x8000000000000000ull};
  std::string frame = EncodeFrame(header, "x");
  EXPECT_EQ(frame, Bytes({2, 0, 0x80, 0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0}) + "x");
}

}  // namespace
}  // namespace corral::api
