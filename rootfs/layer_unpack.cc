#include "rootfs/layer_unpack.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <set>
#include <utility>
#include <vector>

#include "common/file_util.h"
#include "common/sha256.h"
#include "common/unique_fd.h"
#include "rootfs/archive_paths.h"
#include "rootfs/tar_stream.h"

namespace corral::rootfs {
namespace {

constexpr std::string_view kWhiteoutPrefix = ".wh.";
constexpr std::string_view kOpaqueMarker = ".wh..wh..opq";
constexpr std::string_view kAufsMetaPrefix = ".wh..wh.";

// One entry, as the writer needs it.
struct Entry {
  std::vector<std::string> path;  // normalized components, non-empty
  std::string name;               // path.back()
  mode_t type = 0;                // AE_IF* (0 for hard links)
  mode_t mode = 0;                // & 07777
  uid_t uid = 0;
  gid_t gid = 0;
  struct timespec mtime = {};
  int64_t size = 0;
  std::string link_target;  // symlink target
  std::vector<std::string> hardlink;  // normalized hard link target, empty if none
};

// Writes entries under the partial tree's root fd.
class Extractor {
 public:
  Extractor(int root, TarStream* stream, const UnpackLimits& limits)
      : root_(root), stream_(stream), limits_(limits) {}

  Status Write(const Entry& e);
  Status ApplyDirectoryTimes();
  uint64_t unpacked_bytes() const { return unpacked_bytes_; }

 private:
  StatusOr<int> Parent(const Entry& e);
  bool RemoveWhiteoutOnPath(const std::vector<std::string>& path);
  Status MakeRoom(int parent, const Entry& e, bool keep_dir, bool* kept_dir);
  Status WriteFile(int parent, const Entry& e);
  Status CopyData(int fd, const Entry& e);
  Status WriteDir(int parent, const Entry& e);
  Status WriteSymlink(int parent, const Entry& e);
  Status WriteHardlink(int parent, const Entry& e);
  Status WriteFifo(int parent, const Entry& e);
  Status WriteWhiteout(const Entry& e);
  Status SetOwnerModeTime(int parent, const Entry& e, bool set_mode);

