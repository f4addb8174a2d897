#include "supervisor/sandboxes/sandbox_files.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <memory>
#include <optional>
#include <utility>

#include "common/unique_fd.h"
#include "isolation/fs_identity.h"
#include "rootfs/scoped_path.h"

namespace corral::supervisor {
namespace {

using isolation::ScopedFsIdentity;
using rootfs::ChmodNode;
using rootfs::kScopedResolveRetries;
using rootfs::OpenInRoot;
using rootfs::PathComponents;
using rootfs::PseudoFsOf;
using rootfs::ReopenNode;
using rootfs::SameMount;
using rootfs::StatxAt;
using rootfs::StatxFd;

constexpr int kMaxTreeDepth = 256;       // remove and tar: one fd per level is held
constexpr uint64_t kListEntryBytes = 64;  // what a listing entry costs besides its name
constexpr size_t kIoChunk = 64 * 1024;

// ---- Errors ----

// "read /a/b" or "read /a/b: detail", carrying `error`.
Status PathError(std::string_view op, std::string_view path, int error, std::string_view detail = {}) {
  std::string message = std::string(op) + " " + std::string(path);
  if (!detail.empty()) message += ": " + std::string(detail);
  return Status::Error(std::move(message), error);
}

std::string Printable(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 200)) {
    if (c >= 0x20 && c < 0x7f && c != '"') {
      out += c;
    } else {
      char hex[8];
      snprintf(hex, sizeof(hex), "\\x%02x", static_cast<unsigned char>(c));
      out += hex;
    }
  }
  if (text.size() > 200) out += "...";
  return out;
}

// ---- Resolving and opening ----

// EACCES when `fd` is on a kernel pseudo file system.
Status RefusePseudoFs(int fd, std::string_view op, std::string_view path) {
  StatusOr<const char*> name = PseudoFsOf(fd);
  if (!name.ok()) return PathError(op, path, name.status().error_number());
  if (*name != nullptr) return PathError(op, path, EACCES, std::string("on ") + *name + ", which the file API refuses");
  return Status();
}

Status NotRegular(mode_t mode, std::string_view op, std::string_view path) {
  if (S_ISDIR(mode)) return PathError(op, path, EISDIR, "a directory");
  if (S_ISCHR(mode) || S_ISBLK(mode)) return PathError(op, path, EACCES, "a device, which the file API refuses");
  if (S_ISLNK(mode)) return PathError(op, path, EINVAL, "a symlink");
  if (S_ISFIFO(mode)) return PathError(op, path, EINVAL, "a FIFO");
  if (S_ISSOCK(mode)) return PathError(op, path, EINVAL, "a socket");
  return PathError(op, path, EINVAL, "not a regular file");
}

// Opens the regular file that the O_PATH fd `node` refers to with `flags`. The node is checked
// first and reopened through /proc/self/fd (the same inode, with a fresh permission check as the
// agent), so a FIFO or device is never opened and nothing can be swapped in between.
StatusOr<UniqueFd> OpenRegular(int node, int flags, std::string_view op, std::string_view path) {
  RETURN_IF_ERROR(RefusePseudoFs(node, op, path));
  struct stat before;
  if (fstat(node, &before) != 0) return PathError(op, path, errno);
  if (!S_ISREG(before.st_mode)) return NotRegular(before.st_mode, op, path);
  UniqueFd file = ReopenNode(node, flags | O_NOCTTY | O_NONBLOCK);
  if (!file) return PathError(op, path, errno);
  struct stat after;
  if (fstat(file.get(), &after) != 0) return PathError(op, path, errno);
  if (after.st_ino != before.st_ino || after.st_dev != before.st_dev || !S_ISREG(after.st_mode)) {
    return PathError(op, path, EAGAIN, "changed while being opened");
  }
  return file;
}

// `at` resolved inside `root` and opened with `flags`, refused on a pseudo file system; errors
// name `op` and `path`.
StatusOr<UniqueFd> OpenChecked(int root, const std::string& at, uint64_t flags, std::string_view op,
                               std::string_view path) {
  UniqueFd fd = OpenInRoot(root, at, flags);
  if (!fd) return PathError(op, path, errno);
  RETURN_IF_ERROR(RefusePseudoFs(fd.get(), op, path));
  return fd;
}

// The entry's parent directory (O_PATH), refused on a pseudo file system.
StatusOr<UniqueFd> OpenParent(int root, const SandboxPathParts& parts, std::string_view op,
                              std::string_view path) {
  return OpenChecked(root, parts.parent, O_PATH | O_DIRECTORY, op, path);
}

// ---- Plain I/O ----

