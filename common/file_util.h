// Small file helpers for the parent side (never used between clone and exec).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace corral {

// Reads a whole (small) file such as a cgroup or /proc file.
StatusOr<std::string> ReadFileToString(const std::string& path);

// Writes `content` to an existing file (O_WRONLY, no O_CREAT): the way cgroup and /proc files
// are written. One write(2), so the kernel sees the value at once.
Status WriteExistingFile(const std::string& path, std::string_view content);

// Creates or truncates `path` with `mode` and writes `content`.
Status WriteNewFile(const std::string& path, std::string_view content, int mode = 0644);

// Removes a directory tree without following symlinks and without crossing mount points.
// A missing path is OK.
Status RemoveTree(const std::string& path);

// RemoveTree of `name` under the directory fd `parent_fd` (no symlink followed, `name` itself
// included; a missing `name` is OK): for trees reached through a directory handle.
Status RemoveTreeUnder(int parent_fd, const std::string& name);

// mkdir -p with `mode` for the directories it creates.
Status MakeDirs(const std::string& path, int mode = 0755);

}  // namespace corral
