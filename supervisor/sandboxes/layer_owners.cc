#include "supervisor/sandboxes/layer_owners.h"

#include <endian.h>
#include <fts.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "common/file_util.h"
#include "rootfs/disk_image.h"

namespace corral::supervisor {
namespace {

constexpr char kCapabilityXattr[] = "security.capability";
constexpr uint32_t kCapRevisionMask = 0xFF000000;
constexpr uint32_t kCapRevision3 = 0x03000000;
constexpr size_t kCapV3Size = 24;      // magic, 2 x (permitted, inheritable), rootid
constexpr size_t kCapRootIdOffset = 20;

constexpr uint32_t kAclVersion = 2;
constexpr uint16_t kAclUser = 0x02;
constexpr uint16_t kAclGroup = 0x08;
constexpr size_t kAclHeaderSize = 4;
constexpr size_t kAclEntrySize = 8;  // tag (16), perm (16), id (32), little endian

class IdShift {
 public:
  IdShift(int64_t from, int64_t to, int64_t count) : from_(from), to_(to), count_(count) {}
  uint32_t operator()(uint32_t id) const {
    const int64_t value = id;
    if (value < from_ || value >= from_ + count_) return id;
    return static_cast<uint32_t>(value - from_ + to_);
  }

 private:
  int64_t from_, to_, count_;
};

uint32_t Le32(const char* p) {
  uint32_t v;
  memcpy(&v, p, sizeof(v));
  return le32toh(v);
}
uint16_t Le16(const char* p) {
  uint16_t v;
  memcpy(&v, p, sizeof(v));
  return le16toh(v);
}
void PutLe32(char* p, uint32_t v) {
  v = htole32(v);
  memcpy(p, &v, sizeof(v));
}

// The value of an extended attribute into *value; false when the file has none (or the file
// system has no extended attributes).
StatusOr<bool> GetXattr(const char* path, const char* name, std::string* value) {
  value->assign(256, '\0');
  for (;;) {
    ssize_t n = lgetxattr(path, name, value->data(), value->size());
    if (n >= 0) {
      value->resize(static_cast<size_t>(n));
      return true;
    }
    if (errno == ENODATA || errno == ENOTSUP) return false;
    if (errno != ERANGE) return ErrnoError(std::string("getxattr ") + name + " " + path);
    ssize_t size = lgetxattr(path, name, nullptr, 0);
    if (size < 0) return ErrnoError(std::string("getxattr ") + name + " " + path);
    value->assign(static_cast<size_t>(size) + 1, '\0');
  }
}

Status SetXattr(const char* path, const char* name, const std::string& value) {
  if (lsetxattr(path, name, value.data(), value.size(), 0) != 0) {
    return ErrnoError(std::string("setxattr ") + name + " " + path);
  }
  return Status();
}

// Shifts the ids named by ACL_USER and ACL_GROUP entries; false when nothing changed.
bool ShiftAcl(std::string& acl, const IdShift& shift) {
  if (acl.size() < kAclHeaderSize || Le32(acl.data()) != kAclVersion) return false;
  bool changed = false;
  for (size_t at = kAclHeaderSize; at + kAclEntrySize <= acl.size(); at += kAclEntrySize) {
    const uint16_t tag = Le16(acl.data() + at);
    if (tag != kAclUser && tag != kAclGroup) continue;
    const uint32_t id = Le32(acl.data() + at + 4);
    const uint32_t moved = shift(id);
    if (moved != id) {
      PutLe32(acl.data() + at + 4, moved);
      changed = true;
    }
  }
  return changed;
}

// One entry, named by its path relative to fts's current directory.
StatusOr<bool> ShiftEntry(const char* path, const struct stat& st, const IdShift& shift) {
  const bool is_link = S_ISLNK(st.st_mode);
  bool changed = false;
  std::string caps;
  bool has_caps = false;
  if (!is_link) {
    ASSIGN_OR_RETURN(has_caps, GetXattr(path, kCapabilityXattr, &caps));
  }
  const uid_t uid = shift(st.st_uid);
  const gid_t gid = shift(st.st_gid);
  if (uid != st.st_uid || gid != st.st_gid) {
    if (lchown(path, uid, gid) != 0) return ErrnoError(std::string("chown ") + path);
    changed = true;
    // chown clears setuid and setgid, and the kernel drops the file's capabilities.
    if (!is_link && (st.st_mode & (S_ISUID | S_ISGID)) != 0 && chmod(path, st.st_mode & 07777) != 0) {
      return ErrnoError(std::string("chmod ") + path);
    }
  }
  if (has_caps) {
    std::string value = caps;
    if (value.size() == kCapV3Size && (Le32(value.data()) & kCapRevisionMask) == kCapRevision3) {
      const uint32_t root = Le32(value.data() + kCapRootIdOffset);
      PutLe32(value.data() + kCapRootIdOffset, shift(root));
    }
    if (value != caps || changed) {
      RETURN_IF_ERROR(SetXattr(path, kCapabilityXattr, value));
      changed = true;
    }
  }
  if (!is_link) {
    for (const char* name : {"system.posix_acl_access", "system.posix_acl_default"}) {
      if (!S_ISDIR(st.st_mode) && strcmp(name, "system.posix_acl_default") == 0) continue;
      std::string acl;
      ASSIGN_OR_RETURN(bool has_acl, GetXattr(path, name, &acl));
      if (has_acl && ShiftAcl(acl, shift)) {
        RETURN_IF_ERROR(SetXattr(path, name, acl));
        changed = true;
      }
    }
  }
  return changed;
}

StatusOr<ShiftCounts> ShiftInPrivateNamespace(const std::string& image, const std::string& mount_dir,
                                              int64_t from_base, int64_t to_base, int64_t count) {
  // CLONE_NEWNS implies CLONE_FS: this thread gets its own mount table and working directory.
  if (unshare(CLONE_NEWNS) != 0) return ErrnoError("unshare mount namespace");
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return ErrnoError("make mounts private");
  ASSIGN_OR_RETURN(rootfs::LoopDevice loop, rootfs::AttachLoopDevice(image));
  if (mount(loop.path.c_str(), mount_dir.c_str(), "ext4", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
    return ErrnoError("mount " + image);
  }
  loop.fd.reset();  // the mount holds the device now (autoclear)
  auto shifted = ShiftTreeOwners(mount_dir, from_base, to_base, count);
  // The file system is written back and let go before this returns: the image is about to be
  // mounted by its sandbox, and two mounts of one image would corrupt it.
  if (chdir("/") != 0) return ErrnoError("chdir /");
  if (umount2(mount_dir.c_str(), 0) != 0) return ErrnoError("unmount " + mount_dir);
  return shifted;
}

}  // namespace

StatusOr<ShiftCounts> ShiftTreeOwners(const std::string& dir, int64_t from_base, int64_t to_base, int64_t count) {
  const IdShift shift(from_base, to_base, count);
  std::string root = dir;
  char* paths[] = {root.data(), nullptr};
  FTS* fts = fts_open(paths, FTS_PHYSICAL | FTS_XDEV, nullptr);
  if (fts == nullptr) return ErrnoError("fts_open " + dir);
  ShiftCounts counts;
  Status failed;
  for (;;) {
    errno = 0;
    FTSENT* entry = fts_read(fts);
    if (entry == nullptr) {
      // The end of the walk (errno 0) or an error.
      if (errno != 0) failed = ErrnoError("walk " + dir);
      break;
    }
    switch (entry->fts_info) {
      case FTS_DP:  // a directory again, after its contents
        continue;
      case FTS_DNR:
      case FTS_ERR:
      case FTS_NS:
        failed = Status::Error(std::string(entry->fts_path) + ": " + strerror(entry->fts_errno),
                               entry->fts_errno);
        break;
      default: {
        ++counts.inodes;
        auto changed = ShiftEntry(entry->fts_accpath, *entry->fts_statp, shift);
        if (!changed.ok()) {
          failed = changed.status();
        } else if (*changed) {
          ++counts.shifted;
        }
      }
    }
    if (!failed.ok()) break;
  }
  if (fts_close(fts) != 0 && failed.ok()) failed = ErrnoError("fts_close " + dir);
  if (!failed.ok()) return failed;
  return counts;
}

StatusOr<ShiftCounts> ShiftLayerOwners(const WritableLayer& layer, const std::string& mount_dir, int64_t from_base,
                                       int64_t to_base, int64_t count) {
  StatusOr<ShiftCounts> result = Status::Error("layer shift did not run");
  if (layer.kind == LayerKind::kQuotaDir) {
    // A thread of its own, for the working directory fts(3) changes.
    std::thread worker([&] {
      if (unshare(CLONE_FS) != 0) {
        result = ErrnoError("unshare CLONE_FS");
        return;
      }
      result = ShiftTreeOwners(layer.path, from_base, to_base, count);
    });
    worker.join();
    return result;
  }
  RETURN_IF_ERROR(MakeDirs(mount_dir, 0700));
  // A thread of its own: it leaves the daemon's mount namespace and never comes back.
  std::thread worker([&] { result = ShiftInPrivateNamespace(layer.path, mount_dir, from_base, to_base, count); });
  worker.join();
  return result;
}

}  // namespace corral::supervisor
