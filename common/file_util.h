// Small file helpers for the parent side (never used between clone and exec).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "common/unique_fd.h"

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

// The real path (no symlink) of `name` if it has a '/', else of the first executable regular
// file `name` in `path_list` (a PATH value; relative entries are skipped). "" when there is none.
std::string FindExecutable(const std::string& name, const std::string& path_list);
// The same over this process's PATH ("/usr/local/bin:/usr/bin:/bin" when it has none).
std::string FindExecutable(const std::string& name);

// Opens (creating, 0600) and locks `path` for this process alone: a POSIX record lock (F_SETLK),
// which belongs to the process, not to the open file, so a child it forks and that has not yet
// exec'd (a sandbox's launcher child, a helper) does not hold it after the process is gone.
// EWOULDBLOCK (as the error's errno) when another process holds it. The lock lasts while the
// returned fd is open and this process opens no other fd on the file.
StatusOr<UniqueFd> LockFileForProcess(const std::string& path);

}  // namespace corral
