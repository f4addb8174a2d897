// A child process in a network namespace of its own, until killed: a stand-in for a sandbox's
// init wherever a test needs a namespace to enter or to plumb (isolation_net_test,
// full_network_test).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "common/unique_fd.h"

namespace corral::test {

struct NetnsChild {
  pid_t pid = -1;
  UniqueFd file;   // /proc/<pid>/ns/net
  UniqueFd pidfd;

  // Forks the child and waits until its namespace exists; null if it could not.
  static std::unique_ptr<NetnsChild> Start();
  // `command` run in the child's network namespace (nsenter), for Shell().
  std::string In(const std::string& command) const;
  // SIGKILL and reap; the descriptors are closed. Idempotent.
  void Kill();
  ~NetnsChild() { Kill(); }
};

}  // namespace corral::test
