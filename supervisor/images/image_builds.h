// ImageBuilds: the daemon's image builds in progress and recently ended, each on a thread of its
// own (ImageBuilder::Build blocks for the whole build), with its log for clients to follow.
//
// A build is started and answered at once with its id ("bld_<hex>"); clients read its state and
// its log from an offset (`after`) until it ends: a streamed log that survives the client going
// away, and any number of readers. The log keeps its last kMaxLogBytes (older text is dropped,
// and offsets keep counting). At most kMaxRunning builds run at once (EBUSY beyond); the last
// kKeptBuilds that ended are kept for their readers, in memory only (a daemon restart forgets
// them). A build interrupted by a restart leaves no image: Recover, at the daemon's start,
// destroys the sandboxes its RUN steps had (named kSandboxPrefix..., of the admin caller) and
// removes the untagged step images no sandbox uses.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "supervisor/images/image_build.h"

namespace corral::supervisor {

struct BuildStatus {
  std::string id;
  std::string state;        // "running" | "succeeded" | "failed"
  std::string log;          // the log from max(after, log_start)
  uint64_t log_start = 0;   // the offset of the oldest byte kept
  uint64_t next = 0;        // the offset after the last byte: the next read's `after`
  std::optional<BuildResult> result;  // succeeded
  Status error;             // failed
  int64_t started_at = 0;
  int64_t ended_at = 0;
};

class ImageBuilds {
 public:
  static constexpr size_t kMaxRunning = 2;
  static constexpr size_t kKeptBuilds = 32;
  static constexpr size_t kMaxLogBytes = 1 << 20;

  ImageBuilds(boost::asio::io_context& io, SandboxManager& manager, SandboxHost& host, ImageService& images)
      : manager_(manager), images_(images), builder_(io, manager, host, images) {}

  // Stops the builds that run (ImageBuilder::Stop) and waits up to kStopWait for them to end.
  ~ImageBuilds();
  static constexpr std::chrono::seconds kStopWait{30};

  // At the daemon's start, after the manager's recovery and before the loop runs: what builds
  // the previous daemon was running left (above). `admin_issuer`: the iss of the admin socket's
  // caller, whose sandboxes builds make. Destroys are posted; errors are logged.
  void Recover(const std::string& admin_issuer);
  // A new ImageBuilds, Recover done.
  static std::unique_ptr<ImageBuilds> Recovered(boost::asio::io_context& io, SandboxManager& manager, SandboxHost& host,
                                                ImageService& images, const std::string& admin_issuer) {
    auto builds = std::make_unique<ImageBuilds>(io, manager, host, images);
    builds->Recover(admin_issuer);
    return builds;
  }

  // Starts a build as `caller`; its id. EINVAL for a recipe that does not parse (checked before
  // anything runs), EBUSY when kMaxRunning builds run.
  StatusOr<std::string> Start(const Caller& caller, BuildRequest request);
  // The build's state and its log from offset `after`. ENOENT: no such build (or forgotten).
  StatusOr<BuildStatus> Get(const std::string& id, uint64_t after);

 private:
  struct Build;
  void RemoveStepImages();
  void Finish(const std::shared_ptr<Build>& build, StatusOr<BuildResult> result);

  SandboxManager& manager_;
  ImageService& images_;
  ImageBuilder builder_;
  std::mutex mu_;
  std::condition_variable ended_cv_;  // running_ went down
  std::map<std::string, std::shared_ptr<Build>> builds_;
  std::deque<std::string> ended_;  // ids of ended builds, oldest first
  size_t running_ = 0;
};

}  // namespace corral::supervisor
