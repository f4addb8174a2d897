// Entering network namespaces from the daemon's threads (the parent side; never between clone and
// exec). setns(fd, CLONE_NEWNET) moves only the calling thread, and a socket stays in the
// namespace it was made in wherever its thread goes afterwards: so a socket for another network is
// made by entering it, calling socket(2) and coming back, and longer netlink or nftables work in
// another namespace runs on a thread of its own that ends with it.
#pragma once

#include <optional>
#include <string_view>
#include <thread>
#include <utility>

#include "common/status.h"
#include "common/unique_fd.h"

namespace corral::isolation {

// Moves the calling thread into the network namespace `ns_fd`: a namespace file (/run/netns/NAME,
// /proc/PID/ns/net) or a pidfd (that process's namespace, Linux 5.8). Errors are
// ErrnoError(what).
Status EnterNetworkNamespace(int ns_fd, std::string_view what);

// The calling thread's network namespace, opened (/proc/thread-self/ns/net): to come back to, or
// to name it to the kernel (a veth's peer is moved there by fd). An error is ErrnoError(what).
StatusOr<UniqueFd> OpenThreadNetworkNamespace(std::string_view what);

// socket(domain, type, 0) made in the network namespace `ns_fd`: the calling thread enters it
// (an error is ErrnoError("setns " + ns_name)), makes the socket and returns to `home_fd`, the
// namespace it was in (opened from /proc/thread-self/ns/net beforehand). A thread that cannot
// return aborts the process: every later socket it made would be in the wrong network.
StatusOr<UniqueFd> SocketInNetworkNamespace(int ns_fd, int home_fd, int domain, int type,
                                            std::string_view ns_name);

// Enters `ns_fd` and returns to `home_fd` on the calling thread: proves at start-up that both
// ways work. Errors: ErrnoError(what + " (setns)"), or the way back's.
Status CheckNetworkNamespaceEntry(int ns_fd, int home_fd, std::string_view what);

// Runs fn() on a new thread and returns what it returned, once the thread has ended: for work
// that enters other namespaces, so that no thread of the caller's is left in one.
template <typename Fn>
auto OnOwnThread(Fn fn) -> decltype(fn()) {
  std::optional<decltype(fn())> result;
  std::thread thread([&] { result.emplace(fn()); });
  thread.join();
  return std::move(*result);
}

// fn() on a thread of its own that entered the network namespace `ns_fd` first (an error is
// ErrnoError(what)). fn returns a Status or a StatusOr.
template <typename Fn>
auto InNetworkNamespace(int ns_fd, std::string_view what, Fn fn) -> decltype(fn()) {
  using Result = decltype(fn());
  return OnOwnThread([&]() -> Result {
    RETURN_IF_ERROR(EnterNetworkNamespace(ns_fd, what));
    return fn();
  });
}

}  // namespace corral::isolation
