// Helpers shared by the v1 and v2 backends: name validation, reading and parsing the kernel's
// control files, walking a cgroup tree, and bounded polling. Internal to cgroups/: nothing
// outside this folder includes it.
//
// Every function here reports failure through Status (never throws on its own; only an
// allocation failure could) and never aborts.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cgroups/cgroup_backend.h"
#include "common/status.h"

namespace corral::cgroups {

// How long Freeze/Kill/Destroy wait for the kernel before they give up.
inline constexpr std::chrono::milliseconds kSettleTimeout{2000};

// Checks a cgroup name relative to a backend root: non-empty, no leading '/', no empty, "." or
// ".." component, no NUL or newline. An error names the offending name.
Status ValidateCgroupName(const std::string& name);

// Rejects limits the kernel would refuse with a bare EINVAL, naming the field: the CFS period
// must be within [1 ms, 1 s] and the quota at least 1 ms (kernel/sched/core.c).
Status ValidateLimits(const CgroupLimits& limits);

// Splits a validated name into its components: "corral/run-1" -> {"corral", "run-1"}.
std::vector<std::string> SplitCgroupName(const std::string& name);

// Parses a decimal unsigned integer, ignoring surrounding whitespace ("123\n" -> 123).
StatusOr<uint64_t> ParseCgroupUint(std::string_view text);

// Reads a file holding one decimal integer (memory.current, pids.current, cpuacct.usage...).
StatusOr<uint64_t> ReadUintFile(const std::string& path);

// Like ReadUintFile, but a missing file (ENOENT) reads as `absent_value`.
StatusOr<uint64_t> ReadOptionalUintFile(const std::string& path, uint64_t absent_value = 0);

// The value of `key` in a flat keyed file ("key value" per line: cpu.stat, memory.events,
// pids.events, cgroup.events, memory.oom_control, cpuacct.stat). The key must match a whole
// word ("oom_kill" does not match "oom_group_kill"). nullopt when the key is absent or its
// value is not a number.
std::optional<uint64_t> FindKeyedValue(std::string_view content, std::string_view key);

// Reads `path` and returns FindKeyedValue(content, key), or `absent_value` when the key is
// absent. A missing file is an error unless `missing_file_ok`, in which case it reads as
// `absent_value` too.
StatusOr<uint64_t> ReadKeyedValue(const std::string& path, std::string_view key,
                                  bool missing_file_ok, uint64_t absent_value = 0);

// The pids listed one per line in a cgroup.procs file.
StatusOr<std::vector<pid_t>> ReadPidList(const std::string& path);

// True when `path` exists (following symlinks); false on ENOENT/ENOTDIR; an error otherwise.
StatusOr<bool> PathExists(const std::string& path);

// Names of the immediate subdirectories of `dir` (symlinks are not followed). A missing
// directory yields an empty list.
StatusOr<std::vector<std::string>> ListSubdirectories(const std::string& dir);

// Whether `dir` has a subdirectory (a missing `dir` has none). cgroupfs (kernfs), ext4, xfs and
// tmpfs count a directory's subdirectories in its link count (2 + their number), so one stat
// answers, where listing a parent of thousands of cgroups read every entry; a file system that
// does not count them (link count 1: btrfs, overlayfs) is listed.
StatusOr<bool> HasSubdirectories(const std::string& dir);

// `dir` and every directory below it, deepest first (post-order), so that removing them in
// this order never meets a non-empty directory. A missing `dir` yields an empty list.
StatusOr<std::vector<std::string>> ListTreeDeepestFirst(const std::string& dir);

// Every pid in the cgroup.procs files of `dir` and its descendants, appended to `pids`.
// A directory that disappears while being walked is skipped.
Status CollectTreePids(const std::string& dir, std::vector<pid_t>* pids);

// Sorts and removes duplicates.
void SortUnique(std::vector<pid_t>* pids);

// mkdir for each missing component of `relative` below `base` (which must exist). The last
// component must not exist yet: EEXIST for it is an error.
Status MakeCgroupDirs(const std::string& base, const std::string& relative);

// rmdir(path) for a cgroup directory. ENOENT is success. EBUSY is retried until `deadline`: the
// kernel moves killed tasks out of a cgroup asynchronously, after kill(2) and cgroup.kill return.
Status RemoveCgroupDir(const std::string& path, std::chrono::steady_clock::time_point deadline);

// A backend's root as given, without trailing '/' ("/" stays).
std::string WithoutTrailingSlashes(std::string root);

// Where a version keeps the memory and pids counters of CgroupStats (cgroup_backend.h).
struct CounterFiles {
  std::string memory_current;  // memory.current / memory.usage_in_bytes
  std::string memory_peak;     // memory.peak / memory.max_usage_in_bytes
  std::string memory_events;   // holds the "oom_kill" line: memory.events / memory.oom_control
  std::string pids_current;
  std::string pids_events;     // "max": forks refused (absent before Linux 4.12: 0)
  // v2: a file of a controller the hierarchy does not offer reads as 0 (memory.peak before 5.19
  // too); v1: each hierarchy is required, so its files are.
  bool absent_is_zero = false;
};

// Reads them into `stats`.
Status ReadCounters(const CounterFiles& files, CgroupStats* stats);

// rmdir of a cgroup directory that may not be empty: EBUSY (processes in it) and ENOTEMPTY
// (child cgroups), which can appear after any check, both mean "not empty" and leave it; so does
// ENOENT. Never kills, never waits.
Status RemoveCgroupDirIfEmpty(const std::string& path);

// Calls `done` until it returns true, an error, or `timeout` passes, sleeping a short, growing
// interval between calls (1 ms up to 10 ms). A timeout is an error naming `what`.
Status PollUntil(const std::function<StatusOr<bool>()>& done, std::chrono::milliseconds timeout,
                 std::string_view what);

// Sleeps for `duration`, resuming after signals.
void SleepFor(std::chrono::microseconds duration);

}  // namespace corral::cgroups
