#include "rootfs/disk_image.h"

#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "common/run_program.h"

namespace corral::rootfs {
namespace {

constexpr char kMkfs[] = "/sbin/mkfs.ext4";

Status RunMkfs(const std::string& path, uid_t uid, gid_t gid) {
  const std::string owner = "root_owner=" + std::to_string(uid) + ":" + std::to_string(gid);
  // -m 0: no blocks reserved for a root that is not there; -q: quiet; -F: a file, not a device.
  // What keeps an empty image at about 250 KiB of host disk (a default mkfs writes 69 MB into a
  // 10G one): no resize inode (its reserved GDT blocks; images are never resized), the journal
  // left unwritten (lazy_journal_init: the file is sparse, so its holes already read as the zeros
  // a fresh journal needs; it takes host space only as the journal is used), and no discard pass
  // over the file. MountLayer mounts it with noinit_itable for the same reason.
  Status made = RunProgram({kMkfs, "-q", "-F", "-m", "0", "-O", "^resize_inode", "-E",
                            owner + ",lazy_journal_init=1,nodiscard", path});
  if (!made.ok()) return Status::Error("making the layer image " + path + ": " + made.message(), EIO);
  return Status();
}

}  // namespace

StatusOr<uint64_t> DiskImageSize(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return ErrnoError("stat " + path);
  if (!S_ISREG(st.st_mode)) return Status::Error(path + " is not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

Status EnsureDiskImage(const std::string& path, uint64_t bytes, uid_t root_uid, gid_t root_gid) {
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) return Status::Error(path + " is not a regular file");
    if (static_cast<uint64_t>(st.st_size) != bytes) {
      return Status::Error("the workspace's disk image is " + std::to_string(st.st_size) +
                           " bytes, not " + std::to_string(bytes) + " (resizing is not supported)");
    }
    return Status();
  }
  if (errno != ENOENT) return ErrnoError("stat " + path);
  // The image is sparse, so any size "fits"; what it needs is room to grow. Refused up front when
  // the file system is nearly full, with a reason, rather than failing later inside mkfs, or in
  // the sandbox as I/O errors when its writes find no host blocks.
  const std::string dir = path.substr(0, path.rfind('/') + 1);
  struct statvfs fs;
  if (statvfs(dir.c_str(), &fs) != 0) return ErrnoError("statvfs " + dir);
  const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (free_bytes < kMinFreeForImage) {
    return Status::Error("the file system of " + dir + " has " + std::to_string(free_bytes >> 20) +
                             " MiB free; a new layer needs at least " + std::to_string(kMinFreeForImage >> 20),
                         ENOSPC);
  }
  // Built under a temporary name and renamed in: a crash never leaves a half-made image.
  const std::string temp = path + ".new";
  UniqueFd fd(open(temp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return ErrnoError("create " + temp);
  if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    unlink(temp.c_str());
    return ErrnoError("size " + temp);
  }
  fd.reset();
  Status made = RunMkfs(temp, root_uid, root_gid);
  if (!made.ok()) {
    unlink(temp.c_str());
    return made;
  }
  if (rename(temp.c_str(), path.c_str()) != 0) {
    unlink(temp.c_str());
    return ErrnoError("rename " + temp);
  }
  return Status();
}

StatusOr<LoopDevice> AttachLoopDevice(const std::string& image) {
  UniqueFd backing(open(image.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
  if (!backing) return ErrnoError("open " + image);
  UniqueFd control(open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (!control) return ErrnoError("open /dev/loop-control");
  for (int attempt = 0; attempt < 16; ++attempt) {
    int number = ioctl(control.get(), LOOP_CTL_GET_FREE);
    if (number < 0) return ErrnoError("LOOP_CTL_GET_FREE");
    LoopDevice device;
    device.path = "/dev/loop" + std::to_string(number);
    device.fd.reset(open(device.path.c_str(), O_RDWR | O_CLOEXEC));
    if (!device.fd) return ErrnoError("open " + device.path);
    struct loop_config config = {};
    config.fd = static_cast<__u32>(backing.get());
    config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
    if (ioctl(device.fd.get(), LOOP_CONFIGURE, &config) == 0) return device;
    // EBUSY: another process configured this device between GET_FREE and CONFIGURE.
    if (errno != EBUSY) return ErrnoError("LOOP_CONFIGURE " + device.path);
  }
  return Status::Error("no free loop device after 16 attempts");
}

}  // namespace corral::rootfs
