// Paths taken from archives (image layers, image archives) and the directories they name, made
// safe to act on: a path is normalized lexically before anything touches the disk, and its
// parent directory is opened one component at a time under a directory fd with openat2
// RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, so that nothing in the tree being written (a symlink an
// earlier entry planted, a `..`) can lead a write outside it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace corral::rootfs {

inline constexpr size_t kMaxArchivePathLength = 4096;

// The components of a path from an archive entry. Leading "./" (any number), "." and empty
// components ("a//b", a trailing "/") are dropped; an empty result is the tree's root itself
// ("./"). Refused, with the cause as the message: an empty path ("empty path"), an absolute
// one ("absolute path"), a ".." component anywhere ("path leaves the layer"), a NUL byte, a
// path longer than kMaxArchivePathLength, a component longer than 255 bytes.
StatusOr<std::vector<std::string>> NormalizeArchivePath(std::string_view path);

// The components joined by "/" ("" for the root).
std::string JoinComponents(const std::vector<std::string>& components, size_t count);

// Whether a RELATIVE symlink target, followed lexically from the directory holding the link
// (`link_depth` components below the root), never climbs above the root: "../b" from "a/l" is
// fine, ".." from "l" is not. Absolute targets are not judged here (they resolve inside the
// sandbox's root at run time); an empty target is refused by the caller.
bool RelativeSymlinkStaysInside(size_t link_depth, std::string_view target);

// openat2(dir, name, flags | O_CLOEXEC | O_NOFOLLOW) with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
// RESOLVE_NO_MAGICLINKS, retried on EAGAIN. Invalid with errno set on failure.
UniqueFd OpenBeneath(int dir, const std::string& name, int flags);

// Opens the directory `components[0 .. count)` under `root` (O_RDONLY | O_DIRECTORY), one
// component at a time through OpenBeneath; when `create`, missing directories are made with
// `mode` (owned by the caller). A component that is a symlink fails with "... is a symlink", one
// that is not a directory with "... is not a directory".
StatusOr<UniqueFd> OpenDirBeneath(int root, const std::vector<std::string>& components, size_t count,
                                  bool create, int mode = 0755);

// A fresh name beside `path`: path + ".partial-<16 random hex>".
std::string PartialPathFor(const std::string& path);

}  // namespace corral::rootfs
