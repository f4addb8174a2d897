#include "common/file_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "common/unique_fd.h"

namespace corral {

StatusOr<std::string> ReadFileToString(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + path);
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("read " + path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Status WriteExistingFile(const std::string& path, std::string_view content) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + path);
  ssize_t n = ::write(fd.get(), content.data(), content.size());
  if (n < 0) return ErrnoError("write " + path);
  if (static_cast<size_t>(n) != content.size()) return Status::Error("short write to " + path);
  return Status();
}

Status WriteNewFile(const std::string& path, std::string_view content, int mode) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode));
  if (!fd) return ErrnoError("create " + path);
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = ::write(fd.get(), content.data() + off, content.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write " + path);
    }
    off += static_cast<size_t>(n);
  }
  return Status();
}

namespace {

Status RemoveTreeAt(int parent_fd, const char* name, dev_t dev) {
  struct stat st;
  if (::fstatat(parent_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return Status();
    return ErrnoError(std::string("stat ") + name);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(parent_fd, name, 0) != 0 && errno != ENOENT) {
      return ErrnoError(std::string("unlink ") + name);
    }
    return Status();
  }
  if (st.st_dev != dev) return Status::Error(std::string("refusing to cross a mount at ") + name);
  int fd = ::openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return ErrnoError(std::string("open ") + name);
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    ::close(fd);
    return ErrnoError(std::string("fdopendir ") + name);
  }
  Status status;
  while (struct dirent* entry = ::readdir(dir)) {
    std::string_view child = entry->d_name;
    if (child == "." || child == "..") continue;
    status = RemoveTreeAt(::dirfd(dir), entry->d_name, dev);
    if (!status.ok()) break;
  }
  ::closedir(dir);
  RETURN_IF_ERROR(status);
  if (::unlinkat(parent_fd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) {
    return ErrnoError(std::string("rmdir ") + name);
  }
  return Status();
}

}  // namespace

Status RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status();
    return ErrnoError("stat " + path);
  }
  return RemoveTreeAt(AT_FDCWD, path.c_str(), st.st_dev).WithContext("remove " + path);
}

Status RemoveTreeUnder(int parent_fd, const std::string& name) {
  struct stat st;
  if (::fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return Status();
    return ErrnoError("stat " + name);
  }
  return RemoveTreeAt(parent_fd, name.c_str(), st.st_dev).WithContext("remove " + name);
}

Status MakeDirs(const std::string& path, int mode) {
  if (path.empty()) return Status::Error("empty path");
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST) return ErrnoError("mkdir " + prefix);
  }
  return Status();
}

StatusOr<UniqueFd> LockFileForProcess(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return ErrnoError("open " + path);
  struct flock lock = {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  if (fcntl(fd.get(), F_SETLK, &lock) != 0) {
    const int error = errno == EACCES ? EWOULDBLOCK : errno;
    return Status::Error(path + " is locked by another process", error);
  }
  return fd;
}

std::string FindExecutable(const std::string& name, const std::string& path_list) {
  auto real = [](const std::string& path) {
    char resolved[PATH_MAX];
    return realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : std::string();
  };
  if (name.empty()) return std::string();
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? real(name) : std::string();
  size_t start = 0;
  while (start <= path_list.size()) {
    size_t end = path_list.find(':', start);
    if (end == std::string::npos) end = path_list.size();
    const std::string dir = path_list.substr(start, end - start);
    if (!dir.empty() && dir[0] == '/') {
      const std::string candidate = dir + "/" + name;
      struct stat st;
      if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(candidate.c_str(), X_OK) == 0) {
        return real(candidate);
      }
    }
    start = end + 1;
  }
  return std::string();
}

std::string FindExecutable(const std::string& name) {
  const char* path = getenv("PATH");
  return FindExecutable(name, path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
}

}  // namespace corral
