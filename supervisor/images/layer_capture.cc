#include "supervisor/images/layer_capture.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <fts.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <utility>

#include "common/file_util.h"
#include "common/unique_fd.h"
#include "supervisor/images/archive_handles.h"
#include "rootfs/disk_image.h"

namespace corral::supervisor {
namespace {

using Writer = ArchiveWriter;
using Entry = ArchiveEntryPtr;

bool HasXattr(const char* path, const char* name, const char* value) {
  char buf[8];
  const ssize_t n = lgetxattr(path, name, buf, sizeof(buf));
  return n >= 0 && (value == nullptr || (static_cast<size_t>(n) == strlen(value) && memcmp(buf, value, n) == 0));
}

bool IsOpaque(const char* path) {
  return HasXattr(path, "trusted.overlay.opaque", "y") || HasXattr(path, "user.overlay.opaque", "y");
}

// The walk's state: the archive, the id shift and the hard links seen.
class TarWriter {
 public:
  TarWriter(struct archive* archive, int64_t uid_base) : archive_(archive), uid_base_(uid_base) {}

  Status Add(FTSENT* node, const std::string& rel);
  const CaptureCounts& counts() const { return counts_; }

 private:
  Status Fail(const std::string& rel, const std::string& what) {
    return Status::Error("layer capture: " + rel + ": " + what, EIO);
  }
  Status Header(archive_entry* entry, const std::string& rel) {
    if (archive_write_header(archive_, entry) != ARCHIVE_OK) return Fail(rel, archive_error_string(archive_));
    ++counts_.entries;
    return Status();
  }
  Status EmptyFile(const std::string& rel, const struct stat& st);
  Status Content(const char* path, const std::string& rel);
  StatusOr<Entry> Base(const std::string& rel, const struct stat& st);