  int root_;
  TarStream* stream_;
  UnpackLimits limits_;
  uint64_t unpacked_bytes_ = 0;
  std::string cached_parent_path_ = "\x01";  // no path is this
  UniqueFd cached_parent_;
  std::set<std::string> regular_files_;  // paths extracted as regular files, for hard links
  std::vector<std::pair<std::string, struct timespec>> dir_times_;
};

StatusOr<int> Extractor::Parent(const Entry& e) {
  std::string parent_path = JoinComponents(e.path, e.path.size() - 1);
  if (cached_parent_ && parent_path == cached_parent_path_) return cached_parent_.get();
  cached_parent_.reset();
  StatusOr<UniqueFd> fd = OpenDirBeneath(root_, e.path, e.path.size() - 1, /*create=*/true, 0755);
  // `.wh.d` then `d/x` in one layer: the whiteout gives way to the directory x needs.
  if (!fd.ok() && RemoveWhiteoutOnPath(e.path)) fd = OpenDirBeneath(root_, e.path, e.path.size() - 1, true, 0755);
  if (!fd.ok()) return fd.status();
  cached_parent_ = std::move(*fd);
  cached_parent_path_ = std::move(parent_path);
  return cached_parent_.get();
}

// Removes the first whiteout (char 0:0) among the parents of `path`; whether there was one.
bool Extractor::RemoveWhiteoutOnPath(const std::vector<std::string>& path) {
  UniqueFd current(::fcntl(root_, F_DUPFD_CLOEXEC, 0));
  for (size_t i = 0; current && i + 1 < path.size(); ++i) {
    struct stat st;
    if (::fstatat(current.get(), path[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return false;
    if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
      return ::unlinkat(current.get(), path[i].c_str(), 0) == 0;
    }
    if (!S_ISDIR(st.st_mode)) return false;
    current = OpenBeneath(current.get(), path[i], O_RDONLY | O_DIRECTORY);
  }
  return false;
}

// Removes what is at the entry's path, unless it is a directory and `keep_dir` (then
// `*kept_dir` is set).
Status Extractor::MakeRoom(int parent, const Entry& e, bool keep_dir, bool* kept_dir) {
  *kept_dir = false;
  struct stat st;
  if (::fstatat(parent, e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return Status();
    return ErrnoError("stat");
  }
  const std::string path = JoinComponents(e.path, e.path.size());
  regular_files_.erase(path);
  if (S_ISDIR(st.st_mode)) {
    if (keep_dir) {
      *kept_dir = true;
      return Status();
    }
    // The cached parent may be (inside) the tree going away: look it up again next time (the fd
    // itself stays open: `parent` may be it).
    cached_parent_path_ = "\x01";
    // Hard link targets under the removed tree are gone too.
    for (auto it = regular_files_.lower_bound(path + "/"); it != regular_files_.end() && it->starts_with(path + "/");) {
      it = regular_files_.erase(it);
    }
    return RemoveTreeUnder(parent, e.name);
  }
  if (::unlinkat(parent, e.name.c_str(), 0) != 0) return ErrnoError("unlink");
  return Status();
}

Status Extractor::Write(const Entry& e) {
  const std::string_view name = e.name;
  if (name.starts_with(kWhiteoutPrefix)) {
    if (name == kOpaqueMarker) {
      ASSIGN_OR_RETURN(int parent, Parent(e));
      if (::fsetxattr(parent, "trusted.overlay.opaque", "y", 1, 0) != 0) return ErrnoError("set opaque");
      return Status();
    }
    if (name.starts_with(kAufsMetaPrefix)) return Status();
    return WriteWhiteout(e);
  }
  ASSIGN_OR_RETURN(int parent, Parent(e));
  if (!e.hardlink.empty()) return WriteHardlink(parent, e);
  switch (e.type) {
    case AE_IFREG: return WriteFile(parent, e);
    case AE_IFDIR: return WriteDir(parent, e);
    case AE_IFLNK: return WriteSymlink(parent, e);
    case AE_IFIFO: return WriteFifo(parent, e);
    case AE_IFCHR:
    case AE_IFBLK: return Status::Error("device node");
    case AE_IFSOCK: return Status::Error("socket");
    default: return Status::Error("unknown entry type " + std::to_string(e.type));
  }
}

Status Extractor::WriteFile(int parent, const Entry& e) {
  if (e.size < 0) return Status::Error("negative size");
  if (unpacked_bytes_ + static_cast<uint64_t>(e.size) > limits_.max_bytes) {
    return Status::Error("unpacked size exceeds " + std::to_string(limits_.max_bytes) + " bytes", EFBIG);
  }
  bool kept = false;
  RETURN_IF_ERROR(MakeRoom(parent, e, false, &kept));
  UniqueFd fd(::openat(parent, e.name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return ErrnoError("create");
  RETURN_IF_ERROR(CopyData(fd.get(), e));
  unpacked_bytes_ += static_cast<uint64_t>(e.size);
  if (::fchown(fd.get(), e.uid, e.gid) != 0) return ErrnoError("chown");
  if (::fchmod(fd.get(), e.mode) != 0) return ErrnoError("chmod");
  struct timespec times[2] = {e.mtime, e.mtime};
  if (::futimens(fd.get(), times) != 0) return ErrnoError("set times");
  regular_files_.insert(JoinComponents(e.path, e.path.size()));
  return Status();
}

Status Extractor::CopyData(int fd, const Entry& e) {
  for (;;) {
    const void* buf = nullptr;
    size_t size = 0;
    int64_t offset = 0;
    bool done = false;
    RETURN_IF_ERROR(stream_->ReadBlock(&buf, &size, &offset, &done));
    if (done) break;
    if (offset < 0 || offset + static_cast<int64_t>(size) > e.size) return Status::Error("data beyond the entry's size");
    const char* p = static_cast<const char*>(buf);
    while (size > 0) {
      ssize_t n = ::pwrite(fd, p, size, offset);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoError("write");
      p += n;
      size -= static_cast<size_t>(n);
      offset += n;
    }
  }
  if (::ftruncate(fd, e.size) != 0) return ErrnoError("truncate");  // a sparse file's tail hole
  return Status();
}

Status Extractor::WriteDir(int parent, const Entry& e) {
  bool kept = false;
  RETURN_IF_ERROR(MakeRoom(parent, e, true, &kept));
  if (!kept && ::mkdirat(parent, e.name.c_str(), 0700) != 0) return ErrnoError("mkdir");
  UniqueFd dir = OpenBeneath(parent, e.name, O_RDONLY | O_DIRECTORY);
  if (!dir) return ErrnoError("open");
  if (::fchown(dir.get(), e.uid, e.gid) != 0) return ErrnoError("chown");
  if (::fchmod(dir.get(), e.mode) != 0) return ErrnoError("chmod");
  dir_times_.emplace_back(JoinComponents(e.path, e.path.size()), e.mtime);
  return Status();
}

Status Extractor::WriteSymlink(int parent, const Entry& e) {
  if (e.link_target.empty()) return Status::Error("empty symlink target");
  if (e.link_target.front() != '/' && !RelativeSymlinkStaysInside(e.path.size() - 1, e.link_target)) {
    return Status::Error("symlink target " + e.link_target + " leaves the layer");
  }
  bool kept = false;
  RETURN_IF_ERROR(MakeRoom(parent, e, false, &kept));
  if (::symlinkat(e.link_target.c_str(), parent, e.name.c_str()) != 0) return ErrnoError("symlink");
  return SetOwnerModeTime(parent, e, /*set_mode=*/false);
}

Status Extractor::WriteHardlink(int parent, const Entry& e) {
  const std::string target = JoinComponents(e.hardlink, e.hardlink.size());
  if (!regular_files_.contains(target)) {
    return Status::Error("hard link to " + target + ", which is not a regular file of this layer");
  }
  if (target == JoinComponents(e.path, e.path.size())) return Status();  // a link to itself
  ASSIGN_OR_RETURN(UniqueFd target_dir, OpenDirBeneath(root_, e.hardlink, e.hardlink.size() - 1, false));
  bool kept = false;
  RETURN_IF_ERROR(MakeRoom(parent, e, false, &kept));
  // flags 0: linkat never follows a symlink at the target.
  if (::linkat(target_dir.get(), e.hardlink.back().c_str(), parent, e.name.c_str(), 0) != 0) {
    return ErrnoError("link to " + target);
  }
  regular_files_.insert(JoinComponents(e.path, e.path.size()));
  return Status();
}

Status Extractor::WriteFifo(int parent, const Entry& e) {
  bool kept = false;
  RETURN_IF_ERROR(MakeRoom(parent, e, false, &kept));
  if (::mknodat(parent, e.name.c_str(), S_IFIFO | 0600, 0) != 0) return ErrnoError("mkfifo");
  return SetOwnerModeTime(parent, e, /*set_mode=*/true);
}

// `dir/.wh.NAME`: a character device 0:0 at `dir/NAME`, which overlayfs reads as "deleted".
Status Extractor::WriteWhiteout(const Entry& e) {
  Entry target = e;
  target.name = e.name.substr(kWhiteoutPrefix.size());
  if (target.name.empty() || target.name == "." || target.name == "..") {
    return Status::Error("whiteout of an empty or dot name");
  }
  target.path.back() = target.name;
  ASSIGN_OR_RETURN(int parent, Parent(target));
  struct stat st;
  // NAME already here (from this layer, or an earlier whiteout): a whiteout hides lower layers
  // only, and this layer's own NAME does that.
  if (::fstatat(parent, target.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return Status();
  if (::mknodat(parent, target.name.c_str(), S_IFCHR | 0000, makedev(0, 0)) != 0) return ErrnoError("whiteout");
  return Status();
}

Status Extractor::SetOwnerModeTime(int parent, const Entry& e, bool set_mode) {
  if (::fchownat(parent, e.name.c_str(), e.uid, e.gid, AT_SYMLINK_NOFOLLOW) != 0) return ErrnoError("chown");
  // Only for what this extractor just made, never a symlink: fchmodat follows one.
  if (set_mode && ::fchmodat(parent, e.name.c_str(), e.mode, 0) != 0) return ErrnoError("chmod");
  struct timespec times[2] = {e.mtime, e.mtime};
  if (::utimensat(parent, e.name.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0) return ErrnoError("set times");
  return Status();
}

Status Extractor::ApplyDirectoryTimes() {
  for (const auto& [path, mtime] : dir_times_) {
    ASSIGN_OR_RETURN(std::vector<std::string> components, NormalizeArchivePath(path));
    StatusOr<UniqueFd> dir = OpenDirBeneath(root_, components, components.size(), false);
    if (!dir.ok()) continue;  // replaced by a later entry: its time is that entry's
    struct timespec times[2] = {mtime, mtime};
    if (::futimens(dir->get(), times) != 0) return ErrnoError("set times of " + path);
  }
  return Status();
}

// The entry's fields, checked: path, ids, type.
StatusOr<Entry> ReadEntry(archive_entry* ae) {
  const char* path = archive_entry_pathname(ae);
  if (path == nullptr) path = archive_entry_pathname_utf8(ae);
  if (path == nullptr) return Status::Error("entry without a path");
  Entry e;
  ASSIGN_OR_RETURN(e.path, NormalizeArchivePath(path));
  if (e.path.empty()) return e;  // the root itself
  e.name = e.path.back();
  e.type = archive_entry_filetype(ae);
  e.mode = archive_entry_perm(ae) & 07777;
  int64_t uid = archive_entry_uid(ae);
  int64_t gid = archive_entry_gid(ae);
  if (uid < 0 || uid > kMaxLayerId || gid < 0 || gid > kMaxLayerId) {
    return Status::Error("owner " + std::to_string(uid) + ":" + std::to_string(gid) + " is outside 0-" +
                         std::to_string(kMaxLayerId));
  }
  e.uid = static_cast<uid_t>(uid);
  e.gid = static_cast<gid_t>(gid);
  e.mtime.tv_sec = archive_entry_mtime(ae);
  e.mtime.tv_nsec = archive_entry_mtime_is_set(ae) ? archive_entry_mtime_nsec(ae) : 0;
  e.size = archive_entry_size(ae);
  if (const char* hl = archive_entry_hardlink(ae); hl != nullptr) {
    StatusOr<std::vector<std::string>> target = NormalizeArchivePath(hl);
    if (!target.ok()) return Status::Error("hard link target " + std::string(hl) + ": " + target.status().message());
    if (target->empty()) return Status::Error("hard link to the layer's root");
    e.hardlink = std::move(*target);
  } else if (e.type == AE_IFLNK) {
    const char* target = archive_entry_symlink(ae);
    e.link_target = target != nullptr ? target : "";
  }
  return e;
}

std::string EntryLabel(archive_entry* ae) {
  const char* path = archive_entry_pathname(ae);
  return path != nullptr ? path : "(no path)";
}

Status CheckDigest(const char* what, const std::string& want, const std::string& got) {
  if (want.empty() || want == got) return Status();
  return Status::Error(what + std::string(" mismatch: expected ") + want + ", got " + got);
}

// Reads every entry of `stream` into the tree at `root`.
Status ExtractAll(int root, TarStream* stream, const UnpackLimits& limits, UnpackedLayer* out) {
  Extractor extractor(root, stream, limits);
  for (;;) {
    ASSIGN_OR_RETURN(archive_entry * ae, stream->Next());
    if (ae == nullptr) break;
    if (++out->entries > limits.max_entries) {
      return Status::Error("more than " + std::to_string(limits.max_entries) + " entries", EFBIG);
    }
    StatusOr<Entry> entry = ReadEntry(ae);
    if (!entry.ok()) return entry.status().WithContext("entry " + EntryLabel(ae));
    if (entry->path.empty()) continue;  // "./": the top-level directory stays as made
    RETURN_IF_ERROR(extractor.Write(*entry).WithContext("entry " + EntryLabel(ae)));
  }
  RETURN_IF_ERROR(extractor.ApplyDirectoryTimes());
  out->unpacked_bytes = extractor.unpacked_bytes();
  return Status();
}

Status UnpackInto(const std::string& blob_path, const std::string& partial, const LayerCheck& check,
                  const UnpackLimits& limits, UnpackedLayer* out) {
  // One open file for the digest and the unpacking: a file swapped in at blob_path between the
  // two cannot pass the check.
  UniqueFd blob(::open(blob_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!blob) return ErrnoError("open " + blob_path);
  ASSIGN_OR_RETURN(std::string blob_hex, Sha256Fd(blob.get(), blob_path));
  if (::lseek(blob.get(), 0, SEEK_SET) != 0) return ErrnoError("seek " + blob_path);
  out->blob_digest = "sha256:" + blob_hex;
  RETURN_IF_ERROR(CheckDigest("blob digest", check.blob_digest, out->blob_digest));
  if (::mkdir(partial.c_str(), 0700) != 0) return ErrnoError("mkdir " + partial);
  UniqueFd root(::open(partial.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root) return ErrnoError("open " + partial);
  ASSIGN_OR_RETURN(std::unique_ptr<TarStream> stream, TarStream::Open(std::move(blob), blob_path, limits.max_bytes));
  RETURN_IF_ERROR(ExtractAll(root.get(), stream.get(), limits, out));
  ASSIGN_OR_RETURN(std::string diff_hex, stream->Finish());
  out->diff_id = "sha256:" + diff_hex;
  RETURN_IF_ERROR(CheckDigest("diff_id", check.diff_id, out->diff_id));
  if (::fchmod(root.get(), 0755) != 0) return ErrnoError("chmod " + partial);
  if (::syncfs(root.get()) != 0) return ErrnoError("syncfs " + partial);
  return Status();
}

}  // namespace

StatusOr<UnpackedLayer> UnpackLayer(const std::string& blob_path, const std::string& dest,
                                    const LayerCheck& check, const UnpackLimits& limits) {
  const std::string label = "layer " + (check.blob_digest.empty() ? blob_path : check.blob_digest);
  struct stat st;
  if (::lstat(dest.c_str(), &st) == 0) return Status::Error(label + ": " + dest + " exists");
  if (errno != ENOENT) return ErrnoError(label + ": stat " + dest);
  const std::string partial = PartialPathFor(dest);
  UnpackedLayer out;
  Status status = UnpackInto(blob_path, partial, check, limits, &out);
  if (status.ok() && ::renameat2(AT_FDCWD, partial.c_str(), AT_FDCWD, dest.c_str(), RENAME_NOREPLACE) != 0) {
    status = ErrnoError("rename to " + dest);
  }
  if (!status.ok()) {
    Status removed = RemoveTree(partial);
    if (!removed.ok()) status = Status::Error(status.message() + " (and cleaning up: " + removed.ToString() + ")", status.error_number());
    return status.WithContext(label);
  }
  return out;
}

}  // namespace corral::rootfs
