#include "tools/corral/uid_slots.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/file_util.h"
#include "common/parse.h"

namespace corral::cli {
namespace {

constexpr uid_t kRangeSize = 65536;

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

StatusOr<UidSlot> AcquireEphemeralSlot(const std::string& run_dir) {
  const std::string dir = run_dir + "/slots";
  RETURN_IF_ERROR(MakeDirs(dir, 0700));
  for (int slot = 0; slot < kSlotCount; ++slot) {
    const std::string path = dir + "/" + std::to_string(slot);
    UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) return ErrnoError("open " + path);
    if (flock(fd.get(), LOCK_EX | LOCK_NB) == 0) {
      return UidSlot(kEphemeralUidBase + static_cast<uid_t>(slot) * kRangeSize, std::move(fd));
    }
    if (errno != EWOULDBLOCK) return ErrnoError("flock " + path);
  }
  return Status::Error("all " + std::to_string(kSlotCount) + " uid slots are in use");
}

StatusOr<UidSlot> AcquireWorkspaceSlot(const std::string& state_dir, const std::string& workspace,
                                       bool make_layer_dirs) {
  RETURN_IF_ERROR(MakeDirs(workspace, 0700));
  const std::string lock_path = workspace + "/lock";
  UniqueFd lock(open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!lock) return ErrnoError("open " + lock_path);
  if (flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return Status::Error("workspace " + workspace + " is in use by another sandbox");
    return ErrnoError("flock " + lock_path);
  }
  const std::string registry = state_dir + "/workspaces";
  RETURN_IF_ERROR(MakeDirs(registry, 0700));

  int slot = -1;
  const std::string slot_path = workspace + "/slot";
  if (auto recorded = ReadFileToString(slot_path); recorded.ok()) {
    auto parsed = ParseUint(Trim(*recorded));
    auto owner = parsed.ok() && *parsed < kSlotCount
                     ? ReadFileToString(registry + "/" + std::to_string(*parsed))
                     : StatusOr<std::string>(Status::Error("bad slot"));
    if (!owner.ok() || Trim(*owner) != workspace) {
      return Status::Error("workspace " + workspace + " has a slot file that the registry in " +
                           registry + " does not confirm; refusing to guess its owner ids");
    }
    slot = static_cast<int>(*parsed);
  } else {
    for (int candidate = 0; candidate < kSlotCount && slot < 0; ++candidate) {
      const std::string path = registry + "/" + std::to_string(candidate);
      UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
      if (!fd) {
        if (errno == EEXIST) continue;
        return ErrnoError("create " + path);
      }
      std::string line = workspace + "\n";
      if (write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
        return ErrnoError("write " + path);
      }
      slot = candidate;
    }
    if (slot < 0) return Status::Error("all workspace uid slots are in use");
    RETURN_IF_ERROR(WriteNewFile(slot_path, std::to_string(slot) + "\n", 0600));
  }
  const uid_t base = kWorkspaceUidBase + static_cast<uid_t>(slot) * kRangeSize;
  if (!make_layer_dirs) return UidSlot(base, std::move(lock));
  // The writable layer: its root is the sandbox's "/" and belongs to root inside.
  const std::string upper = workspace + "/upper", work = workspace + "/work";
  for (const std::string& dir : {upper, work}) {
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoError("mkdir " + dir);
    struct stat st;
    if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return Status::Error(dir + " is not a directory");
    }
  }
  if (chown(upper.c_str(), base, base) != 0) return ErrnoError("chown " + upper);
  return UidSlot(base, std::move(lock));
}

}  // namespace corral::cli
