// ImageBuilder::RunStep: a RUN in a sandbox of the image so far, its writable layer captured.
// The build's thread posts each manager call to the event loop and waits for its answer.
#include <unistd.h>

#include <cerrno>
#include <future>
#include <memory>
#include <mutex>
#include <random>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/log.h"
#include "supervisor/commands/command.h"
#include "supervisor/images/build_cache.h"
#include "supervisor/images/image_build.h"
#include "supervisor/images/layer_capture.h"
#include "supervisor/sandboxes/sandbox_host.h"
#include "supervisor/sandboxes/sandbox_manager.h"

namespace corral::supervisor {
namespace {

constexpr size_t kTailBytes = 2048;  // of a failed RUN's output, in the error

Status Stopping() { return Status::Error("the daemon is stopping", ECANCELED); }

// Waits until `future` is ready, unless the daemon stops meanwhile (its loop may never answer).
template <typename T>
Status Ready(std::future<T>& future, const std::atomic<bool>& stopping) {
  while (future.wait_for(ImageBuilder::kStopPoll) != std::future_status::ready) {
    if (stopping) return Stopping();
  }
  return Status();
}

// Whether the build's thread still waits for a call it posted to the loop.
struct PostedCall {
  std::mutex mutex;
  bool abandoned = false;  // under mutex
};

// Calls `call` on the event loop with a callback, and waits for the callback's value. `call`
// may refer to the calling thread's locals: when the daemon stops first, that thread marks the
// call abandoned (waiting out a run of it on the loop now) and goes, and the loop, which may
// still run the handler while it drains, skips it.
template <typename T>
StatusOr<T> OnLoop(boost::asio::io_context& io, const std::atomic<bool>& stopping,
                   std::function<void(SandboxManager::Done<T>)> call) {
  auto promise = std::make_shared<std::promise<StatusOr<T>>>();
  auto future = promise->get_future();
  auto posted = std::make_shared<PostedCall>();
  boost::asio::post(io, [call = std::move(call), promise, posted] {
    std::lock_guard<std::mutex> lock(posted->mutex);
    if (posted->abandoned) return;
    call([promise](StatusOr<T> result) { promise->set_value(std::move(result)); });
  });
  if (Status ready = Ready(future, stopping); !ready.ok()) {
    std::lock_guard<std::mutex> lock(posted->mutex);
    posted->abandoned = true;
    return ready;
  }
  return future.get();
}

// Forwards a command's output to the build's log, and its outcome (the exit event's JSON).
class RunWatcher : public StreamSubscriber {
 public:
  explicit RunWatcher(const BuildLog& log) : log_(log) {}
  void OnStreamEvent(const StreamEvent& event) override {
    if (event.kind == StreamEvent::Kind::kOutput) {
      log_(event.data);
      tail_ += event.data;
      if (tail_.size() > kTailBytes) tail_.erase(0, tail_.size() - kTailBytes);
      return;
    }
    if (!done_) {
      done_ = true;
      outcome_.set_value(event.data);
    }
  }
  bool StreamFull() const override { return false; }
  std::future<std::string> Outcome() { return outcome_.get_future(); }
  const std::string& tail() const { return tail_; }  // read once the outcome is in

