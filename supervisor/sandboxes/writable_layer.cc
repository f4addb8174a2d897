#include "supervisor/sandboxes/writable_layer.h"

#include <fcntl.h>
#include <fts.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <set>
#include <utility>

#include "common/file_util.h"
#include "common/run_program.h"
#include "common/unique_fd.h"
#include "rootfs/disk_image.h"
#include "rootfs/project_quota.h"

namespace corral::supervisor {
namespace {

constexpr char kCp[] = "/bin/cp";
constexpr uint64_t kBytesPerInode = 16384;  // mkfs.ext4's default ratio, and the scratch tmpfs's

rootfs::ProjectLimits LimitsOf(uint64_t disk_bytes) {
  rootfs::ProjectLimits limits;
  limits.bytes = disk_bytes;
  limits.inodes = disk_bytes == 0 ? 0 : std::max<uint64_t>(disk_bytes / kBytesPerInode, 4096);
  return limits;
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

Status CopyImage(const std::string& from_image, const std::string& to_image) {
  const size_t slash = to_image.rfind('/');
  if (slash != std::string::npos) RETURN_IF_ERROR(MakeDirs(to_image.substr(0, slash), 0700));
  UniqueFd from(open(from_image.c_str(), O_RDONLY | O_CLOEXEC));
  if (!from) return ErrnoError("open " + from_image);
  struct stat st;
  if (fstat(from.get(), &st) != 0) return ErrnoError("stat " + from_image);
  const std::string partial = to_image + ".partial";
  UniqueFd to(open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!to) return ErrnoError("create " + partial);
  auto fail = [&](Status status) {
    unlink(partial.c_str());
    return status;
  };
  if (ioctl(to.get(), FICLONE, from.get()) != 0) {
    if (errno != EOPNOTSUPP && errno != EXDEV && errno != EINVAL && errno != ENOTTY) {
      return fail(ErrnoError("reflink " + from_image));
    }
    // No reflinks here: copy the data extents only, so the copy stays as sparse as the source.
    if (ftruncate(to.get(), st.st_size) != 0) return fail(ErrnoError("truncate " + partial));
    off_t offset = 0;
    while (offset < st.st_size) {
      off_t data = lseek(from.get(), offset, SEEK_DATA);
      if (data < 0) {
        if (errno == ENXIO) break;  // only a hole is left
        return fail(ErrnoError("seek " + from_image));
      }
      off_t hole = lseek(from.get(), data, SEEK_HOLE);
      if (hole < 0) return fail(ErrnoError("seek " + from_image));
      loff_t in = data, out = data;
      size_t left = static_cast<size_t>(hole - data);
      while (left > 0) {
        ssize_t n = copy_file_range(from.get(), &in, to.get(), &out, left, 0);
        if (n < 0) return fail(ErrnoError("copy " + from_image));
        if (n == 0) break;
        left -= static_cast<size_t>(n);
      }
      offset = hole;
    }
  }
  if (fsync(to.get()) != 0) return fail(ErrnoError("fsync " + partial));
  if (rename(partial.c_str(), to_image.c_str()) != 0) return fail(ErrnoError("rename " + partial));
  return Status();
}

// upper/ of `from` into the directory `to` (which exists), and an empty work/ beside it. cp -a
// keeps owners, modes, times, xattrs (the overlay's opaque markers among them), hard links
// within the tree and the whiteouts (character devices 0:0); --reflink=auto shares the data
// blocks where the file system can (XFS made with reflink, btrfs). `from/upper/.` into an
// existing `to/upper` also gives it the source's owner and mode.
Status CopyUpper(const std::string& from, const std::string& to) {
  const std::string upper = to + "/upper", work = to + "/work";
  if (mkdir(upper.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoError("mkdir " + upper);
  if (mkdir(work.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoError("mkdir " + work);
  Status copied = RunProgram({kCp, "-a", "--reflink=auto", "--no-target-directory", "--", from + "/upper/.", upper});
  if (!copied.ok()) return Status::Error("copying the layer " + from + ": " + copied.message(), copied.error_number());
  // What cp wrote is on disk before the copy counts as made (a snapshot outlives a crash).
  UniqueFd fd(open(to.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd || syncfs(fd.get()) != 0) return ErrnoError("sync " + to);
  return Status();
}

}  // namespace

uint32_t LayerProjectId(int64_t uid_base) { return static_cast<uint32_t>(uid_base / 65536); }

Status MakeLayer(const WritableLayer& layer, int64_t uid_base, uint64_t disk_bytes) {
  const size_t slash = layer.path.rfind('/');
  if (slash != std::string::npos) RETURN_IF_ERROR(MakeDirs(layer.path.substr(0, slash), 0700));
  const auto base = static_cast<uid_t>(uid_base);
  if (layer.kind == LayerKind::kImage) return rootfs::EnsureDiskImage(layer.path, disk_bytes, base, base);
  // The directory (root's, 0700: the sandbox reaches its files only through its overlay) gets the
  // project and the inherit flag before anything is made in it, so upper/ and work/ and all
  // below are charged to it.
  RETURN_IF_ERROR(rootfs::MakeProjectDir(layer.path, LayerProjectId(uid_base), LimitsOf(disk_bytes), 0, 0, 0700));
  const std::string upper = layer.path + "/upper", work = layer.path + "/work";
  if (mkdir(upper.c_str(), 0755) == 0) {
    if (lchown(upper.c_str(), base, base) != 0) return ErrnoError("chown " + upper);
  } else if (errno != EEXIST) {
    return ErrnoError("mkdir " + upper);
  }
  if (mkdir(work.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoError("mkdir " + work);
  return Status();
}

Status ResizeLayer(const WritableLayer& layer, int64_t uid_base, uint64_t disk_bytes) {
  if (layer.kind == LayerKind::kImage) return Status();
  return rootfs::SetProjectLimits(layer.path, LayerProjectId(uid_base), LimitsOf(disk_bytes));
}

Status CopyLayer(const WritableLayer& from, const WritableLayer& to) {
  if (from.kind != to.kind) return Status::Error("a layer is copied to one of its own kind", EINVAL);
  if (from.kind == LayerKind::kImage) return CopyImage(from.path, to.path);
  if (Exists(to.path)) return CopyUpper(from.path, to.path);
  // A plain destination (a snapshot) is made under a temporary name and renamed in.
  const size_t slash = to.path.rfind('/');
  if (slash != std::string::npos) RETURN_IF_ERROR(MakeDirs(to.path.substr(0, slash), 0700));
  const std::string partial = to.path + ".partial";
  (void)RemoveTree(partial);
  if (mkdir(partial.c_str(), 0700) != 0) return ErrnoError("mkdir " + partial);
  Status copied = CopyUpper(from.path, partial);
  if (copied.ok() && rename(partial.c_str(), to.path.c_str()) != 0) copied = ErrnoError("rename " + partial);
  if (!copied.ok()) (void)RemoveTree(partial);
  return copied;
}

Status RemoveLayer(const WritableLayer& layer) {
  if (layer.kind == LayerKind::kImage) {
    if (unlink(layer.path.c_str()) != 0 && errno != ENOENT) return ErrnoError("unlink " + layer.path);
    return Status();
  }
  return RemoveTree(layer.path);
}

StatusOr<uint64_t> LayerDiskBytes(const WritableLayer& layer) {
  struct stat st;
  if (layer.kind == LayerKind::kImage) {
    if (stat(layer.path.c_str(), &st) != 0) return ErrnoError("stat " + layer.path);
    return static_cast<uint64_t>(st.st_blocks) * 512;
  }
  std::string root = layer.path;
  char* paths[] = {root.data(), nullptr};
  FTS* fts = fts_open(paths, FTS_PHYSICAL | FTS_XDEV | FTS_NOCHDIR, nullptr);
  if (fts == nullptr) return ErrnoError("fts_open " + layer.path);
  uint64_t bytes = 0;
  std::set<std::pair<dev_t, ino_t>> linked;  // a hard-linked file's blocks count once
  while (FTSENT* entry = fts_read(fts)) {
    if (entry->fts_info == FTS_DP || entry->fts_statp == nullptr) continue;
    if (entry->fts_info == FTS_NS || entry->fts_info == FTS_ERR || entry->fts_info == FTS_DNR) continue;
    const struct stat& s = *entry->fts_statp;
    if (!S_ISDIR(s.st_mode) && s.st_nlink > 1 && !linked.insert({s.st_dev, s.st_ino}).second) continue;
    bytes += static_cast<uint64_t>(s.st_blocks) * 512;
  }
  const int error = errno;
  fts_close(fts);
  if (error != 0) return ErrnoError("walk " + layer.path, error);
  return bytes;
}

}  // namespace corral::supervisor
