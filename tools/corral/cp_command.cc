#include "tools/corral/cp_command.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "common/file_util.h"
#include "common/unique_fd.h"
#include "tools/corral/client.h"
#include "tools/corral/tar_archive.h"

namespace corral::cli {
namespace {

// One sandbox's files API.
struct RemoteFs {
  Endpoint endpoint;
  std::string sandbox;

  std::string Target(const char* op, const std::string& path, const std::string& more = "") const {
    return "/v1/sandboxes/" + PercentEncode(sandbox) + "/fs/" + op + "?path=" + PercentEncode(path, true) + more;
  }
  std::string Describe(const std::string& path) const { return sandbox + ":" + path; }
};

// The last component of a path ("/a/b/" -> "b"; "/" -> "").
std::string BaseName(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  return base == "/" ? "" : base;
}

std::string Join(const std::string& dir, const std::string& name) {
  if (name.empty()) return dir;
  return !dir.empty() && dir.back() == '/' ? dir + name : dir + "/" + name;
}

// A host path's own name, also for "." and "dir/..".
std::string HostBaseName(const std::string& path) {
  std::string base = BaseName(path);
  if (base != "." && base != "..") return base;
  char* resolved = realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return base;
  base = BaseName(resolved);
  free(resolved);
  return base;
}

// fs/stat: the object, or nullopt when the path does not exist.
StatusOr<std::optional<nlohmann::json>> RemoteStat(const RemoteFs& fs, const std::string& path) {
  auto stat = CallJson(fs.endpoint, "GET", fs.Target("stat", path));
  if (stat.ok()) return std::optional<nlohmann::json>(std::move(stat).value());
  if (IsDaemonError(stat.status(), "not_found")) return std::optional<nlohmann::json>();
  return stat.status().WithContext(fs.Describe(path));
}

std::string RemoteType(const std::optional<nlohmann::json>& stat) {
  if (!stat) return "";
  auto it = stat->find("type");
  return it != stat->end() && it->is_string() ? it->get<std::string>() : "";
}

mode_t RemoteMode(const nlohmann::json& stat) {
  auto it = stat.find("mode");
  if (it == stat.end() || !it->is_string()) return 0644;
  return static_cast<mode_t>(strtoul(it->get<std::string>().c_str(), nullptr, 8) & 0777);
}

// ---- host -> sandbox ----

Status UploadFile(const RemoteFs& fs, const std::string& source, const struct stat& source_stat,
                  const std::string& destination) {
  ASSIGN_OR_RETURN(auto destination_stat, RemoteStat(fs, destination));
  std::string target = destination;
  if (RemoteType(destination_stat) == "dir") {
    target = Join(destination, HostBaseName(source));
  } else if (!destination_stat && destination.back() == '/') {
    return Status::Error(fs.Describe(destination) + ": no such directory");
  }
  ASSIGN_OR_RETURN(std::string content, ReadFileToString(source));
  char mode[8];
  snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(source_stat.st_mode & 0777));
  auto written = SendRequest(fs.endpoint, "PUT", fs.Target("write", target, std::string("&mode=") + mode),
                             std::move(content), "application/octet-stream");
  if (!written.ok()) return written.status().WithContext(fs.Describe(target));
  return Status();
}

// mkdir DIR in the sandbox; one that is already a directory is fine.
Status RemoteMakeDirectory(const RemoteFs& fs, const std::string& dir) {
  auto made = CallJson(fs.endpoint, "POST", fs.Target("mkdir", dir));
  if (made.ok()) return Status();
  if (IsDaemonError(made.status(), "conflict")) {
    ASSIGN_OR_RETURN(auto stat, RemoteStat(fs, dir));
    if (RemoteType(stat) == "dir") return Status();
    return Status::Error(fs.Describe(dir) + ": exists and is not a directory");
  }
  return made.status().WithContext(fs.Describe(dir));
}

Status UploadDirectory(const RemoteFs& fs, const std::string& source, const std::string& destination) {
  ASSIGN_OR_RETURN(auto destination_stat, RemoteStat(fs, destination));
  std::string target = destination;
  if (destination_stat) {
    if (RemoteType(destination_stat) != "dir") {
      return Status::Error(fs.Describe(destination) + ": exists and is not a directory");
    }
    target = Join(destination, HostBaseName(source));
  }
  if (target != destination || !destination_stat) RETURN_IF_ERROR(RemoteMakeDirectory(fs, target));
  std::vector<std::string> skipped;
  ASSIGN_OR_RETURN(std::string tar, TarDirectory(source, &skipped));
  for (const auto& path : skipped) {
    fprintf(stderr, "corral: cp: skipped %s (not a file, directory or symlink)\n", path.c_str());
  }
  auto extracted = SendRequest(fs.endpoint, "PUT", fs.Target("tar", target), std::move(tar), "application/x-tar");
  if (!extracted.ok()) return extracted.status().WithContext(fs.Describe(target));
  return Status();
}

Status CopyToSandbox(const RemoteFs& fs, const std::string& source, const std::string& destination,
                     bool recursive) {
  struct stat source_stat;
  if (stat(source.c_str(), &source_stat) != 0) return ErrnoError(source);
  if (S_ISDIR(source_stat.st_mode)) {
    if (!recursive) return Status::Error(source + ": is a directory (use -r)");
    return UploadDirectory(fs, source, destination);
  }
  if (!S_ISREG(source_stat.st_mode)) return Status::Error(source + ": not a regular file or directory");
  return UploadFile(fs, source, source_stat, destination);
}

// ---- sandbox -> host ----

Status WriteChunk(int fd, std::string_view chunk, const std::string& path) {
  while (!chunk.empty()) {
    ssize_t n = write(fd, chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("write " + path);
    chunk.remove_prefix(static_cast<size_t>(n));
  }
  return Status();
}

// Streams fs/read into `destination` (or a file of the source's name in it), as cp(1) writes:
// through a symlink, into a device or FIFO (/dev/stdout), over an existing file (which keeps
// its mode). The file is opened at the first byte, so a refused read leaves an old file as it
// was.
Status DownloadFile(const RemoteFs& fs, const std::string& source, mode_t mode, const std::string& destination) {
  std::string target = destination;
  struct stat target_stat;
  if (stat(target.c_str(), &target_stat) == 0 && S_ISDIR(target_stat.st_mode)) {
    target = Join(destination, BaseName(source));
    if (stat(target.c_str(), &target_stat) == 0 && S_ISDIR(target_stat.st_mode)) {
      return Status::Error(target + ": is a directory");
    }
  } else if (destination.back() == '/') {
    return Status::Error(destination + ": not a directory");
  }
  UniqueFd fd;
  auto open_target = [&]() -> Status {
    if (!fd) fd.reset(open(target.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode & 0777));
    return fd ? Status() : ErrnoError("open " + target);
  };
  auto read = SendRequest(fs.endpoint, "GET", fs.Target("read", source), "", "", [&](std::string_view chunk) {
    RETURN_IF_ERROR(open_target());
    return WriteChunk(fd.get(), chunk, target);
  });
  if (!read.ok()) return read.status().WithContext(fs.Describe(source));
  RETURN_IF_ERROR(open_target());  // An empty file sends no chunk.
  if (close(fd.release()) != 0) return ErrnoError("close " + target);
  return Status();
}

Status DownloadDirectory(const RemoteFs& fs, const std::string& source, const std::string& destination) {
  std::string target = destination;
  struct stat target_stat;
  if (stat(destination.c_str(), &target_stat) == 0) {
    if (!S_ISDIR(target_stat.st_mode)) return Status::Error(destination + ": exists and is not a directory");
    target = Join(destination, BaseName(source));
  }
  if (mkdir(target.c_str(), 0777) != 0) {
    const int error = errno;
    if (error != EEXIST || stat(target.c_str(), &target_stat) != 0 || !S_ISDIR(target_stat.st_mode)) {
      return ErrnoError("mkdir " + target, error);
    }
  }
  std::string tar;
  auto read = SendRequest(fs.endpoint, "GET", fs.Target("tar", source), "", "", [&](std::string_view chunk) {
    tar.append(chunk);
    return Status();
  });
  if (!read.ok()) return read.status().WithContext(fs.Describe(source));
  auto extracted = ExtractTar(tar, target);
  if (!extracted.ok()) return extracted.status().WithContext("extract into " + target);
  return Status();
}

Status CopyFromSandbox(const RemoteFs& fs, const std::string& source, const std::string& destination,
                       bool recursive) {
  ASSIGN_OR_RETURN(auto source_stat, RemoteStat(fs, source));
  if (!source_stat) return Status::Error(fs.Describe(source) + ": no such file or directory");
  const std::string type = RemoteType(source_stat);
  if (type == "dir") {
    if (!recursive) return Status::Error(fs.Describe(source) + ": is a directory (use -r)");
    return DownloadDirectory(fs, source, destination);
  }
  // A symlink is read through (inside the sandbox's root), as cp does with its SRC.
  if (type != "file" && type != "symlink") {
    return Status::Error(fs.Describe(source) + ": not a regular file or directory");
  }
  return DownloadFile(fs, source, RemoteMode(*source_stat), destination);
}

// libarchive converts names between the archive's UTF-8 and the locale's charset; in the "C"
// locale that every program starts in, names outside ASCII would not survive.
void UseUtf8Names() {
  const char* locale = setlocale(LC_CTYPE, "");
  if (locale == nullptr || strcmp(locale, "C") == 0 || strcmp(locale, "POSIX") == 0) {
    setlocale(LC_CTYPE, "C.UTF-8");
  }
}

}  // namespace

int RunCpCommand(const CpOptions& options) {
  UseUtf8Names();
  const Endpoint endpoint = Endpoint::Server(options.server);
  Status status;
  if (options.source.in_sandbox()) {
    RemoteFs fs{endpoint, options.source.sandbox};
    status = CopyFromSandbox(fs, options.source.path, options.destination.path, options.recursive);
  } else {
    RemoteFs fs{endpoint, options.destination.sandbox};
    status = CopyToSandbox(fs, options.source.path, options.destination.path, options.recursive);
  }
  if (status.ok()) return 0;
  fprintf(stderr, "corral: cp: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace corral::cli
