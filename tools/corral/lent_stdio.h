// `corral run` gives the command its own stdio (the caller's: corral-init and the command
// inherit them). The ones that are anonymous pipes are lent to the command's user for the run:
// fchown to its host uid and gid, so that the command can reopen them by path (/dev/stdout,
// /dev/fd/1, /proc/self/fd/1: `echo x >/dev/stderr`, `tee /dev/stderr`, nginx's
// `access_log /dev/stdout`), as a program in a container can. Their owner and mode come back
// when the run ends (unless corral run itself is killed with SIGKILL first).
//
// Who can open a lent pipe by path: opening goes through /proc/<pid>/fd/<n>, which needs ptrace
// access to a process that holds it, then the inode's permission (0600, owner only). That is
// the command's user in this sandbox (its host uids are the sandbox's alone: uid_slots.h) and
// host root, which could already. Other sandboxes see neither the processes nor the uid.
//
// What is not lent: a terminal and a regular file are objects of the caller's on the host (a
// /dev/pts/N any host user can reach by path; a file in the caller's tree). An owner inside the
// sandbox could chmod them for every host user, so they stay the caller's, and reopening them
// by path inside fails with EACCES (their fd works as ever). Sockets never reopen (ENXIO).
#pragma once

#include <sys/types.h>

#include <vector>

#include "common/unique_fd.h"

namespace corral::cli {

class LentStdio {
 public:
  LentStdio() = default;
  LentStdio(LentStdio&&) = default;
  LentStdio& operator=(LentStdio&&) = default;
  // Gives back what was lent.
  ~LentStdio();

  // Lends fds 0, 1 and 2 that are anonymous pipes (each pipe once) to `uid`/`gid`. Best effort:
  // a pipe that cannot be lent is left as it is.
  static LentStdio Lend(uid_t uid, gid_t gid);

  // How many pipes are lent.
  size_t size() const { return lent_.size(); }

 private:
  struct Lent {
    UniqueFd fd;  // a duplicate, so that the owner comes back whatever the process did to 0-2
    uid_t uid = 0;
    gid_t gid = 0;
    mode_t mode = 0;
  };
  std::vector<Lent> lent_;
};

}  // namespace corral::cli
