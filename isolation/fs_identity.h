// ScopedFsIdentity: the calling thread acts on files as another user for a while. fsuid, fsgid
// and the supplementary groups are per-thread credentials in the kernel, so the daemon's worker
// threads can each touch a sandbox's files as its agent: the kernel checks access as that user
// and new files belong to it. Parent side only.
//
// glibc's setgroups() would change every thread of the process (it broadcasts set*id calls), so
// the raw syscall is used: only this thread's groups change. Moving fsuid away from 0 also drops
// CAP_DAC_OVERRIDE and the other file capabilities from the thread's effective set; moving it back
// restores them.
#pragma once

#include <sys/types.h>

#include <vector>

#include "common/status.h"

namespace corral::isolation {

class ScopedFsIdentity {
 public:
  // Switches the calling thread to fsuid `uid`, fsgid `gid` and no supplementary groups; check
  // status() before touching a file. Needs CAP_SETUID and CAP_SETGID.
  ScopedFsIdentity(uid_t uid, gid_t gid);
  // Restores the thread's previous ids and groups. A thread that cannot get its ids back aborts
  // the process: it would go on with the other user's file credentials.
  ~ScopedFsIdentity();
  ScopedFsIdentity(const ScopedFsIdentity&) = delete;
  ScopedFsIdentity& operator=(const ScopedFsIdentity&) = delete;

  // OK when the thread now has the ids; EPERM when the kernel did not give them.
  const Status& status() const { return status_; }

 private:
  Status status_;
  bool groups_changed_ = false;
  bool ids_changed_ = false;
  uid_t saved_uid_ = 0;
  gid_t saved_gid_ = 0;
  std::vector<gid_t> saved_groups_;
};

}  // namespace corral::isolation
