#include "rootfs/archive_extract.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "common/file_util.h"
#include "common/unique_fd.h"
#include "rootfs/archive_paths.h"
#include "rootfs/tar_stream.h"

namespace corral::rootfs {
namespace {

Status WriteRegular(TarStream* stream, int parent, const std::string& name, int64_t size) {
  struct stat st;
  if (::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISDIR(st.st_mode)) RETURN_IF_ERROR(RemoveTreeUnder(parent, name));
    else if (::unlinkat(parent, name.c_str(), 0) != 0) return ErrnoError("unlink");
  }
  UniqueFd fd(::openat(parent, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd) return ErrnoError("create");
  for (;;) {
    const void* buf = nullptr;
    size_t n = 0;
    int64_t offset = 0;
    bool done = false;
    RETURN_IF_ERROR(stream->ReadBlock(&buf, &n, &offset, &done));
    if (done) break;
    const char* p = static_cast<const char*>(buf);
    while (n > 0) {
      ssize_t w = ::pwrite(fd.get(), p, n, offset);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return ErrnoError("write");
      p += w;
      n -= static_cast<size_t>(w);
      offset += w;
    }
  }
  if (::ftruncate(fd.get(), size) != 0) return ErrnoError("truncate");
  return Status();
}

Status WriteEntry(TarStream* stream, int root, archive_entry* ae) {
  const char* raw = archive_entry_pathname(ae);
  if (raw == nullptr) return Status::Error("entry without a path");
  ASSIGN_OR_RETURN(std::vector<std::string> path, NormalizeArchivePath(raw));
  if (path.empty()) return Status();  // "./"
  const mode_t type = archive_entry_filetype(ae);
  if (archive_entry_hardlink(ae) != nullptr) return Status::Error("hard link (image archives hold files and directories)");
  if (type == AE_IFDIR) {
    ASSIGN_OR_RETURN(UniqueFd dir, OpenDirBeneath(root, path, path.size(), /*create=*/true, 0755));
    return Status();
  }
  if (type != AE_IFREG) {
    return Status::Error(type == AE_IFLNK ? "symlink (image archives hold files and directories)"
                                          : "special file (image archives hold files and directories)");
  }
  ASSIGN_OR_RETURN(UniqueFd parent, OpenDirBeneath(root, path, path.size() - 1, /*create=*/true, 0755));
  return WriteRegular(stream, parent.get(), path.back(), archive_entry_size(ae));
}

}  // namespace

Status ExtractArchiveTree(const std::string& tar_path, const std::string& dest_dir, uint64_t max_bytes,
                          uint64_t max_entries) {
  UniqueFd root(::open(dest_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root) return ErrnoError("open " + dest_dir);
  StatusOr<std::unique_ptr<TarStream>> stream = TarStream::Open(tar_path, max_bytes);
  if (!stream.ok()) return stream.status().WithContext(tar_path);
  uint64_t entries = 0;
  for (;;) {
    StatusOr<archive_entry*> ae = (*stream)->Next();
    if (!ae.ok()) return ae.status().WithContext(tar_path);
    if (*ae == nullptr) break;
    if (++entries > max_entries) return Status::Error(tar_path + ": more than " + std::to_string(max_entries) + " entries");
    const char* name = archive_entry_pathname(*ae);
    RETURN_IF_ERROR(WriteEntry(stream->get(), root.get(), *ae)
                        .WithContext(tar_path + ": entry " + (name != nullptr ? name : "(no path)")));
  }
  return (*stream)->Finish().status().WithContext(tar_path);
}

}  // namespace corral::rootfs
