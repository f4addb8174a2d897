#include "tests/root/init_test_util.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace corral::supervisor {

bool WaitReadable(int fd, int timeout_ms) {
  struct pollfd pfd = {fd, POLLIN, 0};
  return poll(&pfd, 1, timeout_ms) == 1;
}

std::optional<InitMessage> Expect(int fd, initproto::MsgType type) {
  for (;;) {
    if (!WaitReadable(fd, kSilenceMs)) return std::nullopt;
    auto message = ReceiveMessage(fd, true);
    if (!message.ok() || !message->has_value()) return std::nullopt;
    if ((*message)->type == type) return std::move(**message);
  }
}

std::string Drain(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    if (!WaitReadable(fd, kSilenceMs)) break;
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EAGAIN) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace corral::supervisor
