// A git repository on the host that an operator lets headless executions start from
// (config [execute] allowed_repo_paths), and the bundle the daemon makes of it.
//
// Blocking: for the worker pool, never the event loop.
//
// The path a request names is resolved (realpath: symlinks and `..` followed) and must be one of
// the allowed directories (also resolved) or under one; anything else is EPERM, without saying
// whether it exists. The bundle is made by the host's git running as the owner of the resolved
// directory (its uid and gid, no supplementary groups), never as root for a directory root does
// not own: whatever the repository's configuration makes git run, runs as that user. Its
// environment is minimal (no system or global git configuration, no terminal prompts).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"

namespace corral::supervisor {

// The resolved directory, when `path` is (under) one of `allowed`. EPERM when it is not (or
// when `allowed` is empty); EINVAL for a path that is not absolute, or under an allowed
// directory but not an existing directory.
StatusOr<std::string> ResolveAllowedRepo(const std::string& path, const std::vector<std::string>& allowed);

// `git bundle create - --all` in `dir` (resolved), as its owner. EINVAL with git's message when
// git refuses (not a repository, no commits); EFBIG above `max_bytes`; ETIMEDOUT after
// `timeout` (git is killed in both cases).
StatusOr<std::string> BundleHostRepo(const std::string& dir, size_t max_bytes, std::chrono::milliseconds timeout);

}  // namespace corral::supervisor
