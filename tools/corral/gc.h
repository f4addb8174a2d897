// Run records and garbage collection of what killed runs left behind.
//
// Every `corral run` holds an flock on <run_dir>/runs/<id> for its whole life. A record whose
// lock can be taken belongs to a run that is gone (the kernel drops flocks of dead processes);
// `corral gc` (also run at the start of every `corral run`) then kills and removes its cgroup and
// the record. Cgroups named corral/run-* without any record are removed too: a run creates its
// record before its cgroup, so such a cgroup has no living owner.
#pragma once

#include <string>

#include "cgroups/cgroup_backend.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace corral::cli {

inline constexpr char kRunCgroupPrefix[] = "run-";

class RunRecord {
 public:
  // Creates and locks <run_dir>/runs/<id> (atomically: written, locked, then renamed in).
  static StatusOr<RunRecord> Create(const std::string& run_dir, const std::string& id,
                                    const std::string& cgroup);
  RunRecord() = default;
  RunRecord(RunRecord&&) = default;
  RunRecord& operator=(RunRecord&&) = default;
  ~RunRecord();

 private:
  std::string path_;
  UniqueFd lock_;
};

struct GcReport {
  int records_removed = 0;
  int cgroups_removed = 0;
};

// Removes what dead runs left; never touches a live run. `cgroup_parent` is e.g. "corral".
// With `scan_cgroups`, also removes corral/run-* cgroups that have no record at all (only
// possible when run records were deleted by hand); without it, the check is one readdir of
// the run records, cheap enough for the start of every run.
StatusOr<GcReport> CollectGarbage(const std::string& run_dir, cgroups::CgroupBackend& backend,
                                  const std::string& cgroup_parent, bool scan_cgroups = true);

}  // namespace corral::cli
