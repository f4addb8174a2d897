#include "api/ws_frames.h"

namespace corral::api {
namespace {

void PutBigEndian(std::string& out, uint64_t value, int bytes) {
  for (int shift = (bytes - 1) * 8; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>((value >> shift) & 0xff));
  }
}

uint64_t GetBigEndian(std::string_view in, size_t offset, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value = (value << 8) | static_cast<uint8_t>(in[offset + i]);
  return value;
}

}  // namespace

std::string EncodeFrame(const FrameHeader& header, std::string_view data) {
  std::string out;
  out.reserve(kFrameHeaderBytes + data.size());
  out.push_back(static_cast<char>(header.type));
  out.push_back(static_cast<char>(header.fd));
  PutBigEndian(out, header.channel, 4);
  PutBigEndian(out, header.seq, 8);
  out.append(data);
  return out;
}

std::string EncodeOutputFrame(uint32_t channel, uint8_t fd, uint64_t seq, std::string_view data) {
  return EncodeFrame(FrameHeader{FrameType::kOutput, fd, channel, seq}, data);
}

std::string EncodeStdinFrame(uint32_t channel, std::string_view data) {
  return EncodeFrame(FrameHeader{FrameType::kStdin, 0, channel, 0}, data);
}

StatusOr<Frame> DecodeFrame(std::string_view message) {
  if (message.size() < kFrameHeaderBytes) {
    return Status::Error("binary frame of " + std::to_string(message.size()) +
                         " bytes is shorter than its 14-byte header");
  }
  Frame frame;
  const uint8_t type = static_cast<uint8_t>(message[0]);
  frame.header.fd = static_cast<uint8_t>(message[1]);
  switch (type) {
    case static_cast<uint8_t>(FrameType::kOutput):
      if (frame.header.fd != 1 && frame.header.fd != 2) {
        return Status::Error("output frame with fd " + std::to_string(frame.header.fd));
      }
      break;
    case static_cast<uint8_t>(FrameType::kStdin):
      if (frame.header.fd != 0) {
        return Status::Error("stdin frame with fd " + std::to_string(frame.header.fd));
      }
      break;
    default:
      return Status::Error("binary frame of unknown type " + std::to_string(type));
  }
  frame.header.type = static_cast<FrameType>(type);
  frame.header.channel = static_cast<uint32_t>(GetBigEndian(message, 2, 4));
  frame.header.seq = GetBigEndian(message, 6, 8);
  frame.data = message.substr(kFrameHeaderBytes);
  return frame;
}

}  // namespace corral::api
