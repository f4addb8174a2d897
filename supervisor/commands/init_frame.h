// One message of the control protocol (init_protocol.h) on the wire: a Header and a body in one
// datagram, with file descriptors as SCM_RIGHTS. Written once for both ends: corrald
// (init_client.cc) and corral-init (tools/corral-init/control.cc), which is a static binary:
// this header uses only the C library's socket calls, nothing to link.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "supervisor/commands/init_protocol.h"

namespace corral::initproto {

// An outgoing message laid out for sendmsg(2). Fill only writes this object's own memory (no
// allocation, no system call), so corral-init's command child, between clone and execve, sends
// with it too.
struct OutFrame {
  Header header{};
  struct iovec iov[2]{};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)]{};
  struct msghdr msg{};

  // `size` bytes of `body` after the header, and `nfds` descriptors. False (nothing filled) when
  // nfds is above kMaxFds.
  bool Fill(MsgType type, const void* body, uint32_t size, const int* fds, size_t nfds) {
    if (nfds > static_cast<size_t>(kMaxFds)) return false;
    header = {type, size};
    iov[0] = {&header, sizeof(header)};
    iov[1] = {const_cast<void*>(body), size};
    msg.msg_iov = iov;
    msg.msg_iovlen = size > 0 ? 2 : 1;
    if (nfds > 0) {
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
      struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
      memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    return true;
  }

  // What a complete send writes.
  size_t bytes() const { return sizeof(Header) + header.body_size; }
};

// Sends one message (retrying EINTR, never raising SIGPIPE). Returns sendmsg's result: -1 with
// errno (EINVAL for more than kMaxFds descriptors), else the bytes sent.
inline ssize_t SendFrame(int fd, MsgType type, const void* body, uint32_t size, const int* fds, size_t nfds) {
  OutFrame frame;
  if (!frame.Fill(type, body, size, fds, nfds)) {
    errno = EINVAL;
    return -1;
  }
  ssize_t n;
  do {
    n = sendmsg(fd, &frame.msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

// Receives one datagram into `buffer` (retrying EINTR) with MSG_CMSG_CLOEXEC | `flags`. Every
// descriptor that came with it goes to `on_fd(int)` (the caller owns them from then on, also
// when it then refuses the message). With `sender_pid`, room is made for SCM_CREDENTIALS (the
// socket has SO_PASSCRED) and the sender's pid is stored there. `truncated` is set when the
// message or its descriptors did not fit. Returns recvmsg's result: -1 with errno, 0 at EOF,
// else the datagram's size (the header's checks are the caller's).
template <typename OnFd>
ssize_t ReceiveFrame(int fd, char* buffer, size_t size, int flags, pid_t* sender_pid, bool* truncated,
                     OnFd on_fd) {
  struct iovec iov = {buffer, size};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds) + CMSG_SPACE(sizeof(struct ucred))];
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  // Without credentials, room for kMaxFds descriptors and no more (more is MSG_CTRUNC).
  msg.msg_controllen = sender_pid != nullptr ? sizeof(control) : CMSG_SPACE(sizeof(int) * kMaxFds);
  ssize_t n;
  do {
    n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | flags);
  } while (n < 0 && errno == EINTR);
  *truncated = false;
  if (n < 0) return n;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET) continue;
    if (c->cmsg_type == SCM_RIGHTS) {
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int received;
        memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        on_fd(received);
      }
    } else if (c->cmsg_type == SCM_CREDENTIALS && sender_pid != nullptr) {
      struct ucred cred;
      memcpy(&cred, CMSG_DATA(c), sizeof(cred));
      *sender_pid = cred.pid;
    }
  }
  *truncated = (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
  return n;
}

}  // namespace corral::initproto
