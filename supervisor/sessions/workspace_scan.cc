#include "supervisor/sessions/workspace_scan.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/unique_fd.h"
#include "rootfs/scoped_path.h"

namespace corral::supervisor {

namespace {

// A directory below the top, by its name in its parent: never through a symlink, never onto
// another mount, never above the parent.
UniqueFd OpenChildDir(int parent, const char* name) {
  struct open_how how {};
  how.flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  return UniqueFd(static_cast<int>(syscall(SYS_openat2, parent, name, &how, sizeof(how))));
}

// The names in directory `fd` (without . and ..), sorted: the first `cap` + 1 of them in that
// order, however many it has (a bounded heap: memory for cap + 1 names, one pass over the rest).
// More than `cap` means the scan runs out inside this directory. An unreadable one has none.
// Names `skip` is true for are left out; `more` says whether names were left beyond the kept.
template <typename Skip>
std::vector<std::string> ListDirNames(int fd, size_t cap, const Skip& skip, bool& more) {
  std::vector<std::string> heap;  // a max-heap of the smallest names so far
  more = false;
  int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return heap;
  DIR* dir = fdopendir(copy);
  if (dir == nullptr) {
    close(copy);
    return heap;
  }
  while (struct dirent* entry = readdir(dir)) {
    if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0 || skip(entry->d_name)) continue;
    if (heap.size() <= cap) {
      heap.emplace_back(entry->d_name);
      std::push_heap(heap.begin(), heap.end());
    } else if (more = true; strcmp(entry->d_name, heap.front().c_str()) < 0) {
      std::pop_heap(heap.begin(), heap.end());
      heap.back() = entry->d_name;
      std::push_heap(heap.begin(), heap.end());
    }
  }
  closedir(dir);
  std::sort_heap(heap.begin(), heap.end());
  return heap;
}

EntryType ScannedTypeOf(uint16_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return EntryType::kFile;
    case S_IFDIR: return EntryType::kDir;
    case S_IFLNK: return EntryType::kSymlink;
    default: return EntryType::kOther;
  }
}

int64_t StatxNanos(const struct statx_timestamp& t) { return t.tv_sec * 1000000000LL + t.tv_nsec; }

class WorkspaceWalker {
 public:
  WorkspaceWalker(const ScanLimits& limits, WorkspaceScan& scan) : limits_(limits), scan_(scan), left_(limits.max_entries) {}

  // Adds the entries of directory `fd` (at `prefix`, "" for the top) and of its directories.
  void Walk(int fd, const std::string& prefix, int depth) {
    auto skip = [&](const char* name) { return Skipped(name, prefix.empty() ? name : prefix + "/" + name); };
    bool more = false;
    std::string path;
    for (const std::string& name : ListDirNames(fd, left_, skip, more)) {
      path = prefix.empty() ? name : prefix + "/" + name;
      if (left_ == 0) return Stop(path);
      struct statx st {};
      if (rootfs::StatxAt(fd, name.c_str(), AT_SYMLINK_NOFOLLOW, &st) != 0) continue;  // gone since
      ScannedEntry entry{ScannedTypeOf(st.stx_mode), st.stx_size, st.stx_ino, StatxNanos(st.stx_mtime), StatxNanos(st.stx_ctime)};
      scan_.entries.emplace_back(path, entry);
      --left_;
      if (entry.type != EntryType::kDir || depth + 1 > limits_.max_depth) continue;
      UniqueFd child = OpenChildDir(fd, name.c_str());
      if (!child) continue;  // a symlink swapped in, another mount, refused: listed, not entered
      Walk(child.get(), path, depth + 1);
      if (stopped_) return;
    }
    // Names beyond the kept ones, not reached only because entries vanished meanwhile: unseen,
    // from just after the last one kept.
    if (more && !path.empty()) Stop(path + '\x01');
  }

  bool stopped() const { return stopped_; }

 private:
  void Stop(std::string frontier) {
    scan_.frontier = std::move(frontier);
    stopped_ = true;
  }

