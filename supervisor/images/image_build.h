// ImageBuilder: `corral image build`, a recipe (recipe.h) executed into an image (issue 18).
//
// FROM: the base image by name or digest; `scratch` (no layers); `debian:bookworm` when no image
// has that name is made first by `mmdebstrap --variant=minbase bookworm` from the host's apt
// sources (the host's network and mirror: the operator's, like a pull), imported as one layer and
// tagged debian:bookworm.
//
// Each step, in order, with the build cache (build_cache.h) keyed by (parent key, step):
//  - RUN: a sandbox of the image so far (an untagged image is recorded for it first), created
//    through the SandboxManager as the build's caller with the request's limits (unset: the
//    daemon's defaults) and the daemon's default egress rules: a RUN reaches what any sandbox
//    may, never the host's network. The command runs as root (uid 0 inside), with the ENVs in the
//    image's config, the ARGs in its environment and the WORKDIR as cwd; its output goes to the
//    log. Exit 0: the sandbox is stopped, its writable layer captured (layer_capture.h, ids
//    shifted back to the image's) and unpacked as a layer; the sandbox is destroyed either way.
//    Any other end fails the build with the exit code and the output's tail (the last lines are
//    in the log).
//  - COPY: a tar of the context's sources (context_tar.h), no sandbox. ADD: the archive itself.
//  - ENV, WORKDIR, USER: the config. A sandbox has two users, root and agent: RUN steps run as
//    root until a USER names another user (then as agent), and commands in sandboxes of the image
//    that name no user run as root when its USER is root (or 0), else as agent. A WORKDIR the
//    image lacks is made, as Docker's: a small layer with the directory (root's, 0755).
// At the end the image (config + layers) is recorded and named; the untagged images the build
// recorded for its RUN sandboxes are removed again (their layers are the final image's). On any
// failure no image is named and nothing half-made is left: layers unpacked without a record are
// strays that Prune takes (it does not while a build holds them).
//
// Build() blocks for the whole build: call it on a thread of its own, never on the event loop,
// which it waits for (the sandbox calls are posted there).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "common/status.h"
#include "isolation/resource_limits.h"
#include "supervisor/images/image_service.h"
#include "supervisor/images/recipe.h"
#include "supervisor/sandboxes/sandbox_types.h"
#include "supervisor/store/store.h"

namespace corral::supervisor {

class SandboxManager;
class SandboxHost;

// The name of every RUN step's sandbox starts with this.
inline constexpr char kBuildSandboxPrefix[] = "image-build-";
// The source of the untagged images a build records for its RUN sandboxes.
inline constexpr char kBuildStepSource[] = "build step";

struct BuildRequest {
  std::string recipe;                             // the recipe's text
  std::string context;                            // absolute: the directory COPY and ADD read from
  std::string name;                               // "name:tag" to give the image; "": none
  std::map<std::string, std::string> build_args;  // --build-arg
  bool force = false;                             // move `name` if it names another image
  bool no_cache = false;                          // run every step (the new layers are cached)
  isolation::ResourceLimits limits;               // of each RUN's sandbox; unset: the defaults
};

// The build's log: called from the build's thread and the event loop, never at once.
using BuildLog = std::function<void(std::string_view text)>;

struct BuildResult {
  ImageRecord image;
  int steps = 0;        // steps executed (metadata steps included)
  int cached = 0;       // steps whose layer came from the cache
};

class ImageBuilder {
 public:
  ImageBuilder(boost::asio::io_context& io, SandboxManager& manager, SandboxHost& host, ImageService& images)
      : io_(io), manager_(manager), host_(host), images_(images) {}

  // Runs the build as `caller` (whose sandboxes the RUN steps are). Errors: EINVAL for a bad
  // recipe or context, ENOENT for a missing base or source, ECHILD for a RUN that failed (the
  // message names the step, its exit code and its output's tail), others as the parts say.
  StatusOr<BuildResult> Build(const Caller& caller, const BuildRequest& request, const BuildLog& log);
  // The daemon is stopping (its loop no longer runs): a build waiting for the loop or a RUN's end
  // gives up (ECANCELED) within kStopPoll, cleans up what it can and ends; the RUN's sandbox is
  // left to the next daemon's ImageBuilds::Recover.
  void Stop() { stopping_ = true; }
  static constexpr std::chrono::milliseconds kStopPoll{100};

 private:
  // The state of one build between its steps.
  struct State {
    rootfs::ImageConfig config;
    std::vector<ImageService::AddedLayer> layers;  // bottom first
    std::string key;                // the build cache key of the steps so far
    std::string image;              // the digest of the state as a recorded image; "": not one yet
    std::vector<std::string> made;  // untagged images this build recorded (for RUN sandboxes)
    int cached = 0;                 // steps whose layer came from the cache
  };
  StatusOr<ImageService::AddedLayer> RunStep(const Caller& caller, const BuildRequest& request, State& state,
                                            const RecipeStep& step, const std::string& work, const BuildLog& log);
  // Runs `step` as `user` ("root" or "agent") in `sandbox`; its writable layer becomes the layer.
  StatusOr<ImageService::AddedLayer> RunInSandbox(const Caller& caller, const SandboxRow& sandbox,
                                                 const RecipeStep& step, const std::string& user,
                                                 const std::string& work, const BuildLog& log);
  StatusOr<BuildResult> Steps(const Caller& caller, const BuildRequest& request, const Recipe& recipe, State& state,
                              const std::string& work, const BuildLog& log);
  Status Step(const Caller& caller, const BuildRequest& request, State& state, const RecipeStep& step,
              const std::string& work, const BuildLog& log);
  StatusOr<ImageService::AddedLayer> ContextStep(const BuildRequest& request, State& state, const RecipeStep& step,
                                                const std::string& work, const BuildLog& log);
  std::optional<ImageService::AddedLayer> CachedLayerOf(const BuildRequest& request, const std::string& key);
  // WORKDIR: a layer with the directory when the image so far lacks it (none when it has it).
  bool HasDirectory(const State& state, const std::string& path) const;
  StatusOr<std::optional<ImageService::AddedLayer>> WorkdirLayer(const State& state, const std::string& path,
                                                                 const std::string& work);
  // The image of the state so far, recorded untagged if it is not one yet.
  StatusOr<std::string> ImageSoFar(State& state);
  // build_base.cc: the base image's layers and config into `state`.
  Status From(const std::string& from, State& state, const std::string& work, const BuildLog& log);
  StatusOr<ImageRecord> Bookworm(const std::string& work, const BuildLog& log);

  boost::asio::io_context& io_;
  SandboxManager& manager_;
  SandboxHost& host_;
  ImageService& images_;
  std::atomic<bool> stopping_{false};
};

}  // namespace corral::supervisor
