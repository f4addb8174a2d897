#include "isolation/fs_identity.h"

#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>

#include "common/log.h"

namespace corral::isolation {
namespace {

uid_t CurrentFsuid() { return static_cast<uid_t>(setfsuid(static_cast<uid_t>(-1))); }
gid_t CurrentFsgid() { return static_cast<gid_t>(setfsgid(static_cast<gid_t>(-1))); }

}  // namespace

ScopedFsIdentity::ScopedFsIdentity(uid_t uid, gid_t gid) {
  long count = syscall(SYS_getgroups, 0, nullptr);
  if (count < 0) {
    status_ = ErrnoError("getgroups");
    return;
  }
  saved_groups_.resize(static_cast<size_t>(count));
  if (count > 0 && syscall(SYS_getgroups, count, saved_groups_.data()) != count) {
    status_ = ErrnoError("getgroups");
    return;
  }
  if (syscall(SYS_setgroups, 0, nullptr) != 0) {
    status_ = ErrnoError("setgroups for the agent");
    return;
  }
  groups_changed_ = true;
  saved_gid_ = static_cast<gid_t>(setfsgid(gid));
  saved_uid_ = static_cast<uid_t>(setfsuid(uid));
  ids_changed_ = true;
  // Neither call reports an error: read the ids back (an invalid id changes nothing and returns
  // the current one).
  if (CurrentFsuid() != uid || CurrentFsgid() != gid) {
    status_ = Status::Error("setfsuid/setfsgid to the agent's ids", EPERM);
  }
}

ScopedFsIdentity::~ScopedFsIdentity() {
  if (ids_changed_) {
    setfsuid(saved_uid_);
    setfsgid(saved_gid_);
  }
  if (groups_changed_) syscall(SYS_setgroups, saved_groups_.size(), saved_groups_.data());
  if (ids_changed_ && (CurrentFsuid() != saved_uid_ || CurrentFsgid() != saved_gid_)) {
    // This worker thread would go on with the agent's file credentials.
    LogError("files", "could not restore the thread's fsuid/fsgid");
    std::abort();
  }
}

}  // namespace corral::isolation
