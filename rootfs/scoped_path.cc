#include "rootfs/scoped_path.h"

#include <linux/magic.h>
#include <linux/openat2.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace corral::rootfs {
namespace {

std::string ProcSelfFd(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

}  // namespace

UniqueFd OpenInRoot(int root, const std::string& path, uint64_t flags) {
  struct open_how how = {};
  how.flags = flags | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  for (int attempt = 0;; ++attempt) {
    long fd = syscall(SYS_openat2, root, path.c_str(), &how, sizeof(how));
    if (fd >= 0) return UniqueFd(static_cast<int>(fd));
    if (errno != EAGAIN || attempt == kScopedResolveRetries) return UniqueFd();
  }
}

const char* PseudoFsName(uint32_t magic) {
  switch (magic) {
    case PROC_SUPER_MAGIC: return "procfs";
    case SYSFS_MAGIC: return "sysfs";
    case DEVPTS_SUPER_MAGIC: return "devpts";
    case DEBUGFS_MAGIC: return "debugfs";
    case TRACEFS_MAGIC: return "tracefs";
    case CGROUP_SUPER_MAGIC: return "cgroupfs";
    case CGROUP2_SUPER_MAGIC: return "cgroup2";
    case SECURITYFS_MAGIC: return "securityfs";
    case SELINUX_MAGIC: return "selinuxfs";
    case SMACK_MAGIC: return "smackfs";
    case AAFS_MAGIC: return "apparmorfs";
    case BPF_FS_MAGIC: return "bpffs";
    case PSTOREFS_MAGIC: return "pstore";
    case EFIVARFS_MAGIC: return "efivarfs";
    case BINFMTFS_MAGIC: return "binfmt_misc";
    case NSFS_MAGIC: return "nsfs";
    case RDTGROUP_SUPER_MAGIC: return "resctrl";
    case 0x65735543: return "fusectl";   // FUSE_CTL_SUPER_MAGIC, not in <linux/magic.h>
    case 0x62656570: return "configfs";  // CONFIGFS_MAGIC, likewise
    default: return nullptr;
  }
}

StatusOr<const char*> PseudoFsOf(int fd) {
  struct statfs fs;
  if (fstatfs(fd, &fs) != 0) return ErrnoError("fstatfs");
  return PseudoFsName(static_cast<uint32_t>(fs.f_type));
}

UniqueFd ReopenNode(int node, int flags) { return UniqueFd(open(ProcSelfFd(node).c_str(), flags | O_CLOEXEC)); }

int ChmodNode(int node, mode_t mode) { return chmod(ProcSelfFd(node).c_str(), mode) == 0 ? 0 : errno; }

int StatxAt(int dir_fd, const char* name, int flags, struct statx* st) {
  constexpr unsigned kMask = STATX_BASIC_STATS | STATX_MNT_ID;
  return statx(dir_fd, name, flags | AT_NO_AUTOMOUNT, kMask, st) == 0 ? 0 : errno;
}

int StatxFd(int fd, struct statx* st) { return StatxAt(fd, "", AT_EMPTY_PATH, st); }

bool SameMount(const struct statx& a, const struct statx& b) {
  if ((a.stx_mask & STATX_MNT_ID) && (b.stx_mask & STATX_MNT_ID)) return a.stx_mnt_id == b.stx_mnt_id;
  return a.stx_dev_major == b.stx_dev_major && a.stx_dev_minor == b.stx_dev_minor;
}

std::vector<std::string> PathComponents(std::string_view path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (!part.empty() && part != ".") out.emplace_back(part);
    start = end + 1;
  }
  return out;
}

}  // namespace corral::rootfs
