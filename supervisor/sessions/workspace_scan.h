// WorkspaceScan: what a sandbox's workspace holds, read from the host side, and what changed
// between two readings. The `file_change` events of an agent session come from here
// (workspace_watch.h schedules the scans), so a file the agent's Bash tool wrote counts as much
// as one its Write tool did.
//
// A scan walks one directory tree of the running sandbox from the daemon, through the sandbox's
// root as the host sees it (/proc/<init>/root, the fd SandboxManager::OpenFiles gives): nothing
// runs in the sandbox, and nothing the sandbox controls can lead the walk elsewhere:
//   - the tree's top is resolved with RESOLVE_IN_ROOT (a symlink there stays inside the sandbox);
//   - every directory below is opened from its parent's fd by its name alone, with openat2
//     O_NOFOLLOW | RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV:
//     a symlink (also one swapped in for a directory after it was listed) is refused with ELOOP,
//     and another mount (procfs, a tmpfs) is never entered (EXDEV);
//   - entries are described with statx(dirfd, name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT): a
//     symlink is an entry of its own, never followed; no file is ever opened for reading.
// A directory that cannot be opened (gone, refused, a symlink now) is listed but not entered.
// The caller decides as whom the walk reads (the daemon scans as the agent: ScopedFsIdentity).
//
// Bounds: a scan looks at `max_entries` entries at most and goes `max_depth` directories deep.
// Entries are visited in one fixed order (depth first, names sorted bytewise), so a scan that
// stops at its bound has seen exactly the entries that come before its `frontier` in that order;
// DiffScans compares only what both scans saw. Memory is one entry (its path and a few numbers)
// per entry seen, and the names of one directory up to the entries left (a directory with more
// is read through once, keeping the first ones in order); time one statx per entry seen and a
// readdir of each directory entered (as many names as the sandbox's inode quota allows).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace corral::supervisor {

enum class EntryType : uint8_t { kFile, kDir, kSymlink, kOther };
const char* EntryTypeName(EntryType type);  // "file", "dir", "symlink", "other"

struct ScannedEntry {
  EntryType type = EntryType::kOther;
  uint64_t size = 0;
  uint64_t ino = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;  // changes with the content, the mode, the owner and a rename onto it
};

struct ScanLimits {
  size_t max_entries = 20000;
  int max_depth = 32;
  // Names left out wherever they are, with all they hold (e.g. ".git": a repository's own
  // bookkeeping, not the work), and paths (relative to the scanned directory) left out; a path
  // ending in "*" leaves out every path that begins with the rest (".claude.json*").
  std::vector<std::string> skip_names;
  std::vector<std::string> skip_paths;
};

struct WorkspaceScan {
  // Paths relative to the scanned directory ("src/main.py"), in the walk's order (ScanPathLess).
  std::vector<std::pair<std::string, ScannedEntry>> entries;
  // "" when the scan saw the whole tree; otherwise the first path it did not see (it and
  // everything after it in the walk's order are unseen).
  std::string frontier;
  bool complete() const { return frontier.empty(); }
};

// Walks the directory `dir` (absolute inside the sandbox) of the tree whose root is `root_fd`.
// Errors: the top cannot be resolved or opened (ENOENT, ENOTDIR, EACCES), or is on a kernel
// pseudo file system (EACCES).
StatusOr<WorkspaceScan> ScanWorkspace(int root_fd, const std::string& dir, const ScanLimits& limits);

enum class ChangeKind : uint8_t { kCreate, kModify, kDelete };
const char* ChangeKindName(ChangeKind kind);  // "create", "modify", "delete"

struct FileChange {
  std::string path;  // relative to the scanned directory
  ChangeKind kind = ChangeKind::kModify;
  EntryType type = EntryType::kFile;  // what it is now (a deleted entry: what it was)
  uint64_t size = 0;                  // its size now (0 when deleted)
};

// What changed from `before` to `after`, in the walk's order, among the paths both scans saw.
// A directory counts when it appears or goes, not when its entries change; anything else when
// its type, size, inode, mtime or ctime differ. A path whose type changed is a modify (`type`
// says what it is now).
std::vector<FileChange> DiffScans(const WorkspaceScan& before, const WorkspaceScan& after);

// The walk's order: component by component, each compared bytewise ("a/b" < "a-c").
bool ScanPathLess(std::string_view a, std::string_view b);
struct ScanPathOrder {
  bool operator()(const std::string& a, const std::string& b) const { return ScanPathLess(a, b); }
};

}  // namespace corral::supervisor