  bool Skipped(const char* name, const std::string& path) const {
    if (std::find(limits_.skip_names.begin(), limits_.skip_names.end(), name) != limits_.skip_names.end()) return true;
    for (const std::string& skip : limits_.skip_paths) {
      if (!skip.empty() && skip.back() == '*' ? path.compare(0, skip.size() - 1, skip, 0, skip.size() - 1) == 0
                                              : path == skip) {
        return true;
      }
    }
    return false;
  }

  const ScanLimits& limits_;
  WorkspaceScan& scan_;
  size_t left_;
  bool stopped_ = false;
};

bool ScanSaw(const WorkspaceScan& scan, const std::string& path) {
  return scan.complete() || ScanPathLess(path, scan.frontier);
}

bool EntryDiffers(const ScannedEntry& a, const ScannedEntry& b) {
  if (a.type != b.type) return true;
  if (a.type == EntryType::kDir) return false;  // its entries speak for themselves
  return a.size != b.size || a.ino != b.ino || a.mtime_ns != b.mtime_ns || a.ctime_ns != b.ctime_ns;
}

}  // namespace

const char* EntryTypeName(EntryType type) {
  switch (type) {
    case EntryType::kFile: return "file";
    case EntryType::kDir: return "dir";
    case EntryType::kSymlink: return "symlink";
    case EntryType::kOther: break;
  }
  return "other";
}

const char* ChangeKindName(ChangeKind kind) {
  switch (kind) {
    case ChangeKind::kCreate: return "create";
    case ChangeKind::kModify: return "modify";
    case ChangeKind::kDelete: break;
  }
  return "delete";
}

bool ScanPathLess(std::string_view a, std::string_view b) {
  // '/' below every byte of a name: the order of the components, compared one by one.
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] == b[i]) continue;
    const int x = a[i] == '/' ? 0 : static_cast<unsigned char>(a[i]) + 1;
    const int y = b[i] == '/' ? 0 : static_cast<unsigned char>(b[i]) + 1;
    return x < y;
  }
  return a.size() < b.size();
}

StatusOr<WorkspaceScan> ScanWorkspace(int root_fd, const std::string& dir, const ScanLimits& limits) {
  UniqueFd top = rootfs::OpenInRoot(root_fd, dir, O_RDONLY | O_DIRECTORY);
  if (!top) return ErrnoError("open " + dir + " in the sandbox");
  ASSIGN_OR_RETURN(const char* pseudo, rootfs::PseudoFsOf(top.get()));
  if (pseudo != nullptr) return Status::Error(dir + " is on " + pseudo + ", not a workspace", EACCES);
  WorkspaceScan scan;
  WorkspaceWalker walker(limits, scan);
  walker.Walk(top.get(), "", 0);
  return scan;
}

std::vector<FileChange> DiffScans(const WorkspaceScan& before, const WorkspaceScan& after) {
  std::vector<FileChange> changes;
  auto b = before.entries.begin();
  auto a = after.entries.begin();
  while (b != before.entries.end() || a != after.entries.end()) {
    const bool take_before = a == after.entries.end() ||
                             (b != before.entries.end() && ScanPathLess(b->first, a->first));
    const bool take_after = b == before.entries.end() ||
                            (a != after.entries.end() && ScanPathLess(a->first, b->first));
    if (take_before) {  // gone
      if (ScanSaw(after, b->first)) changes.push_back({b->first, ChangeKind::kDelete, b->second.type, 0});
      ++b;
    } else if (take_after) {  // new
      if (ScanSaw(before, a->first)) changes.push_back({a->first, ChangeKind::kCreate, a->second.type, a->second.size});
      ++a;
    } else {  // in both
      if (EntryDiffers(b->second, a->second)) {
        changes.push_back({a->first, ChangeKind::kModify, a->second.type, a->second.size});
      }
      ++a;
      ++b;
    }
  }
  return changes;
}

}  // namespace corral::supervisor