 private:
  const BuildLog& log_;
  std::string tail_;
  bool done_ = false;
  std::promise<std::string> outcome_;
};

std::string Random() { return ImageService::RandomWorkName(); }

// Who a RUN runs as: root until a USER names another user, then the sandbox's agent (a sandbox
// has only root and agent; USER root or 0 stays root).
std::string RunUser(const std::string& image_user) {
  const std::string user = image_user.substr(0, image_user.find(':'));
  return user.empty() || user == "root" || user == "0" ? "root" : "agent";
}

}  // namespace

StatusOr<ImageService::AddedLayer> ImageBuilder::RunStep(const Caller& caller, const BuildRequest& request,
                                                         State& state, const RecipeStep& step, const std::string& work,
                                                         const BuildLog& log) {
  const std::string key = BuildCache::StepKey(state.key, step.CanonicalText(), "");
  if (auto cached = CachedLayerOf(request, key)) {
    ++state.cached;
    log(" ---> cached " + cached->diff_id + "\n");
    state.key = key;
    return *cached;
  }
  ASSIGN_OR_RETURN(std::string image, ImageSoFar(state));
  CreateRequest create;
  create.name = kBuildSandboxPrefix + Random();
  create.image = image;
  create.limits = request.limits;
  create.start = true;
  const UserCaps caps;
  ASSIGN_OR_RETURN(SandboxRow sandbox, (OnLoop<SandboxRow>(io_, stopping_, [&](SandboxManager::Done<SandboxRow> done) {
                     manager_.Create(caller, caps, create, std::move(done));
                   })));
  auto layer = RunInSandbox(caller, sandbox, step, RunUser(state.config.user), work, log);
  auto destroyed = OnLoop<bool>(io_, stopping_, [&](SandboxManager::Done<bool> done) {
    manager_.Destroy(caller, sandbox.id, std::move(done));
  });
  if (!destroyed.ok()) {
    LogWarn("images", "destroy a build's sandbox", {{"sandbox", sandbox.id}, {"error", destroyed.status().ToString()}});
  }
  if (!layer.ok()) return layer.status();
  RETURN_IF_ERROR(BuildCache(images_.images_dir() + "/build-cache.json").Put(key, {layer->diff_id, layer->bytes}));
  log(" ---> layer " + layer->diff_id + "\n");
  state.key = key;
  return layer;
}

StatusOr<ImageService::AddedLayer> ImageBuilder::RunInSandbox(const Caller& caller, const SandboxRow& sandbox,
                                                              const RecipeStep& step, const std::string& user,
                                                              const std::string& work, const BuildLog& log) {
  ExecSpec spec;
  spec.sandbox = sandbox.id;
  spec.argv = step.argv;
  spec.env = step.env;
  spec.user = user;
  auto watcher = std::make_shared<RunWatcher>(log);
  auto outcome = watcher->Outcome();
  std::shared_ptr<Command> command;  // touched on the loop only
  const UserCaps caps;
  auto started = OnLoop<bool>(io_, stopping_, [&](SandboxManager::Done<bool> done) {
    auto made = manager_.Exec(caller, caps, spec);
    if (!made.ok()) return done(made.status());
    Status subscribed = (*made)->stream().Subscribe(watcher.get(), 0);
    if (!subscribed.ok()) return done(subscribed);
    // Unsubscribed on the loop once the exit event is in (never inside its delivery).
    command = *made;
    done(true);
  });
  if (!started.ok()) return started.status();
  if (Status ended = Ready(outcome, stopping_); !ended.ok()) {
    // The loop is gone with the command still subscribed to: the watcher must outlive it.
    new std::shared_ptr<RunWatcher>(watcher);  // NOLINT: deliberately leaked at shutdown
    return ended;
  }
  const std::string outcome_json = outcome.get();
  (void)OnLoop<bool>(io_, stopping_, [&](SandboxManager::Done<bool> done) {
    command->stream().Unsubscribe(watcher.get());
    command.reset();
    done(true);
  });
  auto parsed = nlohmann::json::parse(outcome_json, nullptr, false);
  const int exit_code = parsed.is_object() ? parsed.value("exit_code", -1) : -1;
  if (exit_code != 0) {
    const std::string how = parsed.is_object() ? parsed.value("outcome", std::string("unknown")) : "unknown";
    return Status::Error("RUN ended " + how + (exit_code >= 0 ? " with exit code " + std::to_string(exit_code) : "") +
                             "; its output ends: " + watcher->tail(),
                         ECHILD);
  }
  ASSIGN_OR_RETURN(SandboxRow stopped, (OnLoop<SandboxRow>(io_, stopping_, [&](SandboxManager::Done<SandboxRow> done) {
                     manager_.Stop(caller, sandbox.id, std::move(done));
                   })));
  const std::string dir = work + "/run-" + std::to_string(step.line) + "-" + Random();
  RETURN_IF_ERROR(MakeDirs(dir, 0700));
  const std::string tar = dir + "/layer.tar";
  // The sandbox's kernel mount points are its own, not the image's.
  ASSIGN_OR_RETURN(CaptureCounts counts, CaptureLayer(host_.SandboxLayer(sandbox.id), dir + "/mnt", tar,
                                                      stopped.uid_base, {"proc", "dev", "sys"}));
  log(" ---> captured " + std::to_string(counts.entries) + " entries (" + std::to_string(counts.whiteouts) +
      " whiteouts), " + std::to_string(counts.bytes) + " bytes\n");
  auto layer = images_.AddLayerFromTar(tar);
  (void)RemoveTree(dir);
  return layer;
}

}  // namespace corral::supervisor
