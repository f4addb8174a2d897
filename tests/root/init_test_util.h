// Helpers for tests that talk to corral-init's control protocol directly (supervisor/
// init_protocol.h): wait for a message of one type, read a stream to its end.
#pragma once

#include <optional>
#include <string>

#include "supervisor/commands/init_client.h"

namespace corral::supervisor {

// True when `fd` becomes readable within `timeout_ms`.
bool WaitReadable(int fd, int timeout_ms = 10000);
// Reads messages (waiting at most 10 s for each) until one of `type` arrives; nullopt on
// timeout or EOF.
std::optional<InitMessage> Expect(int fd, initproto::MsgType type);
// Reads `fd` until EOF (or 10 s of silence).
std::string Drain(int fd);

}  // namespace corral::supervisor