// Reads to EOF; EFBIG as soon as more than `limit` bytes came (st_size is not trusted: the file
// may grow while it is read).
int ReadAll(int fd, uint64_t limit, std::string* out) {
  out->clear();
  for (;;) {
    const uint64_t room = limit + 1 - out->size();
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kIoChunk, room));
    const size_t old = out->size();
    out->resize(old + want);
    ssize_t n = read(fd, out->data() + old, want);
    out->resize(old + static_cast<size_t>(std::max<ssize_t>(n, 0)));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return 0;
    if (out->size() > limit) return EFBIG;
  }
}

int WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

int ReadDirNames(int dir_fd, std::vector<std::string>* names) {
  int fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return errno;
  DIR* dir = fdopendir(fd);
  if (dir == nullptr) {
    int error = errno;
    close(fd);
    return error;
  }
  rewinddir(dir);  // the dup shares its offset with dir_fd
  int error = 0;
  for (;;) {
    errno = 0;
    struct dirent* entry = readdir(dir);
    if (entry == nullptr) {
      error = errno;
      break;
    }
    std::string_view name = entry->d_name;
    if (name != "." && name != "..") names->emplace_back(name);
  }
  closedir(dir);
  std::sort(names->begin(), names->end());
  return error;
}

FileInfo InfoFrom(std::string name, const struct statx& st) {
  FileInfo info;
  info.name = std::move(name);
  if (S_ISREG(st.stx_mode)) {
    info.type = "file";
  } else if (S_ISDIR(st.stx_mode)) {
    info.type = "dir";
  } else if (S_ISLNK(st.stx_mode)) {
    info.type = "symlink";
  } else {
    info.type = "other";
  }
  info.size = st.stx_size;
  info.mode = st.stx_mode & 07777;
  info.mtime = st.stx_mtime.tv_sec;
  return info;
}

// Walks `components` down from `anchor` (resolved with `anchor` as the root, so each step may
// follow symlinks but never leaves it), making each missing directory with exactly `mode`.
// Returns the last directory (O_PATH), refused on a pseudo file system.
StatusOr<UniqueFd> MakeDirsIn(int anchor, const std::vector<std::string>& components, mode_t mode,
                              std::string_view op, std::string_view path) {
  UniqueFd current = OpenInRoot(anchor, "/", O_PATH | O_DIRECTORY);
  if (!current) return PathError(op, path, errno);
  std::string prefix;
  for (const std::string& component : components) {
    prefix += "/" + component;
    UniqueFd next = OpenInRoot(anchor, prefix, O_PATH | O_DIRECTORY);
    if (!next && errno == ENOENT && component != "..") {
      RETURN_IF_ERROR(RefusePseudoFs(current.get(), op, path));
      const bool made = mkdirat(current.get(), component.c_str(), mode) == 0;
      if (!made && errno != EEXIST) return PathError(op, path, errno, "mkdir " + Printable(prefix));
      next = OpenInRoot(anchor, prefix, O_PATH | O_DIRECTORY);
      // mkdir applied the daemon's umask; set what was asked for.
      if (next && made) {
        if (int error = ChmodNode(next.get(), mode)) return PathError(op, path, error, "chmod " + Printable(prefix));
      }
    }
    if (!next) return PathError(op, path, errno, Printable(prefix));
    current = std::move(next);
  }
  RETURN_IF_ERROR(RefusePseudoFs(current.get(), op, path));
  return current;
}

// ---- Removing a tree ----

