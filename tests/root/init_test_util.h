// Helpers for tests that talk to corral-init's control protocol directly (supervisor/
// init_protocol.h): wait for a message of one type, read a stream to its end.
#pragma once

#include <optional>
#include <string>

#include "supervisor/commands/init_client.h"

namespace corral::supervisor {

// True when `fd` becomes readable within `timeout_ms`.
bool WaitReadable(int fd, int timeout_ms = 10000);
// How long Expect and Drain wait for the next byte: long, because a program that prints only at
// its end (node starting, a loop making thousands of files) is slow in the cgroup v2 suite's
// QEMU guest without KVM beside a build (a CI run saw 10 s pass in silence). Only a test that
// is failing anyway waits it out.
inline constexpr int kSilenceMs = 60000;

// Reads messages (waiting at most kSilenceMs for each) until one of `type` arrives; nullopt on
// timeout or EOF.
std::optional<InitMessage> Expect(int fd, initproto::MsgType type);
// Reads `fd` until EOF (or kSilenceMs of silence).
std::string Drain(int fd);

}  // namespace corral::supervisor
