// Scoped path resolution: paths that come from an untrusted tree (a running sandbox's root, the
// directory a tar is extracted into) resolved with a directory as their root, so that nothing in
// the tree can lead outside it: `..` stops at the root, absolute symlinks restart from it,
// relative ones cannot climb above it, magic links (/proc/PID/root, /proc/PID/fd/N) are refused,
// and a rename racing the walk makes the kernel retry rather than escape. On top of it, what an
// opened fd is (which file system, which mount) and how to act on exactly that inode. Parent side
// only (these allocate); the mount executor's child does its own raw openat2 calls.
//
// Functions that return a UniqueFd leave errno set when it is invalid; those that return an int
// return 0 or the errno.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace corral::rootfs {

// How often OpenInRoot retries when the kernel answers EAGAIN.
inline constexpr int kScopedResolveRetries = 32;

// openat2(root, path, flags | O_CLOEXEC) with RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS. A final
// symlink is followed (inside the root) unless `flags` has O_NOFOLLOW; O_PATH gives a handle that
// opens nothing. With RESOLVE_IN_ROOT the kernel answers EAGAIN when a rename or mount anywhere
// raced with a `..` step: retried up to kScopedResolveRetries times.
UniqueFd OpenInRoot(int root, const std::string& path, uint64_t flags);

// The name of the kernel pseudo file system with the statfs magic `magic` ("procfs", "sysfs",
// "devpts", "cgroupfs", "cgroup2", "debugfs", "tracefs", "securityfs", "bpffs", "nsfs", ...);
// nullptr for any other file system.
const char* PseudoFsName(uint32_t magic);

// PseudoFsName of the file system `fd` is on (fstatfs): nullptr for an ordinary one. An error
// carries fstatfs's errno.
StatusOr<const char*> PseudoFsOf(int fd);

// Opens again what the O_PATH fd `node` refers to, through /proc/self/fd/<node>, with
// `flags` | O_CLOEXEC: the same inode (nothing can be swapped in between), with a fresh
// permission check against the calling thread's fsuid. Check the inode's type first (fstat on
// `node`): a FIFO or a device would be opened like any file.
UniqueFd ReopenNode(int node, int flags);

// chmod of exactly the inode behind the O_PATH fd `node` (fchmod refuses O_PATH fds).
int ChmodNode(int node, mode_t mode);

// statx(dir_fd, name, flags | AT_NO_AUTOMOUNT) with the basic fields and the mount id: never
// triggers an automount. StatxFd: of `fd` itself (AT_EMPTY_PATH).
int StatxAt(int dir_fd, const char* name, int flags, struct statx* st);
int StatxFd(int fd, struct statx* st);

// Whether two statx results are on the same mount: by mount id where the kernel gave one, else
// by device.
bool SameMount(const struct statx& a, const struct statx& b);

// A path's components, without empty ones and ".": "/a//./b/" -> {"a", "b"}. ".." is kept.
std::vector<std::string> PathComponents(std::string_view path);

}  // namespace corral::rootfs
