#include "isolation/idmap_userns.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "common/file_util.h"

namespace corral::isolation {
namespace {

// The holder: cloned from a possibly multi-threaded process into the new user namespace, it
// keeps nothing of its parent's (no fd: not the daemon's lock, not another holder's pipe) and
// waits, with raw syscalls, for the SIGKILL its parent sends once the namespace is opened (or for
// its parent thread's death).
[[noreturn]] void Hold() {
  syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  syscall(SYS_close_range, 0U, ~0U, 0U);
  for (;;) syscall(SYS_pause);
}

}  // namespace

StatusOr<UniqueFd> MakeIdmapUserns(uid_t uid_base, gid_t gid_base, uint32_t count) {
  int pidfd_raw = -1;
  struct clone_args args = {};
  args.flags = CLONE_NEWUSER | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd_raw);
  args.exit_signal = 0;  // no SIGCHLD: the daemon's other children are not disturbed
  long pid = syscall(SYS_clone3, &args, sizeof(args));
  if (pid < 0) return ErrnoError("clone3(CLONE_NEWUSER)");
  if (pid == 0) Hold();
  UniqueFd pidfd(pidfd_raw);
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
  syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
  siginfo_t info;
  while (waitid(P_PIDFD, static_cast<id_t>(pidfd.get()), &info, WEXITED | __WCLONE) != 0 && errno == EINTR) {
  }
  if (!mapped.ok()) return mapped;
  return userns;
}

}  // namespace corral::isolation
