// WorkspaceWatch: when an agent session's workspace is scanned (workspace_scan.h), and what the
// changes amount to per turn. One per running session; used on the event loop only.
//
// Why scans and not inotify: a scan needs no kernel resource per directory (inotify's watches
// are a per-user budget of the host, and a tree the agent fills with node_modules would spend
// it), cannot be overflowed by a burst of events, and sees a tree as it is, whoever changed it
// (the agent's Bash tool, a build it started, the file API). What it cannot see is a file made
// and removed between two scans: such a file never was a change of the workspace.
//
// When: a baseline when the session starts (before its agent can have done anything: Claude Code
// takes a second to start), then every `interval` while a turn is under way (never more often
// than ten times the last scan took, so a large tree costs at most a tenth of a worker thread),
// and once more when the turn's `result` arrives: that scan ends the turn. Each change found is
// handed to `change` at once (the session's `file_change` events); at the end of the turn
// `turn_end` gets the turn's changes merged per path (made then modified: made; made then
// removed: nothing). Between turns nothing is scanned: what changes then (an exec, the file API)
// is reported with the next turn.
//
// Bounds: each scan is bounded by ScanLimits; a turn reports at most `max_turn_files` changes
// (events and files alike); past that it counts them and says `truncated`.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include "common/status.h"
#include "supervisor/sandboxes/sandbox_manager.h"
#include "supervisor/sessions/workspace_scan.h"

namespace corral::supervisor {

// The files one turn changed.
struct TurnFiles {
  std::vector<FileChange> files;  // merged per path, in the walk's order, at most max_turn_files
  uint64_t created = 0;           // counts of every change of the turn, also those left out of `files`
  uint64_t modified = 0;
  uint64_t deleted = 0;
  bool truncated = false;  // more changes than max_turn_files, or a scan that stopped at its bound
  bool observed = true;    // false: the workspace could not be scanned (sandbox busy or stopped)
};

struct WorkspaceWatchOptions {
  std::string dir;                          // absolute inside the sandbox
  ScanLimits limits;
  std::chrono::milliseconds interval{2000};  // 0: only at the end of each turn
  size_t max_turn_files = 1000;
};

// A turn's changes so far, by path in the walk's order.
using TurnChanges = std::map<std::string, FileChange, ScanPathOrder>;

class WorkspaceWatch : public std::enable_shared_from_this<WorkspaceWatch> {
 public:
  // Opens the sandbox's root for one scan (on the loop): SandboxManager::OpenFiles.
  using OpenRoot = std::function<StatusOr<FileAccess>()>;
  struct Sink {
    std::function<void(const FileChange&)> change;
    std::function<void(const TurnFiles&)> turn_end;
  };

  WorkspaceWatch(boost::asio::io_context& io, boost::asio::thread_pool& pool, WorkspaceWatchOptions options,
                 OpenRoot open_root, Sink sink);

  void Start();        // the baseline
  void TurnStarted();  // scans every interval from now on
  // The turn's result arrived: one more scan, then sink.turn_end. `another` says whether the
  // agent has another turn queued (the scans go on).
  void TurnEnded(bool another);
  // No more scans or callbacks. Returns, for each turn whose end was awaiting its scan, what
  // it had so far (observed = false).
  std::vector<TurnFiles> Stop();
  // Whether a scan is under way (for tests: the baseline is taken once this is false).
  bool scanning() const { return in_flight_; }

  // The per-path merge of a turn's changes (exposed for unit tests). False when `change` is of
  // a path `merged` does not hold and it holds `max` paths already (the change is not kept).
  static bool Merge(TurnChanges& merged, const FileChange& change, size_t max);

 private:
  struct ScanResult;
  void Launch();
  void Scanned(std::shared_ptr<ScanResult> result);
  void Record(const FileChange& change);
  TurnFiles TakeTurn();
  void Arm(std::chrono::milliseconds after);

  boost::asio::io_context& io_;
  boost::asio::thread_pool& pool_;
  WorkspaceWatchOptions options_;
  OpenRoot open_root_;
  Sink sink_;
  boost::asio::steady_timer timer_;
  std::optional<WorkspaceScan> baseline_;
  bool in_flight_ = false;
  bool turn_active_ = false;
  bool stopped_ = false;
  int pending_ends_ = 0;    // turn ends waiting for a scan
  int covered_ends_ = 0;    // of them, those the scan in flight answers (asked before it began)
  std::chrono::milliseconds last_took_{0};
  // The current turn.
  TurnChanges turn_;
  uint64_t turn_events_ = 0;
  uint64_t overflow_[3] = {0, 0, 0};  // changes of paths `turn_` had no room for, by ChangeKind
  bool turn_truncated_ = false;
  bool turn_observed_ = true;
};

}  // namespace corral::supervisor
