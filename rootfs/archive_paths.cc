#include "rootfs/archive_paths.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "common/hex.h"

namespace corral::rootfs {

StatusOr<std::vector<std::string>> NormalizeArchivePath(std::string_view path) {
  if (path.empty()) return Status::Error("empty path");
  if (path.find('\0') != std::string_view::npos) return Status::Error("path holds a NUL byte");
  if (path.size() > kMaxArchivePathLength) {
    return Status::Error("path longer than " + std::to_string(kMaxArchivePathLength) + " bytes");
  }
  if (path.front() == '/') return Status::Error("absolute path");
  std::vector<std::string> components;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part == "..") return Status::Error("path leaves the layer");
    if (part.size() > 255) return Status::Error("path component longer than 255 bytes");
    if (!part.empty() && part != ".") components.emplace_back(part);
    start = end + 1;
  }
  return components;
}

std::string JoinComponents(const std::vector<std::string>& components, size_t count) {
  std::string out;
  for (size_t i = 0; i < count && i < components.size(); ++i) {
    if (i > 0) out += '/';
    out += components[i];
  }
  return out;
}

bool RelativeSymlinkStaysInside(size_t link_depth, std::string_view target) {
  int64_t depth = static_cast<int64_t>(link_depth);
  size_t start = 0;
  while (start <= target.size()) {
    size_t end = target.find('/', start);
    if (end == std::string_view::npos) end = target.size();
    std::string_view part = target.substr(start, end - start);
    if (part == "..") {
      if (--depth < 0) return false;
    } else if (!part.empty() && part != ".") {
      ++depth;
    }
    start = end + 1;
  }
  return true;
}

UniqueFd OpenBeneath(int dir, const std::string& name, int flags) {
  struct open_how how = {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC | O_NOFOLLOW);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  for (int attempt = 0; attempt < 32; ++attempt) {
    long fd = ::syscall(SYS_openat2, dir, name.c_str(), &how, sizeof(how));
    if (fd >= 0) return UniqueFd(static_cast<int>(fd));
    if (errno != EAGAIN && errno != EINTR) break;
  }
  return UniqueFd();
}

StatusOr<UniqueFd> OpenDirBeneath(int root, const std::vector<std::string>& components, size_t count,
                                  bool create, int mode) {
  UniqueFd current(::fcntl(root, F_DUPFD_CLOEXEC, 0));
  if (!current) return ErrnoError("dup");
  for (size_t i = 0; i < count; ++i) {
    const std::string& name = components[i];
    UniqueFd next = OpenBeneath(current.get(), name, O_RDONLY | O_DIRECTORY);
    if (!next && errno == ENOENT && create) {
      if (::mkdirat(current.get(), name.c_str(), static_cast<mode_t>(mode)) != 0 && errno != EEXIST) {
        return ErrnoError("mkdir " + JoinComponents(components, i + 1));
      }
      next = OpenBeneath(current.get(), name, O_RDONLY | O_DIRECTORY);
    }
    if (!next) {
      const std::string where = JoinComponents(components, i + 1);
      const int error = errno;
      struct stat st;
      // O_DIRECTORY answers ENOTDIR before O_NOFOLLOW's ELOOP: ask what the component is.
      if (error == ELOOP || (error == ENOTDIR && ::fstatat(current.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                             S_ISLNK(st.st_mode))) {
        return Status::Error(where + " is a symlink");
      }
      if (error == ENOTDIR) return Status::Error(where + " is not a directory");
      errno = error;
      return ErrnoError("open " + where);
    }
    current = std::move(next);
  }
  return current;
}

std::string PartialPathFor(const std::string& path) {
  uint8_t bytes[8] = {};
  if (::getrandom(bytes, sizeof(bytes), 0) != static_cast<ssize_t>(sizeof(bytes))) {
    // getrandom never fails for 8 bytes once the pool is up; fall back to the pid and address.
    uint64_t fallback = static_cast<uint64_t>(::getpid()) ^ reinterpret_cast<uintptr_t>(&path);
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(fallback >> (8 * i));
  }
  return path + ".partial-" + HexLower(bytes);
}

}  // namespace corral::rootfs
