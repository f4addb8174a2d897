// DetectBackend(): which cgroup version this host gives us, decided once from the file system
// type of the cgroup mount root.
#include <linux/magic.h>
#include <sys/statfs.h>

#include <cerrno>
#include <cstdio>

#include "cgroups/cgroup_backend.h"

namespace corral::cgroups {

StatusOr<std::unique_ptr<CgroupBackend>> DetectBackend(const std::string& mount_root) {
  struct statfs fs;
  if (::statfs(mount_root.c_str(), &fs) != 0) return ErrnoError("statfs " + mount_root);
  // f_type is a signed word on some ABIs; compare as unsigned 32-bit magic numbers.
  const auto type = static_cast<unsigned long>(fs.f_type) & 0xffffffffUL;
  if (type == CGROUP2_SUPER_MAGIC) return MakeV2Backend(mount_root);
  // A tmpfs holding one mount per v1 controller: a v1 host, or a hybrid one (systemd's
  // "unified" cgroup2 mount then carries no controllers, so v1 is where the limits live).
  if (type == TMPFS_MAGIC) return MakeV1Backend(mount_root);
  char magic[32];
  std::snprintf(magic, sizeof(magic), "0x%lx", type);
  return Status::Error(mount_root +
                       " is neither a cgroup2 mount nor a tmpfs of cgroup v1 "
                       "hierarchies (file system magic " +
                       std::string(magic) + ")");
}

}  // namespace corral::cgroups
