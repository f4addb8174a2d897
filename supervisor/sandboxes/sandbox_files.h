// SandboxFiles: the file API's kernel side. Reads and changes files in a running sandbox from
// the daemon, as the sandbox's agent, without ever resolving a path against the host.
//
// Every path the API gives is absolute inside the sandbox. It is resolved only with
// openat2(root, path, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS) (rootfs/scoped_path.h), where
// `root` is the sandbox's root directory as the host sees it (/proc/<init>/root, which walks the
// sandbox's own mount namespace). `..`, absolute symlinks and symlinks that point outside all land inside the root,
// also while the sandbox renames directories during the call. Operations on an entry (mkdir,
// unlink, rename, symlink) resolve its parent that way and act on the last component with the
// *at() syscalls, which never follow a symlink in that component.
//
// Refused with EACCES: anything on procfs, sysfs, devpts, cgroupfs, debugfs, tracefs and the
// other kernel pseudo file systems (checked with fstatfs on what was opened), and device nodes.
// Files are never opened before they are known to be regular: they are resolved with O_PATH,
// checked with fstat/fstatfs, then reopened through /proc/self/fd (the same inode, so nothing
// can be swapped in between). A FIFO, socket or device is refused at once, never opened.
//
// Permissions: each call runs with the calling thread's fsuid/fsgid set to the agent's host ids
// and no supplementary groups (isolation/fs_identity.h), so the kernel checks access as the agent and new files belong
// to it; the thread's previous identity is restored when the call returns (the daemon calls
// these from its worker pool). Nothing here loads code or reads configuration from the sandbox.
//
// Errors keep the kernel's errno (ENOENT, EEXIST, ENOTDIR, EISDIR, EACCES, ENOSPC, ...); this
// class adds EINVAL (a bad path, mode or tar entry), EFBIG (above max_file_bytes), EACCES (a
// refused file system or device) and EBUSY (a mount point in the way). Messages name the path
// as the caller gave it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace corral::supervisor {

struct FileInfo {
  std::string name;   // the last component ("/" for the root)
  std::string type;   // "file", "dir", "symlink" or "other"
  uint64_t size = 0;
  uint32_t mode = 0;  // permission bits (07777)
  int64_t mtime = 0;  // seconds since the epoch
};

class SandboxFiles {
 public:
  // `root_fd`: open("/proc/<init pid>/root", O_PATH | O_DIRECTORY | O_CLOEXEC), made by the
  // caller, who keeps it open while this object is used (and drops it when the sandbox stops:
  // the fd alone keeps the sandbox's root file system reachable after init has exited).
  // `uid`/`gid`: the agent's host ids.
  // `max_file_bytes` caps one read, one write, a tar download and a tar upload's contents.
  SandboxFiles(int root_fd, uid_t uid, gid_t gid, uint64_t max_file_bytes);

  // A regular file's bytes; a final symlink is followed (inside the root). EISDIR for a
  // directory, EACCES for a device, EINVAL for a FIFO or socket, EFBIG above the cap (also
  // when the file grows past it while being read).
  StatusOr<std::string> Read(const std::string& path) const;

  // Creates (with `mode`, exactly, umask ignored) or truncates a regular file and writes `data`;
  // with `append`, adds to the end instead. The parent must exist; a final symlink is not
  // followed (EINVAL). `mode` may hold the sticky bit but not setuid/setgid (EINVAL); it is
  // applied only when the file is created. Returns the file's size afterwards.
  StatusOr<uint64_t> Write(const std::string& path, std::string_view data, uint32_t mode = 0644,
                           bool append = false) const;

  // lstat: a symlink is described, not followed.
  StatusOr<FileInfo> Stat(const std::string& path) const;

  // A directory's entries (without . and ..), sorted by name; a final symlink is followed.
  // EFBIG when the listing would exceed the cap (about 64 bytes plus the name per entry).
  StatusOr<std::vector<FileInfo>> List(const std::string& path) const;

  // mkdir with `mode` (exactly, no setuid/setgid). With `parents`, missing directories on the
  // way are made too (with `mode` plus u+wx, so the walk can go on) and an existing directory
  // is fine; an existing non-directory is EEXIST.
  Status Mkdir(const std::string& path, uint32_t mode = 0755, bool parents = false) const;

  // unlink or rmdir; with `recursive`, a whole tree. Never follows a symlink, never descends into
  // another mount (EBUSY: the tree is left partly removed, up to that mount).
  Status Remove(const std::string& path, bool recursive = false) const;

  // renameat2 with RENAME_NOREPLACE: EEXIST when `to` exists; EXDEV across mounts.
  Status Rename(const std::string& from, const std::string& to) const;

  // A pax tar of the directory's regular files, directories and symlinks (stored as links),
  // names relative to the directory, sorted. Other file types and other mounts are skipped.
  // EFBIG when the archive would exceed the cap; an unreadable entry fails the whole archive.
  StatusOr<std::string> TarDirectory(const std::string& path) const;

  // Extracts a tar (ustar, pax or GNU; no compression) into the existing directory `dir`.
  // Every entry is checked before anything is written: EINVAL for an absolute name, a `..`
  // component, a hard link, or a type other than file, directory and symlink; EFBIG when the
  // files' sizes add up to more than the cap. Entries are then resolved with RESOLVE_IN_ROOT
  // anchored at `dir` itself, so a symlink (from the archive or already there) can never lead
  // an entry outside `dir`. Files and symlinks replace what is there (a directory is EEXIST);
  // missing parents are created; modes are masked to 0777. Returns the number of entries
  // written. A failure part way leaves the entries before it in place.
  StatusOr<uint64_t> ExtractTar(const std::string& dir, std::string_view tar) const;

 private:
  int root_fd_;
  uid_t uid_;
  gid_t gid_;
  uint64_t max_file_bytes_;
};

// ---- Pure helpers (exposed for unit tests) ----

// An API path: absolute, non-empty, no NUL, shorter than PATH_MAX, no component longer than
// NAME_MAX. EINVAL otherwise; the message names the path (printably).
Status ValidateSandboxPath(std::string_view path);

// An entry's parent and last component: "/a/b/" -> {"/a", "b"}, "/a" -> {"/", "a"}. EINVAL for
// an invalid path, "/" and a last component "." or "..".
struct SandboxPathParts {
  std::string parent;
  std::string name;
};
StatusOr<SandboxPathParts> SplitSandboxPath(std::string_view path);

// A tar entry's name as components under the destination: "./a//b/" -> {"a", "b"}; "./" -> {}.
// EINVAL for an empty or absolute name, a `..` component, or a name longer than PATH_MAX.
StatusOr<std::vector<std::string>> TarEntryComponents(std::string_view name);

// A mode the API accepts: permission bits and the sticky bit only (EINVAL otherwise).
Status ValidateCreateMode(uint32_t mode);

}  // namespace corral::supervisor
