// File systems with project quota for tests: a sparse image in the test's own directory,
// formatted, and mounted through a loop device on a mount point beside it; unmounted when the
// object goes (also when the test failed halfway), which lets the loop device go by itself
// (mount -o loop attaches with LO_FLAGS_AUTOCLEAR).
//
//   TempDir dir("pq");                           // declared first: outlives the mount
//   QuotaFs fs(dir.path(), QuotaFsKind::kXfs);   // dir/quota-fs-xfs-1.img on dir/quota-fs-xfs-1
//   if (fs.unsupported()) GTEST_SKIP() << fs.error();
//   ASSERT_TRUE(fs.ok()) << fs.error();
//   MakeProjectDir(fs.path() + "/layer", ...);
//
// Every name is under the given directory, so tests running at the same time on one machine never
// meet; nothing here touches a mount or loop device it did not make.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace corral::test {

enum class QuotaFsKind {
  kXfs,          // mkfs.xfs, mounted with prjquota
  kExt4Project,  // mkfs.ext4 -O quota,project, mounted with prjquota
  kExt4Plain,    // mkfs.ext4 as it comes, mounted without quota options
  kXfsPlain,     // mkfs.xfs, mounted without quota options: project ids are kept, nothing counted
};

// "xfs", "ext4_project", "ext4_plain", "xfs_plain" (for test names and file names).
std::string_view QuotaFsKindName(QuotaFsKind kind);
// For GoogleTest's messages about a parameterized test ("xfs", not "4-byte object <00-00 00-00>").
void PrintTo(QuotaFsKind kind, std::ostream* os);
// The mkfs program the kind needs ("mkfs.xfs", "mkfs.ext4").
std::string_view QuotaFsMkfs(QuotaFsKind kind);

// mkfs.xfs refuses file systems under 300 MB (xfsprogs 5.19 and later).
inline constexpr uint64_t kXfsMinImageBytes = 320ull << 20;
inline constexpr uint64_t kExt4ImageBytes = 256ull << 20;

class QuotaFs {
 public:
  // Makes <dir>/quota-fs-<kind>-<n>.img of `bytes` (sparse; 0: the kind's smallest sensible
  // size), formats it and mounts it on <dir>/quota-fs-<kind>-<n>. Check ok() before use.
  QuotaFs(const std::string& dir, QuotaFsKind kind, uint64_t bytes = 0);
  // Unmounts (lazily when a plain unmount is refused, e.g. a file is still open), and fails the
  // running test when the loop device still holds the image afterwards.
  ~QuotaFs();
  QuotaFs(const QuotaFs&) = delete;
  QuotaFs& operator=(const QuotaFs&) = delete;

  bool ok() const { return mounted_; }
  // Why not ok(): the failed step and what the tool said.
  const std::string& error() const { return error_; }
  // With !ok(): the image is fine (it mounts read-only without quota options) but this kernel
  // cannot mount it with them (no CONFIG_XFS_QUOTA, or no CONFIG_QFMT_V2 for ext4's quota
  // feature). A reason to skip, not a failure.
  bool unsupported() const { return unsupported_; }
  QuotaFsKind kind() const { return kind_; }
  // The mount point.
  const std::string& path() const { return mount_point_; }
  const std::string& image() const { return image_; }
  // path() + "/" + relative.
  std::string Join(std::string_view relative) const;

 private:
  bool Mount(const std::string& options);
  // Unmounts; false (and error_) when even the lazy unmount failed.
  bool Unmount();

  QuotaFsKind kind_;
  std::string image_;
  std::string mount_point_;
  std::string error_;
  bool mounted_ = false;
  bool unsupported_ = false;
};


// Runs `argv` (argv[0] an absolute path) with stdin from /dev/null and a fixed PATH and C locale;
// returns its exit code (-1: it did not start or was killed) and its stdout and stderr together.
struct ToolResult {
  int exit_code = -1;
  std::string output;
};
ToolResult RunTool(const std::vector<std::string>& argv);

}  // namespace corral::test
