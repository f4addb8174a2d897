#include "isolation/netns.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "common/log.h"

namespace corral::isolation {

Status EnterNetworkNamespace(int ns_fd, std::string_view what) {
  if (setns(ns_fd, CLONE_NEWNET) != 0) return ErrnoError(what);
  return Status();
}

StatusOr<UniqueFd> OpenThreadNetworkNamespace(std::string_view what) {
  UniqueFd fd(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoError(what);
  return fd;
}

StatusOr<UniqueFd> SocketInNetworkNamespace(int ns_fd, int home_fd, int domain, int type,
                                            std::string_view ns_name) {
  RETURN_IF_ERROR(EnterNetworkNamespace(ns_fd, "setns " + std::string(ns_name)));
  UniqueFd fd(socket(domain, type, 0));
  const int saved = errno;
  if (setns(home_fd, CLONE_NEWNET) != 0) {
    LogError("netns", "cannot return to the thread's own network namespace",
             {{"from", std::string(ns_name)}, {"errno", std::to_string(errno)}});
    std::abort();
  }
  if (!fd.valid()) return ErrnoError("socket", saved);
  return fd;
}

Status CheckNetworkNamespaceEntry(int ns_fd, int home_fd, std::string_view what) {
  RETURN_IF_ERROR(EnterNetworkNamespace(ns_fd, std::string(what) + " (setns)"));
  return EnterNetworkNamespace(home_fd, "setns back to the daemon's network namespace");
}

}  // namespace corral::isolation
