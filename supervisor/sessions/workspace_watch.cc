#include "supervisor/sessions/workspace_watch.h"

#include <algorithm>

#include <boost/asio/post.hpp>

#include "common/log.h"
#include "isolation/fs_identity.h"

namespace corral::supervisor {

struct WorkspaceWatch::ScanResult {
  std::optional<WorkspaceScan> baseline;  // handed to the worker and back
  StatusOr<WorkspaceScan> scan = Status::Error("not scanned");
  std::vector<FileChange> changes;
  std::chrono::milliseconds took{0};
};

WorkspaceWatch::WorkspaceWatch(boost::asio::io_context& io, boost::asio::thread_pool& pool,
                               WorkspaceWatchOptions options, OpenRoot open_root, Sink sink)
    : io_(io),
      pool_(pool),
      options_(std::move(options)),
      open_root_(std::move(open_root)),
      sink_(std::move(sink)),
      timer_(io) {}

void WorkspaceWatch::Start() {
  if (!in_flight_ && !baseline_) Launch();
}

void WorkspaceWatch::TurnStarted() {
  turn_active_ = true;
  if (!in_flight_ && options_.interval.count() > 0) Arm(options_.interval);
}

void WorkspaceWatch::TurnEnded(bool another) {
  turn_active_ = another;
  ++pending_ends_;
  timer_.cancel();
  if (!in_flight_) Launch();
}

std::vector<TurnFiles> WorkspaceWatch::Stop() {
  stopped_ = true;
  timer_.cancel();
  std::vector<TurnFiles> ends;
  for (; pending_ends_ > 0; --pending_ends_) {
    turn_observed_ = false;
    ends.push_back(TakeTurn());
  }
  return ends;
}

void WorkspaceWatch::Arm(std::chrono::milliseconds after) {
  // Never more often than ten times what the last scan took.
  timer_.expires_after(std::max(after, last_took_ * 10));
  std::weak_ptr<WorkspaceWatch> weak = weak_from_this();
  timer_.async_wait([weak](boost::system::error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->stopped_ || self->in_flight_ || !self->turn_active_) return;
    self->Launch();
  });
}

void WorkspaceWatch::Launch() {
  in_flight_ = true;
  covered_ends_ = pending_ends_;
  auto result = std::make_shared<ScanResult>();
  result->baseline = std::move(baseline_);
  baseline_.reset();
  StatusOr<FileAccess> access = open_root_();
  if (!access.ok()) {  // not running, or frozen for a copy: nothing seen this time
    result->scan = access.status();
    boost::asio::post(io_, [self = shared_from_this(), result] { self->Scanned(result); });
    return;
  }
  auto shared = std::make_shared<FileAccess>(std::move(*access));
  boost::asio::post(pool_, [self = shared_from_this(), result, shared] {
    const auto began = std::chrono::steady_clock::now();
    {
      isolation::ScopedFsIdentity as_agent(shared->uid, shared->gid);  // read what the agent may read
      result->scan = as_agent.status().ok()
                         ? ScanWorkspace(shared->root.get(), self->options_.dir, self->options_.limits)
                         : StatusOr<WorkspaceScan>(as_agent.status());
    }
    if (result->scan.ok() && result->baseline) result->changes = DiffScans(*result->baseline, *result->scan);
    result->took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began);
    boost::asio::post(self->io_, [self, result] { self->Scanned(result); });
  });
}

void WorkspaceWatch::Scanned(std::shared_ptr<ScanResult> result) {
  in_flight_ = false;
  if (stopped_) return;
  last_took_ = result->took;
  if (result->scan.ok()) {
    if (!result->scan->complete()) turn_truncated_ = true;
    baseline_ = std::move(*result->scan);
    for (const FileChange& change : result->changes) Record(change);
  } else {
    baseline_ = std::move(result->baseline);  // compared with the next scan that works
    turn_observed_ = false;
    LogInfo("session", "workspace not scanned", {{"dir", options_.dir}, {"error", result->scan.status().message()}});
  }
  for (; covered_ends_ > 0 && pending_ends_ > 0; --covered_ends_, --pending_ends_) {
    TurnFiles files = TakeTurn();
    if (sink_.turn_end) sink_.turn_end(files);
    if (stopped_) return;
  }
  if (pending_ends_ > 0) {
    Launch();  // a result arrived during this scan: its own scan
  } else if (turn_active_ && options_.interval.count() > 0) {
    Arm(options_.interval);
  }
}

bool WorkspaceWatch::Merge(TurnChanges& merged, const FileChange& change, size_t max) {
  auto it = merged.find(change.path);
  if (it == merged.end()) {
    if (merged.size() >= max) return false;
    merged.emplace(change.path, change);
    return true;
  }
  FileChange& was = it->second;
  if (was.kind == ChangeKind::kCreate && change.kind == ChangeKind::kDelete) {
    merged.erase(it);  // made and removed within the turn: no change
    return true;
  }
  const ChangeKind kind = was.kind == ChangeKind::kCreate   ? ChangeKind::kCreate
                          : change.kind == ChangeKind::kDelete ? ChangeKind::kDelete
                                                               : ChangeKind::kModify;  // also removed, then made again
  was = change;
  was.kind = kind;
  return true;
}

void WorkspaceWatch::Record(const FileChange& change) {
  if (!Merge(turn_, change, options_.max_turn_files)) {
    ++overflow_[static_cast<int>(change.kind)];
    turn_truncated_ = true;
  }
  if (turn_events_ >= options_.max_turn_files) {
    turn_truncated_ = true;
    return;
  }
  ++turn_events_;
  if (sink_.change) sink_.change(change);
}

TurnFiles WorkspaceWatch::TakeTurn() {
  TurnFiles files;
  files.created = overflow_[static_cast<int>(ChangeKind::kCreate)];
  files.modified = overflow_[static_cast<int>(ChangeKind::kModify)];
  files.deleted = overflow_[static_cast<int>(ChangeKind::kDelete)];
  for (auto& [path, change] : turn_) {
    uint64_t& count = change.kind == ChangeKind::kCreate   ? files.created
                      : change.kind == ChangeKind::kModify ? files.modified
                                                           : files.deleted;
    ++count;
    files.files.push_back(std::move(change));
  }
  files.truncated = turn_truncated_;
  files.observed = turn_observed_;
  turn_.clear();
  turn_events_ = 0;
  overflow_[0] = overflow_[1] = overflow_[2] = 0;
  turn_truncated_ = false;
  turn_observed_ = true;
  return files;
}

}  // namespace corral::supervisor
