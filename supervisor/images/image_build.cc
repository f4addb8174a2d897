// ImageBuilder: the steps in order, the cache, the final image. RUN steps are build_run.cc, the
// base image (FROM, mmdebstrap) build_base.cc.
#include "supervisor/images/image_build.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <random>
#include <set>

#include "common/file_util.h"
#include "common/log.h"
#include "common/sha256.h"
#include "supervisor/images/build_cache.h"
#include "supervisor/images/context_tar.h"

namespace corral::supervisor {
namespace {

std::string RandomSuffix() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char name[17];
  snprintf(name, sizeof(name), "%016llx", static_cast<unsigned long long>(rng()));
  return name;
}

std::string StepTitle(const RecipeStep& step) {
  switch (step.kind) {
    case StepKind::kRun: {
      std::string text = "RUN";
      for (const std::string& word : step.argv) text += " " + word;
      return text;
    }
    case StepKind::kCopy:
    case StepKind::kAdd: {
      std::string text = step.kind == StepKind::kCopy ? "COPY" : "ADD";
      for (const std::string& source : step.sources) text += " " + source;
      return text + " " + step.dest;
    }
    case StepKind::kEnv: return "ENV " + step.key + "=" + step.value;
    case StepKind::kWorkdir: return "WORKDIR " + step.path;
    case StepKind::kUser: return "USER " + step.user;
  }
  return "?";
}

void SetEnv(rootfs::ImageConfig& config, const std::string& key, const std::string& value) {
  auto it = std::find_if(config.env.begin(), config.env.end(),
                         [&](const std::string& e) { return e.compare(0, key.size() + 1, key + "=") == 0; });
  if (it != config.env.end()) *it = key + "=" + value;
  else config.env.push_back(key + "=" + value);
}

}  // namespace

StatusOr<std::string> ImageBuilder::ImageSoFar(State& state) {
  if (!state.image.empty()) return state.image;
  ASSIGN_OR_RETURN(std::vector<ImageRecord> before, images_.List());
  ASSIGN_OR_RETURN(ImageRecord image, images_.AddImage(state.config, state.layers, "", false, kBuildStepSource));
  const bool existed = std::any_of(before.begin(), before.end(),
                                   [&](const ImageRecord& r) { return r.digest == image.digest; });
  if (!existed) state.made.push_back(image.digest);
  state.image = image.digest;
  return state.image;
}

// COPY and ADD: the layer of the sources, and their content hash for the key.
StatusOr<ImageService::AddedLayer> ImageBuilder::ContextStep(const BuildRequest& request, State& state,
                                                             const RecipeStep& step, const std::string& work,
                                                             const BuildLog& log) {
  std::string layer_tar, content;
  if (step.kind == StepKind::kCopy) {
    layer_tar = work + "/copy-" + std::to_string(step.line) + "-" + RandomSuffix() + ".tar";
    ASSIGN_OR_RETURN(ContextTar tar, WriteCopyTar(request.context, step, layer_tar));
    content = tar.content_hash;
  } else {
    auto path = ContextSource(request.context, step.sources[0]);
    if (!path.ok()) return Status::Error("ADD: " + path.status().message(), path.status().error_number());
    layer_tar = *path;
    ASSIGN_OR_RETURN(std::string hex, Sha256File(layer_tar));
    content = "sha256:" + hex;
  }
  const std::string key = BuildCache::StepKey(state.key, step.CanonicalText(), content);
  ImageService::AddedLayer layer;
  if (auto cached = CachedLayerOf(request, key)) {
    layer = *cached;
    ++state.cached;
    log(" ---> cached " + layer.diff_id + "\n");
  } else {
    ASSIGN_OR_RETURN(layer, images_.AddLayerFromTar(layer_tar));
    RETURN_IF_ERROR(BuildCache(images_.images_dir() + "/build-cache.json").Put(key, {layer.diff_id, layer.bytes}));
    log(" ---> layer " + layer.diff_id + "\n");
  }
  if (step.kind == StepKind::kCopy) (void)unlink(layer_tar.c_str());
  state.key = key;
  return layer;
}

std::optional<ImageService::AddedLayer> ImageBuilder::CachedLayerOf(const BuildRequest& request,
                                                                     const std::string& key) {
  if (request.no_cache) return std::nullopt;
  auto cached = BuildCache(images_.images_dir() + "/build-cache.json").Lookup(key);
  if (!cached || !images_.HasLayer(cached->diff_id)) return std::nullopt;
  return ImageService::AddedLayer{cached->diff_id, cached->bytes};
}

