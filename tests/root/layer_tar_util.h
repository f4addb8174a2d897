// Tar archives built in tests with libarchive, entry by entry, plain, gzip or zstd: image layers
// and image archives (OCI layouts, docker save) with exactly the entries a test needs, the bad
// ones included (`../x`, devices, a long run of zeros).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace corral::test {

enum class Compression { kNone, kGzip, kZstd };

struct TarEntry {
  std::string path;
  mode_t type = 0100000;  // S_IFREG, S_IFDIR, S_IFLNK, S_IFIFO, S_IFCHR, S_IFBLK
  mode_t mode = 0644;
  int64_t uid = 0;
  int64_t gid = 0;
  std::string data;      // a regular file's content
  std::string link;      // a symlink's target
  std::string hardlink;  // set: a hard link to this path
  uint64_t zeros = 0;    // a regular file of this many zero bytes instead of `data` (streamed)
  unsigned rdev_major = 0, rdev_minor = 0;
  int64_t mtime = 1'700'000'000;
};

TarEntry File(std::string path, std::string data, mode_t mode = 0644, int64_t uid = 0, int64_t gid = 0);
TarEntry Dir(std::string path, mode_t mode = 0755, int64_t uid = 0, int64_t gid = 0);
TarEntry Symlink(std::string path, std::string target);
TarEntry Hardlink(std::string path, std::string target);
TarEntry Fifo(std::string path);
TarEntry Device(std::string path, bool block, unsigned major, unsigned minor);

// Writes the archive to `path`; fails the running test (and returns false) when it cannot.
bool WriteTar(const std::string& path, const std::vector<TarEntry>& entries,
              Compression compression = Compression::kNone);

// The file's bytes; "" (and a test failure) when unreadable.
std::string ReadAll(const std::string& path);
// "sha256:" + hex of a file's content / of `bytes`.
std::string FileDigest(const std::string& path);
std::string BytesDigest(const std::string& bytes);
// Writes `bytes` to `path` (parents made); fails the test when it cannot.
void WriteBytes(const std::string& path, const std::string& bytes);

// Names in `dir` (no "." / ".."), sorted.
std::vector<std::string> ListDir(const std::string& dir);

}  // namespace corral::test
