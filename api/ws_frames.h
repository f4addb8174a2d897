// The binary WebSocket frames of the protocol (docs/PROTOCOL.md, "WebSocket"): command output
// from the daemon and stdin from clients, with a 14-byte header, all integers big-endian:
//
//   byte 0      type: 1 output, 2 stdin
//   byte 1      fd: 1 stdout, 2 stderr (output; a PTY's output is fd 1), 0 (stdin)
//   bytes 2-5   channel, u32 (from the exec/attach result)
//   bytes 6-13  seq, u64 (output: the event's sequence number; stdin: 0)
//   bytes 14-   the data
//
// Pure code shared by corrald and the corral CLI: no I/O, no Beast.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace corral::api {

enum class FrameType : uint8_t {
  kOutput = 1,
  kStdin = 2,
};

inline constexpr size_t kFrameHeaderBytes = 14;

struct FrameHeader {
  FrameType type = FrameType::kOutput;
  uint8_t fd = 1;
  uint32_t channel = 0;
  uint64_t seq = 0;
};

// A decoded frame. `data` points into the message it was decoded from.
struct Frame {
  FrameHeader header;
  std::string_view data;
};

// Header followed by `data`. Does not validate: callers build headers from known values.
std::string EncodeFrame(const FrameHeader& header, std::string_view data);

// An output frame for stdout/stderr, and a stdin frame (fd 0, seq 0).
std::string EncodeOutputFrame(uint32_t channel, uint8_t fd, uint64_t seq, std::string_view data);
std::string EncodeStdinFrame(uint32_t channel, std::string_view data);

// Decodes a binary message. Errors (the daemon closes with 1002 on them): shorter than the
// header, an unknown type, an fd the type does not allow (output: 1 or 2; stdin: 0). Empty data
// is valid.
StatusOr<Frame> DecodeFrame(std::string_view message);

}  // namespace corral::api
