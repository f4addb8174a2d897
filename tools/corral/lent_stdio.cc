#include "tools/corral/lent_stdio.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <utility>

namespace corral::cli {

LentStdio::~LentStdio() {
  for (Lent& lent : lent_) {
    // The sandbox's user owned it and may have changed its mode: both come back.
    (void)!fchown(lent.fd.get(), lent.uid, lent.gid);
    (void)!fchmod(lent.fd.get(), lent.mode & 07777);
  }
}

LentStdio LentStdio::Lend(uid_t uid, gid_t gid) {
  LentStdio result;
  std::vector<std::pair<dev_t, ino_t>> seen;
  for (int fd = 0; fd <= 2; ++fd) {
    struct stat st;
    struct statfs fs;
    if (fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) continue;
    // A named FIFO is a file on the host: only pipefs's anonymous inodes are lent.
    if (fstatfs(fd, &fs) != 0 || fs.f_type != PIPEFS_MAGIC) continue;
    bool again = false;
    for (const auto& identity : seen) again = again || identity == std::make_pair(st.st_dev, st.st_ino);
    if (again) continue;
    seen.emplace_back(st.st_dev, st.st_ino);
    Lent lent;
    lent.fd.reset(fcntl(fd, F_DUPFD_CLOEXEC, 3));
    if (!lent.fd) continue;
    lent.uid = st.st_uid;
    lent.gid = st.st_gid;
    lent.mode = st.st_mode;
    if (fchown(lent.fd.get(), uid, gid) != 0) continue;
    result.lent_.push_back(std::move(lent));
  }
  return result;
}

}  // namespace corral::cli
