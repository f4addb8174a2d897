#include "tests/root/quota_fs_util.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/file_util.h"
#include "common/unique_fd.h"
#include "tests/root/root_test_util.h"

namespace corral::test {
namespace {

constexpr char kToolPath[] = "/usr/sbin:/usr/bin:/sbin:/bin";

// Numbers the file systems made in this process, so two in one directory get distinct names.
std::atomic<int> next_number{1};

bool HasQuotaOptions(QuotaFsKind kind) { return kind == QuotaFsKind::kXfs || kind == QuotaFsKind::kExt4Project; }

std::string_view FsType(QuotaFsKind kind) {
  return kind == QuotaFsKind::kXfs || kind == QuotaFsKind::kXfsPlain ? "xfs" : "ext4";
}

std::vector<std::string> MkfsArgs(QuotaFsKind kind, const std::string& mkfs, const std::string& image) {
  switch (kind) {
    case QuotaFsKind::kXfs:
    case QuotaFsKind::kXfsPlain: return {mkfs, "-q", "-f", image};
    case QuotaFsKind::kExt4Project: return {mkfs, "-q", "-F", "-O", "quota,project", image};
    case QuotaFsKind::kExt4Plain: return {mkfs, "-q", "-F", image};
  }
  return {};
}

// One line, for an error message.
std::string Flatten(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  for (char& c : text) c = c == '\n' ? ' ' : c;
  return text;
}

// The device a path lives on (0 when it cannot be read).
dev_t DeviceOf(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? st.st_dev : 0;
}

}  // namespace

std::string_view QuotaFsKindName(QuotaFsKind kind) {
  switch (kind) {
    case QuotaFsKind::kXfs: return "xfs";
    case QuotaFsKind::kExt4Project: return "ext4_project";
    case QuotaFsKind::kExt4Plain: return "ext4_plain";
    case QuotaFsKind::kXfsPlain: return "xfs_plain";
  }
  return "unknown";
}

void PrintTo(QuotaFsKind kind, std::ostream* os) { *os << QuotaFsKindName(kind); }

std::string_view QuotaFsMkfs(QuotaFsKind kind) { return FsType(kind) == "xfs" ? "mkfs.xfs" : "mkfs.ext4"; }

ToolResult RunTool(const std::vector<std::string>& argv) {
  ToolResult result;
  if (argv.empty()) return result;
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  const std::string path_env = std::string("PATH=") + kToolPath;
  char* envp[] = {const_cast<char*>(path_env.c_str()), const_cast<char*>("LC_ALL=C"), nullptr};
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    result.output = std::string("pipe: ") + strerror(errno);
    return result;
  }
  UniqueFd out_read(out[0]), out_write(out[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_write.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, out_write.get(), 2);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp);
  posix_spawn_file_actions_destroy(&actions);
  out_write.reset();  // so that the read below ends when the tool (and its children) exit
  if (spawned != 0) {
    result.output = "cannot run " + argv[0] + ": " + strerror(spawned);
    return result;
  }
  char buf[4096];
  for (ssize_t n; (n = read(out_read.get(), buf, sizeof(buf))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (result.output.size() < 16384) result.output.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

QuotaFs::QuotaFs(const std::string& dir, QuotaFsKind kind, uint64_t bytes) : kind_(kind) {
  if (bytes == 0) bytes = FsType(kind) == "xfs" ? kXfsMinImageBytes : kExt4ImageBytes;
  // The real path: it is what the loop device reports as its backing file.
  char real[PATH_MAX];
  if (dir.empty() || realpath(dir.c_str(), real) == nullptr) {
    error_ = "realpath " + dir + ": " + strerror(errno);
    return;
  }
  const std::string base =
      std::string(real) + "/quota-fs-" + std::string(QuotaFsKindName(kind)) + "-" + std::to_string(next_number++);
  image_ = base + ".img";
  {
    UniqueFd fd(open(image_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd || ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
      error_ = "create the sparse image " + image_ + ": " + strerror(errno);
      return;
    }
  }
  const std::string mkfs = FindExecutable(std::string(QuotaFsMkfs(kind)), kToolPath);
  if (mkfs.empty()) {
    error_ = std::string(QuotaFsMkfs(kind)) + " is not installed";
    return;
  }
  ToolResult made = RunTool(MkfsArgs(kind, mkfs, image_));
  if (made.exit_code != 0) {
    error_ = mkfs + " " + image_ + " failed (exit " + std::to_string(made.exit_code) + "): " + Flatten(made.output);
    return;
  }
  mount_point_ = base;
  if (mkdir(mount_point_.c_str(), 0755) != 0) {
    error_ = "mkdir " + mount_point_ + ": " + strerror(errno);
    return;
  }
  const std::string options = HasQuotaOptions(kind) ? "loop,prjquota" : "loop";
  if (Mount(options)) return;
  if (!HasQuotaOptions(kind)) return;
  // Did the quota options fail, or the image? A kernel without quota support for this file
  // system still mounts the image read-only without them (ext4 refuses its quota feature only
  // for writing).
  const std::string quota_error = error_;
  if (Mount("loop,ro")) {
    if (!Unmount()) return;
    unsupported_ = true;
    const std::string config = kind == QuotaFsKind::kXfs ? "CONFIG_XFS_QUOTA" : "CONFIG_QUOTA and CONFIG_QFMT_V2";
    error_ = "this kernel mounts the " + std::string(FsType(kind)) + " image but not with prjquota (built without " +
             config + "?): " + quota_error;
    return;
  }
  error_ = quota_error;
}

QuotaFs::~QuotaFs() {
  if (mounted_ && !Unmount()) ADD_FAILURE() << error_;
  if (image_.empty()) return;
  // The loop device clears itself when its last user goes: at once after a plain unmount, after
  // the last open file when the unmount was lazy. Waits a little for the latter.
  std::vector<std::string> left;
  for (int attempt = 0; attempt < 50; ++attempt) {
    left = LoopDevicesBacking(image_);
    if (left.empty()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "loop device " << left.front() << " still backs " << image_ << " after the unmount";
}

std::string QuotaFs::Join(std::string_view relative) const { return mount_point_ + "/" + std::string(relative); }

bool QuotaFs::Mount(const std::string& options) {
  const std::string mount = FindExecutable("mount", kToolPath);
  if (mount.empty()) {
    error_ = "mount(8) is not installed";
    return false;
  }
  const dev_t before = DeviceOf(mount_point_);
  ToolResult mounted = RunTool({mount, "-t", std::string(FsType(kind_)), "-o", options, image_, mount_point_});
  if (mounted.exit_code != 0) {
    error_ = "mount -t " + std::string(FsType(kind_)) + " -o " + options + " " + image_ + " failed (exit " +
             std::to_string(mounted.exit_code) + "): " + Flatten(mounted.output);
    return false;
  }
  if (DeviceOf(mount_point_) == before) {
    // Nothing of ours to unmount then: the mount point is still the directory made above.
    error_ = "mount said it mounted " + image_ + " on " + mount_point_ + ", but the mount point's device is unchanged";
    return false;
  }
  mounted_ = true;
  error_.clear();
  return true;
}

bool QuotaFs::Unmount() {
  if (!mounted_) return true;
  if (umount2(mount_point_.c_str(), UMOUNT_NOFOLLOW) != 0) {
    const int plain = errno;
    // EBUSY: something still has a file open or its cwd there; detach the mount now, the file
    // system (and with it the loop device) goes when that last user does.
    if (umount2(mount_point_.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0) {
      error_ = "umount " + mount_point_ + ": " + strerror(plain) + "; lazy: " + strerror(errno);
      return false;
    }
  }
  mounted_ = false;
  return true;
}

}  // namespace corral::test