Status ImageBuilder::Step(const Caller& caller, const BuildRequest& request, State& state, const RecipeStep& step,
                          const std::string& work, const BuildLog& log) {
  switch (step.kind) {
    case StepKind::kEnv: SetEnv(state.config, step.key, step.value); break;
    case StepKind::kWorkdir: {
      state.config.working_dir = step.path;
      ASSIGN_OR_RETURN(std::optional<ImageService::AddedLayer> made, WorkdirLayer(state, step.path, work));
      if (made) {
        log(" ---> made " + step.path + " (layer " + made->diff_id + ")\n");
        state.layers.push_back(*made);
        state.key = BuildCache::StepKey(state.key, "layer", made->diff_id);
      }
      break;
    }
    case StepKind::kUser: state.config.user = step.user; break;
    case StepKind::kRun:
    case StepKind::kCopy:
    case StepKind::kAdd: {
      StatusOr<ImageService::AddedLayer> layer = step.kind == StepKind::kRun
                                                     ? RunStep(caller, request, state, step, work, log)
                                                     : ContextStep(request, state, step, work, log);
      if (!layer.ok()) return layer.status();
      state.layers.push_back(*layer);
      // The next step's parent is this layer: a step run again (a miss) makes a new layer, and
      // what was cached above the old one is not reused on top of it.
      state.key = BuildCache::StepKey(state.key, "layer", layer->diff_id);
      state.image.clear();
      return Status();
    }
  }
  state.key = BuildCache::StepKey(state.key, step.CanonicalText(), "");
  state.image.clear();
  return Status();
}

// Whether the layers (top first) show `path` as a directory: the first layer that has the path
// decides (a whiteout there: it is gone).
bool ImageBuilder::HasDirectory(const State& state, const std::string& path) const {
  for (auto it = state.layers.rbegin(); it != state.layers.rend(); ++it) {
    struct stat st;
    if (lstat((images_.LayerDirOf(it->diff_id) + path).c_str(), &st) != 0) continue;
    return S_ISDIR(st.st_mode);
  }
  return false;
}

StatusOr<std::optional<ImageService::AddedLayer>> ImageBuilder::WorkdirLayer(const State& state,
                                                                             const std::string& path,
                                                                             const std::string& work) {
  if (path == "/" || HasDirectory(state, path)) return std::optional<ImageService::AddedLayer>();
  const std::string tar = work + "/workdir-" + RandomSuffix() + ".tar";
  RETURN_IF_ERROR(WriteDirTar(path, tar));
  auto layer = images_.AddLayerFromTar(tar);
  (void)unlink(tar.c_str());
  if (!layer.ok()) return layer.status();
  return std::optional<ImageService::AddedLayer>(*layer);
}

StatusOr<BuildResult> ImageBuilder::Build(const Caller& caller, const BuildRequest& request, const BuildLog& log) {
  ASSIGN_OR_RETURN(Recipe recipe, ParseRecipe(request.recipe, request.build_args));
  const bool reads_context = std::any_of(recipe.steps.begin(), recipe.steps.end(), [](const RecipeStep& s) {
    return s.kind == StepKind::kCopy || s.kind == StepKind::kAdd;
  });
  struct stat st;
  if (reads_context && (request.context.empty() || request.context[0] != '/' ||
                        stat(request.context.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))) {
    return Status::Error("build: the context must be an absolute directory, got '" + request.context + "'", EINVAL);
  }
  ImageService::BuildHold hold = images_.HoldForBuild();
  const std::string work = images_.images_dir() + "/tmp/build-" + RandomSuffix();
  RETURN_IF_ERROR(MakeDirs(work, 0700));
  State state;
  auto built = Steps(caller, request, recipe, state, work, log);
  // The untagged images made for RUN sandboxes go; the final image keeps their layers.
  for (const std::string& digest : state.made) {
    if (built.ok() && digest == built->image.digest) continue;
    Status removed = images_.Remove(digest);
    if (!removed.ok()) LogWarn("images", "remove a build step's image", {{"digest", digest}, {"error", removed.ToString()}});
  }
  Status cleaned = RemoveTree(work);
  if (!cleaned.ok()) LogWarn("images", "remove a build's work directory", {{"error", cleaned.ToString()}});
  if (!built.ok()) log("build failed: " + built.status().message() + "\n");
  return built;
}

StatusOr<BuildResult> ImageBuilder::Steps(const Caller& caller, const BuildRequest& request, const Recipe& recipe,
                                          State& state, const std::string& work, const BuildLog& log) {
  const size_t total = recipe.steps.size() + 1;
  log("Step 1/" + std::to_string(total) + ": FROM " + recipe.from + "\n");
  RETURN_IF_ERROR(From(recipe.from, state, work, log));
  for (size_t i = 0; i < recipe.steps.size(); ++i) {
    const RecipeStep& step = recipe.steps[i];
    log("Step " + std::to_string(i + 2) + "/" + std::to_string(total) + ": " + StepTitle(step) + "\n");
    Status done = Step(caller, request, state, step, work, log);
    if (!done.ok()) return Status::Error("step " + std::to_string(i + 2) + " (recipe line " + std::to_string(step.line) +
                                             "): " + done.message(),
                                         done.error_number());
  }
  BuildResult result;
  ASSIGN_OR_RETURN(result.image, images_.AddImage(state.config, state.layers, request.name, request.force, "build"));
  result.steps = static_cast<int>(total);
  result.cached = state.cached;
  log("built " + result.image.digest + (request.name.empty() ? "" : " as " + request.name) + " (" +
      std::to_string(state.cached) + " of " + std::to_string(total - 1) + " steps cached)\n");
  return result;
}

}  // namespace corral::supervisor