// Removes the directory `name` in `parent` and everything under it. `mount`: the tree's mount;
// nothing on another one is touched.
Status RemoveTreeAt(int parent, const std::string& name, const struct statx& mount, int depth,
                    const std::string& rel, std::string_view path) {
  constexpr std::string_view kOp = "remove";
  if (depth > kMaxTreeDepth) return PathError(kOp, path, ELOOP, Printable(rel) + ": deeper than the limit");
  UniqueFd dir(openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) {
    if (errno == ENOENT) return Status();  // gone meanwhile
    return PathError(kOp, path, errno, Printable(rel));
  }
  struct statx self;
  if (int error = StatxFd(dir.get(), &self)) return PathError(kOp, path, error, Printable(rel));
  if (!SameMount(self, mount)) return PathError(kOp, path, EBUSY, Printable(rel) + ": a mount point");
  std::vector<std::string> names;
  if (int error = ReadDirNames(dir.get(), &names)) return PathError(kOp, path, error, Printable(rel));
  for (const std::string& child : names) {
    const std::string child_rel = rel + "/" + child;
    struct statx st;
    if (int error = StatxAt(dir.get(), child.c_str(), AT_SYMLINK_NOFOLLOW, &st)) {
      if (error == ENOENT) continue;
      return PathError(kOp, path, error, Printable(child_rel));
    }
    if (!SameMount(st, mount)) return PathError(kOp, path, EBUSY, Printable(child_rel) + ": a mount point");
    if (S_ISDIR(st.stx_mode)) {
      RETURN_IF_ERROR(RemoveTreeAt(dir.get(), child, mount, depth + 1, child_rel, path));
    } else if (unlinkat(dir.get(), child.c_str(), 0) != 0 && errno != ENOENT) {
      return PathError(kOp, path, errno, Printable(child_rel));
    }
  }
  if (unlinkat(parent, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    return PathError(kOp, path, errno, Printable(rel));
  }
  return Status();
}

// ---- Tar ----

struct ArchiveReadFree {
  void operator()(archive* a) const { archive_read_free(a); }
};
struct ArchiveWriteFree {
  void operator()(archive* a) const { archive_write_free(a); }
};
struct ArchiveEntryFree {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};
using ArchiveReader = std::unique_ptr<archive, ArchiveReadFree>;
using ArchiveWriter = std::unique_ptr<archive, ArchiveWriteFree>;
using ArchiveEntry = std::unique_ptr<archive_entry, ArchiveEntryFree>;

std::string ArchiveError(archive* a) {
  const char* text = archive_error_string(a);
  return text != nullptr ? text : "archive error";
}

// The archive in memory, capped.
struct TarSink {
  std::string out;
  uint64_t limit = 0;
  bool over = false;
};

la_ssize_t WriteToSink(archive* a, void* data, const void* buffer, size_t length) {
  auto* sink = static_cast<TarSink*>(data);
  if (sink->out.size() + length > sink->limit) {
    sink->over = true;
    archive_set_error(a, EFBIG, "archive above the size cap");
    return -1;
  }
  sink->out.append(static_cast<const char*>(buffer), length);
  return static_cast<la_ssize_t>(length);
}

struct TarWalk {
  archive* writer;
  TarSink* sink;
  struct statx mount;  // the directory's: other mounts are skipped
  std::string_view path;
};

Status TarEntryError(const TarWalk& walk, const std::string& rel) {
  if (walk.sink->over) return PathError("tar", walk.path, EFBIG, "above the size cap");
  return PathError("tar", walk.path, EIO, Printable(rel) + ": " + ArchiveError(walk.writer));
}

Status AddTree(TarWalk& walk, int dir_fd, const std::string& prefix, int depth) {
  constexpr std::string_view kOp = "tar";
  if (depth > kMaxTreeDepth) return PathError(kOp, walk.path, ELOOP, Printable(prefix) + ": deeper than the limit");
  std::vector<std::string> names;
  if (int error = ReadDirNames(dir_fd, &names)) return PathError(kOp, walk.path, error, Printable(prefix));
  for (const std::string& name : names) {
    const std::string rel = prefix + name;
    struct statx st;
    if (int error = StatxAt(dir_fd, name.c_str(), AT_SYMLINK_NOFOLLOW, &st)) {
      if (error == ENOENT) continue;
      return PathError(kOp, walk.path, error, Printable(rel));
    }
    if (!SameMount(st, walk.mount)) continue;
    ArchiveEntry entry(archive_entry_new());
    if (!entry) return PathError(kOp, walk.path, ENOMEM);
    archive_entry_set_pathname(entry.get(), rel.c_str());
    archive_entry_set_perm(entry.get(), st.stx_mode & 07777);
    archive_entry_set_mtime(entry.get(), st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec);
    if (S_ISREG(st.stx_mode)) {
      UniqueFd node(openat(dir_fd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
      if (!node) return PathError(kOp, walk.path, errno, Printable(rel));
      ASSIGN_OR_RETURN(UniqueFd file, OpenRegular(node.get(), O_RDONLY, kOp, walk.path));
      const uint64_t used = walk.sink->out.size();
      const uint64_t room = walk.sink->limit > used ? walk.sink->limit - used : 0;
      std::string data;
      if (st.stx_size > room) return PathError(kOp, walk.path, EFBIG, "above the size cap");
      if (int error = ReadAll(file.get(), room, &data)) {
        return PathError(kOp, walk.path, error, error == EFBIG ? "above the size cap" : Printable(rel));
      }
      archive_entry_set_filetype(entry.get(), AE_IFREG);
      archive_entry_set_size(entry.get(), static_cast<la_int64_t>(data.size()));
      if (archive_write_header(walk.writer, entry.get()) < ARCHIVE_WARN) return TarEntryError(walk, rel);
      if (!data.empty() &&
          archive_write_data(walk.writer, data.data(), data.size()) != static_cast<la_ssize_t>(data.size())) {
        return TarEntryError(walk, rel);
      }
    } else if (S_ISDIR(st.stx_mode)) {
      UniqueFd sub(openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub) return PathError(kOp, walk.path, errno, Printable(rel));
      struct statx sub_st;
      if (int error = StatxFd(sub.get(), &sub_st)) return PathError(kOp, walk.path, error, Printable(rel));
      if (!SameMount(sub_st, walk.mount)) continue;
      archive_entry_set_filetype(entry.get(), AE_IFDIR);
      if (archive_write_header(walk.writer, entry.get()) < ARCHIVE_WARN) return TarEntryError(walk, rel);
      RETURN_IF_ERROR(AddTree(walk, sub.get(), rel + "/", depth + 1));
    } else if (S_ISLNK(st.stx_mode)) {
      char target[PATH_MAX];
      ssize_t n = readlinkat(dir_fd, name.c_str(), target, sizeof(target) - 1);
      if (n < 0) return PathError(kOp, walk.path, errno, Printable(rel));
      target[n] = '\0';
      archive_entry_set_filetype(entry.get(), AE_IFLNK);
      archive_entry_set_symlink(entry.get(), target);
      if (archive_write_header(walk.writer, entry.get()) < ARCHIVE_WARN) return TarEntryError(walk, rel);
    }
    // FIFOs, sockets and devices are left out.
  }
  return Status();
}

StatusOr<ArchiveReader> OpenTarReader(std::string_view tar, std::string_view path) {
  ArchiveReader reader(archive_read_new());
  if (!reader) return PathError("extract into", path, ENOMEM);
  archive_read_support_format_tar(reader.get());
  if (archive_read_open_memory(reader.get(), tar.data(), tar.size()) != ARCHIVE_OK) {
    return PathError("extract into", path, EINVAL, "not a tar archive: " + ArchiveError(reader.get()));
  }
  return reader;
}

// One entry, checked: where it goes and what it is.
struct TarItem {
  std::vector<std::string> components;  // empty: the destination itself
  mode_t type = 0;                      // AE_IFREG, AE_IFDIR or AE_IFLNK
  mode_t mode = 0;                      // & 0777
  uint64_t size = 0;
  std::string target;                   // a symlink's
};

// The next entry: nullopt at the end.
StatusOr<std::optional<TarItem>> NextTarItem(archive* reader, std::string_view path) {
  constexpr std::string_view kOp = "extract into";
  archive_entry* entry = nullptr;
  const int r = archive_read_next_header(reader, &entry);
  if (r == ARCHIVE_EOF) return std::optional<TarItem>();
  if (r < ARCHIVE_WARN) return PathError(kOp, path, EINVAL, "bad tar archive: " + ArchiveError(reader));
  const char* name = archive_entry_pathname(entry);
  const std::string shown = "entry \"" + Printable(name != nullptr ? name : "") + "\"";
  auto components = TarEntryComponents(name != nullptr ? name : "");
  if (!components.ok()) return PathError(kOp, path, EINVAL, shown + ": " + components.status().message());
  TarItem item;
  item.components = std::move(*components);
  if (archive_entry_hardlink(entry) != nullptr) return PathError(kOp, path, EINVAL, shown + ": a hard link");
  item.type = archive_entry_filetype(entry);
  if (item.type != AE_IFREG && item.type != AE_IFDIR && item.type != AE_IFLNK) {
    return PathError(kOp, path, EINVAL, shown + ": not a file, directory or symlink");
  }
  if (item.type != AE_IFDIR && item.components.empty()) {
    return PathError(kOp, path, EINVAL, shown + ": the destination itself");
  }
  item.mode = archive_entry_perm(entry) & 0777;
  if (item.type == AE_IFREG) {
    const la_int64_t size = archive_entry_size(entry);
    item.size = size > 0 ? static_cast<uint64_t>(size) : 0;
  }
  if (item.type == AE_IFLNK) {
    const char* target = archive_entry_symlink(entry);
    item.target = target != nullptr ? target : "";
    if (item.target.empty() || item.target.size() >= PATH_MAX) {
      return PathError(kOp, path, EINVAL, shown + ": a bad symlink target");
    }
  }
  return std::optional<TarItem>(std::move(item));
}

// Makes room for a new file or symlink `name` in `parent`: what is there goes, unless it is a
// directory.
Status ClearEntry(int parent, const std::string& name, std::string_view path, const std::string& shown) {
  struct stat st;
  if (fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? Status() : PathError("extract into", path, errno, shown);
  }
  if (S_ISDIR(st.st_mode)) return PathError("extract into", path, EEXIST, shown + ": a directory is there");
  if (unlinkat(parent, name.c_str(), 0) != 0 && errno != ENOENT) {
    return PathError("extract into", path, errno, shown);
  }
  return Status();
}

Status ExtractFile(archive* reader, int parent, const std::string& name, const TarItem& item,
                   std::string_view path, const std::string& shown) {
  constexpr std::string_view kOp = "extract into";
  UniqueFd file;
  for (int attempt = 0; !file && attempt < kScopedResolveRetries; ++attempt) {
    RETURN_IF_ERROR(ClearEntry(parent, name, path, shown));
    file.reset(openat(parent, name.c_str(),
                      O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0600));
    if (!file && errno != EEXIST) return PathError(kOp, path, errno, shown);
  }
  if (!file) return PathError(kOp, path, EEXIST, shown);
  uint64_t written = 0;
  char buffer[kIoChunk];
  for (;;) {
    la_ssize_t n = archive_read_data(reader, buffer, sizeof(buffer));
    if (n < 0) return PathError(kOp, path, EINVAL, shown + ": " + ArchiveError(reader));
    if (n == 0) break;
    written += static_cast<uint64_t>(n);
    if (written > item.size) return PathError(kOp, path, EFBIG, shown + ": more data than its header says");
    if (int error = WriteAll(file.get(), std::string_view(buffer, static_cast<size_t>(n)))) {
      return PathError(kOp, path, error, shown);
    }
  }
  if (fchmod(file.get(), item.mode) != 0) return PathError(kOp, path, errno, shown);
  return Status();
}

Status ExtractSymlink(int parent, const std::string& name, const TarItem& item, std::string_view path,
                      const std::string& shown) {
  for (int attempt = 0; attempt < kScopedResolveRetries; ++attempt) {
    RETURN_IF_ERROR(ClearEntry(parent, name, path, shown));
    if (symlinkat(item.target.c_str(), parent, name.c_str()) == 0) return Status();
    if (errno != EEXIST) return PathError("extract into", path, errno, shown);
  }
  return PathError("extract into", path, EEXIST, shown);
}

// Directories are made 0700 and given their mode at the end, so that a read-only directory in
// the archive can still be filled.
Status ExtractDir(int parent, const std::string& name, std::string_view path, const std::string& shown) {
  if (mkdirat(parent, name.c_str(), 0700) == 0) return Status();
  if (errno != EEXIST) return PathError("extract into", path, errno, shown);
  struct stat st;
  if (fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return PathError("extract into", path, errno, shown);
  if (!S_ISDIR(st.st_mode)) return PathError("extract into", path, EEXIST, shown + ": not a directory");
  return Status();
}

// The last component as given ("/a/b/" -> "b", "/a/.." -> ".."), "/" for the root.
std::string DisplayName(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  std::string_view name = path.substr(path.rfind('/') + 1);
  return name.empty() ? "/" : std::string(name);
}

// "/a/b" from {"a", "b"}; "/" from none.
std::string PathOf(const std::vector<std::string>& components) {
  std::string out;
  for (const std::string& c : components) out += "/" + c;
  return out.empty() ? "/" : out;
}

}  // namespace

// ---- Pure helpers ----

Status ValidateSandboxPath(std::string_view path) {
  const std::string shown = "bad path \"" + Printable(path) + "\"";
  if (path.empty()) return Status::Error("bad path: empty", EINVAL);
  if (path.find('\0') != std::string_view::npos) return Status::Error(shown + ": contains NUL", EINVAL);
  if (path[0] != '/') return Status::Error(shown + ": not absolute", EINVAL);
  if (path.size() >= PATH_MAX) return Status::Error(shown + ": longer than PATH_MAX", EINVAL);
  for (const std::string& component : PathComponents(path)) {
    if (component.size() > NAME_MAX) return Status::Error(shown + ": a component longer than NAME_MAX", EINVAL);
  }
  return Status();
}

StatusOr<SandboxPathParts> SplitSandboxPath(std::string_view path) {
  RETURN_IF_ERROR(ValidateSandboxPath(path));
  std::string_view trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.remove_suffix(1);
  const size_t slash = trimmed.rfind('/');
  SandboxPathParts parts;
  parts.name = std::string(trimmed.substr(slash + 1));
  parts.parent = slash == 0 ? "/" : std::string(trimmed.substr(0, slash));
  if (parts.name.empty() || parts.name == "." || parts.name == "..") {
    return Status::Error("bad path \"" + Printable(path) + "\": names no entry", EINVAL);
  }
  return parts;
}

StatusOr<std::vector<std::string>> TarEntryComponents(std::string_view name) {
  if (name.empty()) return Status::Error("an empty name", EINVAL);
  if (name.find('\0') != std::string_view::npos) return Status::Error("a NUL in the name", EINVAL);
  if (name[0] == '/') return Status::Error("an absolute name", EINVAL);
  if (name.size() >= PATH_MAX) return Status::Error("a name longer than PATH_MAX", EINVAL);
  std::vector<std::string> components = PathComponents(name);
  for (const std::string& component : components) {
    if (component == "..") return Status::Error("a \"..\" component", EINVAL);
    if (component.size() > NAME_MAX) return Status::Error("a component longer than NAME_MAX", EINVAL);
  }
  return components;
}

Status ValidateCreateMode(uint32_t mode) {
  if ((mode & ~static_cast<uint32_t>(07777)) != 0) return Status::Error("bad mode: not permission bits", EINVAL);
  if ((mode & (S_ISUID | S_ISGID)) != 0) return Status::Error("bad mode: setuid and setgid are refused", EINVAL);
  return Status();
}

// ---- SandboxFiles ----

SandboxFiles::SandboxFiles(int root_fd, uid_t uid, gid_t gid, uint64_t max_file_bytes)
    : root_fd_(root_fd), uid_(uid), gid_(gid), max_file_bytes_(max_file_bytes) {}

StatusOr<std::string> SandboxFiles::Read(const std::string& path) const {
  constexpr std::string_view kOp = "read";
  RETURN_IF_ERROR(ValidateSandboxPath(path));
  ScopedFsIdentity as_agent(uid_, gid_);
  RETURN_IF_ERROR(as_agent.status());
  UniqueFd node = OpenInRoot(root_fd_, path, O_PATH);
  if (!node) return PathError(kOp, path, errno);
  ASSIGN_OR_RETURN(UniqueFd file, OpenRegular(node.get(), O_RDONLY, kOp, path));
  struct stat st;
  if (fstat(file.get(), &st) != 0) return PathError(kOp, path, errno);
  if (static_cast<uint64_t>(st.st_size) > max_file_bytes_) return PathError(kOp, path, EFBIG, "above the size cap");
  std::string data;
  if (int error = ReadAll(file.get(), max_file_bytes_, &data)) {
    return PathError(kOp, path, error, error == EFBIG ? "above the size cap" : "");
  }
  return data;
}

StatusOr<uint64_t> SandboxFiles::Write(const std::string& path, std::string_view data, uint32_t mode,
                                       bool append) const {
  constexpr std::string_view kOp = "write";
  ASSIGN_OR_RETURN(SandboxPathParts parts, SplitSandboxPath(path));
  RETURN_IF_ERROR(ValidateCreateMode(mode).WithContext(std::string(kOp) + " " + path));
  if (data.size() > max_file_bytes_) return PathError(kOp, path, EFBIG, "above the size cap");
  ScopedFsIdentity as_agent(uid_, gid_);
  RETURN_IF_ERROR(as_agent.status());
  ASSIGN_OR_RETURN(UniqueFd parent, OpenParent(root_fd_, parts, kOp, path));
  UniqueFd file;
  for (int attempt = 0; !file && attempt < kScopedResolveRetries; ++attempt) {
    UniqueFd node(openat(parent.get(), parts.name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (node) {
      ASSIGN_OR_RETURN(file, OpenRegular(node.get(), O_WRONLY | (append ? O_APPEND : O_TRUNC), kOp, path));
      break;
    }
    if (errno != ENOENT) return PathError(kOp, path, errno);
    // O_EXCL: never opens what appeared meanwhile (a FIFO, a symlink); then look again.
    file.reset(openat(parent.get(), parts.name.c_str(),
                      O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, mode));
    if (file) {
      // O_CREAT applied the daemon's umask; set what was asked for.
      if (fchmod(file.get(), mode) != 0) return PathError(kOp, path, errno);
    } else if (errno != EEXIST) {
      return PathError(kOp, path, errno);
    }
  }
  if (!file) return PathError(kOp, path, EAGAIN, "kept changing");
  if (int error = WriteAll(file.get(), data)) return PathError(kOp, path, error);
  struct stat st;
  if (fstat(file.get(), &st) != 0) return PathError(kOp, path, errno);
  return static_cast<uint64_t>(st.st_size);
}

StatusOr<FileInfo> SandboxFiles::Stat(const std::string& path) const {
  constexpr std::string_view kOp = "stat";
  RETURN_IF_ERROR(ValidateSandboxPath(path));
  ScopedFsIdentity as_agent(uid_, gid_);
  RETURN_IF_ERROR(as_agent.status());
  // O_PATH | O_NOFOLLOW on a final symlink gives the link itself: lstat.
  ASSIGN_OR_RETURN(UniqueFd node, OpenChecked(root_fd_, path, O_PATH | O_NOFOLLOW, kOp, path));
  struct statx st;
  if (int error = StatxFd(node.get(), &st)) return PathError(kOp, path, error);
  return InfoFrom(DisplayName(path), st);
}

StatusOr<std::vector<FileInfo>> SandboxFiles::List(const std::string& path) const {
  constexpr std::string_view kOp = "list";
  RETURN_IF_ERROR(ValidateSandboxPath(path));
  ScopedFsIdentity as_agent(uid_, gid_);
  RETURN_IF_ERROR(as_agent.status());
  ASSIGN_OR_RETURN(UniqueFd dir, OpenChecked(root_fd_, path, O_RDONLY | O_DIRECTORY, kOp, path));
  std::vector<std::string> names;
  if (int error = ReadDirNames(dir.get(), &names)) return PathError(kOp, path, error);
  std::vector<FileInfo> entries;
  uint64_t bytes = 0;
  for (std::string& name : names) {
    bytes += kListEntryBytes + name.size();
    if (bytes > max_file_bytes_) return PathError(kOp, path, EFBIG, "too many entries");
    struct statx st;
    if (int error = StatxAt(dir.get(), name.c_str(), AT_SYMLINK_NOFOLLOW, &st)) {
      if (error == ENOENT) continue;  // removed meanwhile
      return PathError(kOp, path, error, Printable(name));
    }
    entries.push_back(InfoFrom(std::move(name), st));
  }
  return entries;
}

Status SandboxFiles::Mkdir(const std::string& path, uint32_t mode, bool parents) const {
  constexpr std::string_view kOp = "mkdir";
  ASSIGN_OR_RETURN(SandboxPathParts parts, SplitSandboxPath(path));
  RETURN_IF_ERROR(ValidateCreateMode(mode).WithContext(std::string(kOp) + " " + path));
  ScopedFsIdentity as_agent(uid_, gid_);
  RETURN_IF_ERROR(as_agent.status());
  UniqueFd parent;
  if (parents) {
    ASSIGN_OR_RETURN(parent, MakeDirsIn(root_fd_, PathComponents(parts.parent), mode | 0300, kOp, path));
  } else {
    ASSIGN_OR_RETURN(parent, OpenParent(root_fd_, parts, kOp, path));
  }
  if (mkdirat(parent.get(), parts.name.c_str(), mode) != 0) {
    if (errno != EEXIST || !parents) return PathError(kOp, path, errno);
    // mkdir -p: an existing directory (or a symlink to one, inside the root) is fine.
    UniqueFd existing = OpenInRoot(root_fd_, path, O_PATH | O_DIRECTORY);
    if (!existing) return PathError(kOp, path, errno == ENOTDIR ? EEXIST : errno);
    return RefusePseudoFs(existing.get(), kOp, path);
  }
  UniqueFd made(openat(parent.get(), parts.name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!made) return PathError(kOp, path, errno);
  // mkdir applied the daemon's umask; set what was asked for.
  if (int error = ChmodNode(made.get(), mode)) return PathError(kOp, path, error);
  return Status();
}

Status SandboxFiles::Remove(const std::string& path, bool recursive) const {
  constexpr std::string_view kOp = "remove";
  ASSIGN_OR_RETURN(SandboxPathParts parts, SplitSandboxPath(path));
  ScopedFsIdentity as_agent(uid_, gid_);
  RETURN_IF_ERROR(as_agent.status());
  ASSIGN_OR_RETURN(UniqueFd parent, OpenParent(root_fd_, parts, kOp, path));
  struct statx parent_st, st;
  if (int error = StatxFd(parent.get(), &parent_st)) return PathError(kOp, path, error);
  if (int error = StatxAt(parent.get(), parts.name.c_str(), AT_SYMLINK_NOFOLLOW, &st)) {
    return PathError(kOp, path, error);
  }
  // From the host's mount namespace rmdir/unlink would succeed on the sandbox's mount points
  // (the kernel's EBUSY only covers mounts in the caller's own namespace) and detach them.
  if (!SameMount(st, parent_st)) return PathError(kOp, path, EBUSY, "a mount point");
  if (!S_ISDIR(st.stx_mode)) {
    if (unlinkat(parent.get(), parts.name.c_str(), 0) != 0) return PathError(kOp, path, errno);
    return Status();
  }
  if (!recursive) {
    if (unlinkat(parent.get(), parts.name.c_str(), AT_REMOVEDIR) != 0) return PathError(kOp, path, errno);
    return Status();
  }
  return RemoveTreeAt(parent.get(), parts.name, parent_st, 0, ".", path);
}

Status SandboxFiles::Rename(const std::string& from, const std::string& to) const {
  const std::string op = "rename " + from + " to";
  ASSIGN_OR_RETURN(SandboxPathParts from_parts, SplitSandboxPath(from));
  ASSIGN_OR_RETURN(SandboxPathParts to_parts, SplitSandboxPath(to));
  ScopedFsIdentity as_agent(uid_, gid_);
  RETURN_IF_ERROR(as_agent.status());
  ASSIGN_OR_RETURN(UniqueFd from_parent, OpenParent(root_fd_, from_parts, "rename", from));
  ASSIGN_OR_RETURN(UniqueFd to_parent, OpenParent(root_fd_, to_parts, op, to));
  struct statx parent_st, st;
  if (int error = StatxFd(from_parent.get(), &parent_st)) return PathError("rename", from, error);
  if (int error = StatxAt(from_parent.get(), from_parts.name.c_str(), AT_SYMLINK_NOFOLLOW, &st)) {
    return PathError("rename", from, error);
  }
  if (!SameMount(st, parent_st)) return PathError("rename", from, EBUSY, "a mount point");
  if (renameat2(from_parent.get(), from_parts.name.c_str(), to_parent.get(), to_parts.name.c_str(),
                RENAME_NOREPLACE) != 0) {
    return PathError(op, to, errno);
  }
  return Status();
}

StatusOr<std::string> SandboxFiles::TarDirectory(const std::string& path) const {
  constexpr std::string_view kOp = "tar";
  RETURN_IF_ERROR(ValidateSandboxPath(path));
  ScopedFsIdentity as_agent(uid_, gid_);
  RETURN_IF_ERROR(as_agent.status());
  ASSIGN_OR_RETURN(UniqueFd dir, OpenChecked(root_fd_, path, O_RDONLY | O_DIRECTORY, kOp, path));
  TarSink sink;
  sink.limit = max_file_bytes_;
  TarWalk walk{nullptr, &sink, {}, path};
  if (int error = StatxFd(dir.get(), &walk.mount)) return PathError(kOp, path, error);
  ArchiveWriter writer(archive_write_new());
  if (!writer) return PathError(kOp, path, ENOMEM);
  walk.writer = writer.get();
  if (archive_write_set_format_pax_restricted(writer.get()) != ARCHIVE_OK ||
      archive_write_set_bytes_in_last_block(writer.get(), 1) != ARCHIVE_OK ||
      archive_write_open(writer.get(), &sink, nullptr, WriteToSink, nullptr) != ARCHIVE_OK) {
    return PathError(kOp, path, EIO, ArchiveError(writer.get()));
  }
  RETURN_IF_ERROR(AddTree(walk, dir.get(), "", 0));
  if (archive_write_close(writer.get()) != ARCHIVE_OK) return TarEntryError(walk, "");
  return std::move(sink.out);
}

StatusOr<uint64_t> SandboxFiles::ExtractTar(const std::string& dir, std::string_view tar) const {
  constexpr std::string_view kOp = "extract into";
  RETURN_IF_ERROR(ValidateSandboxPath(dir));
  // First pass: every entry is checked before anything is written.
  {
    ASSIGN_OR_RETURN(ArchiveReader reader, OpenTarReader(tar, dir));
    uint64_t total = 0;
    for (;;) {
      ASSIGN_OR_RETURN(std::optional<TarItem> item, NextTarItem(reader.get(), dir));
      if (!item) break;
      total += item->size;
      if (total > max_file_bytes_) return PathError(kOp, dir, EFBIG, "the files add up to more than the size cap");
    }
  }
  ScopedFsIdentity as_agent(uid_, gid_);
  RETURN_IF_ERROR(as_agent.status());
  ASSIGN_OR_RETURN(UniqueFd dest, OpenChecked(root_fd_, dir, O_PATH | O_DIRECTORY, kOp, dir));
  ASSIGN_OR_RETURN(ArchiveReader reader, OpenTarReader(tar, dir));
  std::vector<std::pair<std::string, mode_t>> dir_modes;
  uint64_t written = 0;
  for (;;) {
    ASSIGN_OR_RETURN(std::optional<TarItem> item, NextTarItem(reader.get(), dir));
    if (!item) break;
    if (item->components.empty()) continue;  // "./": the destination itself
    const std::string shown = "entry \"" + Printable(PathOf(item->components).substr(1)) + "\"";
    const std::string name = item->components.back();
    item->components.pop_back();
    // The parent, anchored at the destination: nothing (an earlier entry's symlink, or one the
    // sandbox made) can lead it out.
    ASSIGN_OR_RETURN(UniqueFd parent, MakeDirsIn(dest.get(), item->components, 0755, kOp, dir));
    if (item->type == AE_IFDIR) {
      RETURN_IF_ERROR(ExtractDir(parent.get(), name, dir, shown));
      item->components.push_back(name);
      dir_modes.emplace_back(PathOf(item->components), item->mode);
    } else if (item->type == AE_IFREG) {
      RETURN_IF_ERROR(ExtractFile(reader.get(), parent.get(), name, *item, dir, shown));
    } else {
      RETURN_IF_ERROR(ExtractSymlink(parent.get(), name, *item, dir, shown));
    }
    ++written;
  }
  // Deepest first, so that a read-only parent does not stop its children's chmod.
  for (auto it = dir_modes.rbegin(); it != dir_modes.rend(); ++it) {
    UniqueFd node = OpenInRoot(dest.get(), it->first, O_PATH | O_DIRECTORY | O_NOFOLLOW);
    if (!node) continue;  // replaced by a later entry
    if (int error = ChmodNode(node.get(), it->second)) {
      return PathError(kOp, dir, error, "chmod " + Printable(it->first.substr(1)));
    }
  }
  return written;
}

}  // namespace corral::supervisor