  struct archive* archive_;
  int64_t uid_base_;
  std::map<std::pair<dev_t, ino_t>, std::string> links_;
  CaptureCounts counts_;
};

StatusOr<Entry> TarWriter::Base(const std::string& rel, const struct stat& st) {
  const int64_t uid = static_cast<int64_t>(st.st_uid) - uid_base_;
  const int64_t gid = static_cast<int64_t>(st.st_gid) - uid_base_;
  if (uid < 0 || uid > 65535 || gid < 0 || gid > 65535) {
    return Fail(rel, "owner " + std::to_string(st.st_uid) + ":" + std::to_string(st.st_gid) +
                         " lies outside the sandbox's id range");
  }
  Entry entry(archive_entry_new());
  archive_entry_set_pathname(entry.get(), rel.c_str());
  archive_entry_set_uid(entry.get(), uid);
  archive_entry_set_gid(entry.get(), gid);
  archive_entry_set_perm(entry.get(), st.st_mode & 07777);
  archive_entry_set_mtime(entry.get(), st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  return entry;
}

Status TarWriter::EmptyFile(const std::string& rel, const struct stat& st) {
  // overlayfs makes whiteouts with its mounter's credentials (host root), not the sandbox's: the
  // marker is root's in the image, whoever deleted the file.
  struct stat owned = st;
  owned.st_uid = static_cast<uid_t>(uid_base_);
  owned.st_gid = static_cast<gid_t>(uid_base_);
  ASSIGN_OR_RETURN(Entry entry, Base(rel, owned));
  archive_entry_set_filetype(entry.get(), AE_IFREG);
  archive_entry_set_perm(entry.get(), 0600);
  archive_entry_set_size(entry.get(), 0);
  ++counts_.whiteouts;
  return Header(entry.get(), rel);
}

Status TarWriter::Content(const char* path, const std::string& rel) {
  UniqueFd fd(open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return Fail(rel, std::string("open: ") + strerror(errno));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Fail(rel, std::string("read: ") + strerror(errno));
    if (n == 0) return Status();
    if (archive_write_data(archive_, buf, n) != n) return Fail(rel, archive_error_string(archive_));
    counts_.bytes += static_cast<uint64_t>(n);
  }
}

std::string Parent(const std::string& rel) {
  const size_t slash = rel.rfind('/');
  return slash == std::string::npos ? "" : rel.substr(0, slash + 1);
}
std::string LeafName(const std::string& rel) {
  const size_t slash = rel.rfind('/');
  return slash == std::string::npos ? rel : rel.substr(slash + 1);
}

Status TarWriter::Add(FTSENT* node, const std::string& rel) {
  const struct stat& st = *node->fts_statp;
  const char* path = node->fts_accpath;
  if (HasXattr(path, "trusted.overlay.redirect", nullptr) || HasXattr(path, "trusted.overlay.metacopy", nullptr)) {
    return Fail(rel, "an overlayfs redirect or metacopy, which layers cannot hold");
  }
  if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
    return EmptyFile(Parent(rel) + ".wh." + LeafName(rel), st);
  }
  if (S_ISSOCK(st.st_mode)) return Status();
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return Fail(rel, "a device node");
  ASSIGN_OR_RETURN(Entry entry, Base(rel, st));
  if (S_ISDIR(st.st_mode)) {
    archive_entry_set_filetype(entry.get(), AE_IFDIR);
    RETURN_IF_ERROR(Header(entry.get(), rel));
    if (IsOpaque(path)) RETURN_IF_ERROR(EmptyFile(rel + "/.wh..wh..opq", st));
    return Status();
  }
  if (S_ISLNK(st.st_mode)) {
    std::string target(PATH_MAX, '\0');
    const ssize_t n = readlink(path, target.data(), target.size());
    if (n < 0) return Fail(rel, std::string("readlink: ") + strerror(errno));
    target.resize(n);
    archive_entry_set_filetype(entry.get(), AE_IFLNK);
    archive_entry_set_symlink(entry.get(), target.c_str());
    return Header(entry.get(), rel);
  }
  if (S_ISFIFO(st.st_mode)) {
    archive_entry_set_filetype(entry.get(), AE_IFIFO);
    return Header(entry.get(), rel);
  }
  if (!S_ISREG(st.st_mode)) return Fail(rel, "an unknown file type");
  archive_entry_set_filetype(entry.get(), AE_IFREG);
  if (st.st_nlink > 1) {
    auto [it, first] = links_.emplace(std::make_pair(st.st_dev, st.st_ino), rel);
    if (!first) {
      archive_entry_set_hardlink(entry.get(), it->second.c_str());
      archive_entry_set_size(entry.get(), 0);
      return Header(entry.get(), rel);
    }
  }
  archive_entry_set_size(entry.get(), st.st_size);
  RETURN_IF_ERROR(Header(entry.get(), rel));
  return Content(path, rel);
}

StatusOr<CaptureCounts> Walk(const std::string& upper, struct archive* archive, int64_t uid_base,
                             const std::set<std::string>& skip) {
  char* roots[] = {const_cast<char*>(upper.c_str()), nullptr};
  FtsWalk fts(fts_open(roots, FTS_PHYSICAL | FTS_XDEV, nullptr));
  if (!fts) return ErrnoError("fts_open " + upper);
  TarWriter writer(archive, uid_base);
  while (FTSENT* node = fts_read(fts.get())) {
    if (node->fts_info == FTS_DP || node->fts_level == 0) continue;
    if (node->fts_info == FTS_ERR || node->fts_info == FTS_DNR || node->fts_info == FTS_NS) {
      return Status::Error("layer capture: " + std::string(node->fts_path) + ": " + strerror(node->fts_errno), EIO);
    }
    const std::string rel = std::string(node->fts_path).substr(upper.size() + 1);
    if (node->fts_level == 1 && skip.count(rel) != 0) {
      fts_set(fts.get(), node, FTS_SKIP);
      continue;
    }
    RETURN_IF_ERROR(writer.Add(node, rel));
  }
  if (errno != 0) return ErrnoError("walk " + upper);
  return writer.counts();
}

}  // namespace

StatusOr<CaptureCounts> WriteLayerTar(const std::string& upper, const std::string& tar_path, int64_t uid_base,
                                      const std::set<std::string>& skip) {
  UniqueFd out(open(tar_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!out) return ErrnoError("create " + tar_path);
  Writer writer(archive_write_new());
  if (archive_write_set_format_pax_restricted(writer.get()) != ARCHIVE_OK ||
      archive_write_open_fd(writer.get(), out.get()) != ARCHIVE_OK) {
    unlink(tar_path.c_str());
    return Status::Error("layer capture: " + std::string(archive_error_string(writer.get())), EIO);
  }
  errno = 0;
  auto counts = Walk(upper, writer.get(), uid_base, skip);
  if (counts.ok() && (archive_write_close(writer.get()) != ARCHIVE_OK || fsync(out.get()) != 0)) {
    counts = Status::Error("layer capture: finish " + tar_path, EIO);
  }
  if (!counts.ok()) unlink(tar_path.c_str());
  return counts;
}

namespace {

StatusOr<CaptureCounts> CaptureInPrivateNamespace(const std::string& image, const std::string& mount_dir,
                                                  const std::string& tar_path, int64_t uid_base,
                                                  const std::set<std::string>& skip) {
  // CLONE_NEWNS implies CLONE_FS: this thread gets its own mount table and working directory.
  if (unshare(CLONE_NEWNS) != 0) return ErrnoError("unshare mount namespace");
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return ErrnoError("make mounts private");
  ASSIGN_OR_RETURN(rootfs::LoopDevice loop, rootfs::AttachLoopDevice(image));
  if (mount(loop.path.c_str(), mount_dir.c_str(), "ext4", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
            nullptr) != 0) {
    return ErrnoError("mount " + image);
  }
  loop.fd.reset();  // the mount holds the device now (autoclear)
  auto counts = WriteLayerTar(mount_dir + "/upper", tar_path, uid_base, skip);
  if (chdir("/") != 0) return ErrnoError("chdir /");
  if (umount2(mount_dir.c_str(), 0) != 0) return ErrnoError("unmount " + mount_dir);
  return counts;
}

}  // namespace

StatusOr<CaptureCounts> CaptureLayer(const WritableLayer& layer, const std::string& mount_dir,
                                     const std::string& tar_path, int64_t uid_base,
                                     const std::set<std::string>& skip) {
  StatusOr<CaptureCounts> result = Status::Error("layer capture did not run");
  if (layer.kind == LayerKind::kQuotaDir) {
    // A thread of its own: fts(3) descends with fchdir, and the working directory is the
    // process's unless the thread unshares it.
    std::thread worker([&] {
      if (unshare(CLONE_FS) != 0) {
        result = ErrnoError("unshare CLONE_FS");
        return;
      }
      result = WriteLayerTar(layer.path + "/upper", tar_path, uid_base, skip);
    });
    worker.join();
    return result;
  }
  RETURN_IF_ERROR(MakeDirs(mount_dir, 0700));
  // A thread of its own: it leaves the daemon's mount namespace and never comes back.
  std::thread worker([&] { result = CaptureInPrivateNamespace(layer.path, mount_dir, tar_path, uid_base, skip); });
  worker.join();
  return result;
}

}  // namespace corral::supervisor
