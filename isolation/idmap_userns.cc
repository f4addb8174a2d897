#include "isolation/idmap_userns.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "common/file_util.h"

namespace corral::isolation {
namespace {

// The holder: cloned from a possibly multi-threaded process into the new user namespace, it
// only waits for its pipe to close, with raw syscalls, and exits. Its copy of the write end is
// closed first, or the pipe would never close.
[[noreturn]] void Hold(int wait_fd, int write_fd) {
  syscall(SYS_close, write_fd);
  char byte;
  while (syscall(SYS_read, wait_fd, &byte, 1) < 0 && errno == EINTR) {
  }
  syscall(SYS_exit_group, 0);
  __builtin_unreachable();
}

}  // namespace

StatusOr<UniqueFd> MakeIdmapUserns(uid_t uid_base, gid_t gid_base, uint32_t count) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return ErrnoError("pipe");
  UniqueFd wait_read(pipe_fds[0]), wait_write(pipe_fds[1]);
  int pidfd_raw = -1;
  struct clone_args args = {};
  args.flags = CLONE_NEWUSER | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd_raw);
  args.exit_signal = 0;  // no SIGCHLD: the daemon's other children are not disturbed
  long pid = syscall(SYS_clone3, &args, sizeof(args));
  if (pid < 0) return ErrnoError("clone3(CLONE_NEWUSER)");
  if (pid == 0) Hold(wait_read.get(), wait_write.get());
  UniqueFd pidfd(pidfd_raw);
  wait_read.reset();
  const std::string proc = "/proc/" + std::to_string(pid);
  Status mapped = WriteExistingFile(proc + "/uid_map", "0 " + std::to_string(uid_base) + " " + std::to_string(count));
  if (mapped.ok()) {
    mapped = WriteExistingFile(proc + "/gid_map", "0 " + std::to_string(gid_base) + " " + std::to_string(count));
  }
  UniqueFd userns;
  if (mapped.ok()) {
    userns.reset(open((proc + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC));
    if (!userns) mapped = ErrnoError("open " + proc + "/ns/user");
  }
  wait_write.reset();  // the holder exits
  siginfo_t info;
  while (waitid(P_PIDFD, static_cast<id_t>(pidfd.get()), &info, WEXITED | __WCLONE) != 0 && errno == EINTR) {
  }
  if (!mapped.ok()) return mapped;
  return userns;
}

}  // namespace corral::isolation
