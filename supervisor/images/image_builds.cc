#include "supervisor/images/image_builds.h"

#include <cerrno>
#include <ctime>
#include <random>
#include <thread>

#include "common/log.h"
#include "supervisor/sandboxes/sandbox_manager.h"

namespace corral::supervisor {

struct ImageBuilds::Build {
  std::string id;
  std::string state = "running";
  std::string log;
  uint64_t log_start = 0;
  std::optional<BuildResult> result;
  Status error;
  int64_t started_at = 0;
  int64_t ended_at = 0;
};

ImageBuilds::~ImageBuilds() {
  builder_.Stop();
  std::unique_lock lock(mu_);
  if (!ended_cv_.wait_for(lock, kStopWait, [this] { return running_ == 0; })) {
    LogWarn("images", "image builds did not stop in time", {{"running", std::to_string(running_)}});
  }
}

void ImageBuilds::Recover(const std::string& admin_issuer) {
  Caller admin;
  admin.admin = true;
  auto rows = manager_.List(admin);
  if (!rows.ok()) {
    LogWarn("images", "list the sandboxes of interrupted builds", {{"error", rows.status().ToString()}});
    return;
  }
  for (const SandboxRow& row : *rows) {
    if (row.iss != admin_issuer || row.name.rfind(kBuildSandboxPrefix, 0) != 0) continue;
    LogInfo("images", "destroying the sandbox of an interrupted build", {{"sandbox", row.id}});
    manager_.Destroy(admin, row.id, [this, id = row.id](StatusOr<bool> destroyed) {
      if (!destroyed.ok()) {
        LogWarn("images", "destroy the sandbox of an interrupted build",
                {{"sandbox", id}, {"error", destroyed.status().ToString()}});
        return;
      }
      RemoveStepImages();
    });
  }
  RemoveStepImages();
}

void ImageBuilds::RemoveStepImages() {
  {
    std::lock_guard lock(mu_);
    if (running_ > 0) return;  // a build's step image may be about to get its sandbox
  }
  auto images = images_.List();
  if (!images.ok()) return;
  for (const ImageRecord& image : *images) {
    if (image.source != kBuildStepSource || !image.names.empty()) continue;
    // A running build's step image is in use by its sandbox: refused (EBUSY) and kept.
    if (images_.Remove(image.digest).ok()) LogInfo("images", "removed an interrupted build's step image", {{"digest", image.digest}});
  }
}

StatusOr<std::string> ImageBuilds::Start(const Caller& caller, BuildRequest request) {
  auto parsed = ParseRecipe(request.recipe, request.build_args);
  if (!parsed.ok()) return parsed.status();
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char id[21];
  snprintf(id, sizeof(id), "bld_%016llx", static_cast<unsigned long long>(rng()));
  auto build = std::make_shared<Build>();
  build->id = id;
  build->started_at = time(nullptr);
  {
    std::lock_guard lock(mu_);
    if (running_ >= kMaxRunning) {
      return Status::Error(std::to_string(running_) + " image builds are running; start this one when one ends", EBUSY);
    }
    ++running_;
    builds_[build->id] = build;
  }
  LogInfo("images", "build started", {{"build", build->id}, {"name", request.name}, {"context", request.context}});
  // A thread of its own: the build blocks on the event loop's answers for minutes.
  std::thread([this, build, caller, request = std::move(request)] {
    auto log = [this, build](std::string_view text) {
      std::lock_guard lock(mu_);
      build->log.append(text);
      if (build->log.size() > kMaxLogBytes) {
        const size_t drop = build->log.size() - kMaxLogBytes;
        build->log.erase(0, drop);
        build->log_start += drop;
      }
    };
    Finish(build, builder_.Build(caller, request, log));
  }).detach();
  return build->id;
}

void ImageBuilds::Finish(const std::shared_ptr<Build>& build, StatusOr<BuildResult> result) {
  std::lock_guard lock(mu_);
  build->ended_at = time(nullptr);
  if (result.ok()) {
    build->state = "succeeded";
    build->result = std::move(*result);
    LogInfo("images", "build succeeded", {{"build", build->id}, {"digest", build->result->image.digest}});
  } else {
    build->state = "failed";
    build->error = result.status();
    LogWarn("images", "build failed", {{"build", build->id}, {"error", result.status().ToString()}});
  }
  --running_;
  ended_cv_.notify_all();
  ended_.push_back(build->id);
  while (ended_.size() > kKeptBuilds) {
    builds_.erase(ended_.front());
    ended_.pop_front();
  }
}

StatusOr<BuildStatus> ImageBuilds::Get(const std::string& id, uint64_t after) {
  std::lock_guard lock(mu_);
  auto it = builds_.find(id);
  if (it == builds_.end()) return Status::Error("no image build " + id, ENOENT);
  const Build& build = *it->second;
  BuildStatus status;
  status.id = build.id;
  status.state = build.state;
  status.log_start = build.log_start;
  status.next = build.log_start + build.log.size();
  const uint64_t from = std::max(after, build.log_start);
  if (from < status.next) status.log = build.log.substr(from - build.log_start);
  // A character cut by the last write waits for its end: the reply is UTF-8 text.
  size_t lead = status.log.size();
  for (size_t back = 1; back <= 3 && back <= status.log.size(); ++back) {
    const auto byte = static_cast<unsigned char>(status.log[status.log.size() - back]);
    if ((byte & 0xC0) == 0x80) continue;  // a continuation byte
    const size_t need = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1;
    if (need > back) lead = status.log.size() - back;
    break;
  }
  status.next -= status.log.size() - lead;
  status.log.resize(lead);
  status.result = build.result;
  status.error = build.error;
  status.started_at = build.started_at;
  status.ended_at = build.ended_at;
  return status;
}

}  // namespace corral::supervisor
