#include "tests/root/netns_child_util.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace corral::test {

std::unique_ptr<NetnsChild> NetnsChild::Start() {
  auto child = std::make_unique<NetnsChild>();
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return nullptr;
  child->pid = fork();
  if (child->pid == 0) {
    if (unshare(CLONE_NEWNET) != 0) _exit(1);
    (void)!write(ready[1], "r", 1);
    for (;;) pause();
  }
  close(ready[1]);
  char byte = 0;
  const bool ok = child->pid > 0 && read(ready[0], &byte, 1) == 1;
  close(ready[0]);
  if (!ok) return nullptr;
  child->file.reset(open(("/proc/" + std::to_string(child->pid) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
  child->pidfd.reset(static_cast<int>(syscall(SYS_pidfd_open, child->pid, 0)));
  return child;
}

std::string NetnsChild::In(const std::string& command) const {
  return "nsenter --net=/proc/" + std::to_string(pid) + "/ns/net " + command;
}

void NetnsChild::Kill() {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  pid = -1;
  file.reset();
  pidfd.reset();
}

}  // namespace corral::test
