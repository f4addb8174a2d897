// ImageService's part of image builds: layers from tars, images from layers and a config.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <map>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/log.h"
#include "common/sha256.h"
#include "rootfs/image_ref.h"
#include "rootfs/layer_unpack.h"
#include "supervisor/images/image_service.h"

namespace corral::supervisor {

bool ImageService::HasLayer(const std::string& diff_id) const {
  if (!rootfs::IsDigest(diff_id)) return false;
  struct stat st;
  return lstat(LayerDir(diff_id).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

StatusOr<ImageService::AddedLayer> ImageService::AddLayerFromTar(const std::string& tar_path) {
  const std::string work = images_dir_ + "/tmp/" + RandomWorkName();
  RETURN_IF_ERROR(MakeDirs(work, 0700));
  rootfs::UnpackLimits limits;
  limits.max_bytes = config_.max_size;
  auto unpacked = rootfs::UnpackLayer(tar_path, work + "/layer", {}, limits);
  StatusOr<AddedLayer> added = Status::Error("not unpacked");
  if (!unpacked.ok()) {
    added = unpacked.status().error_number() == EFBIG || unpacked.status().error_number() == EIO
                ? unpacked.status()
                : Status::Error(unpacked.status().message(), EINVAL);
  } else {
    added = AddedLayer{unpacked->diff_id, unpacked->unpacked_bytes};
    const std::string dest = LayerDir(unpacked->diff_id);
    if (!HasLayer(unpacked->diff_id) && rename((work + "/layer").c_str(), dest.c_str()) != 0 && errno != EEXIST &&
        errno != ENOTEMPTY) {
      added = ErrnoError("move a built layer to " + dest);
    }
  }
  Status cleaned = RemoveTree(work);
  if (!cleaned.ok()) LogWarn("images", "cannot remove a build's work directory", {{"error", cleaned.ToString()}});
  return added;
}

namespace {

// The image's OCI config (image-spec config.md), without a creation time: its digest is the id.
std::string ConfigJson(const rootfs::ImageConfig& config, const std::vector<std::string>& diff_ids) {
  nlohmann::json inner = nlohmann::json::object();
  if (!config.env.empty()) inner["Env"] = config.env;
  if (!config.working_dir.empty()) inner["WorkingDir"] = config.working_dir;
  if (!config.user.empty()) inner["User"] = config.user;
  nlohmann::json json = {
      {"architecture", config.architecture.empty() ? "amd64" : config.architecture},
      {"os", "linux"},
      {"config", inner},
      {"rootfs", {{"type", "layers"}, {"diff_ids", diff_ids}}},
  };
  return json.dump();
}

}  // namespace

StatusOr<ImageRecord> ImageService::AddImage(const rootfs::ImageConfig& config, const std::vector<AddedLayer>& layers,
                                             const std::string& name, bool force, const std::string& source) {
  std::string canonical;
  if (!name.empty()) {
    ASSIGN_OR_RETURN(canonical, CanonicalName(name));
  }
  ImageRow image;
  image.config = config;
  if (image.config.os.empty()) image.config.os = "linux";
  if (image.config.architecture.empty()) image.config.architecture = "amd64";
  for (const AddedLayer& layer : layers) image.layers.push_back(layer.diff_id);
  image.digest = "sha256:" + Sha256Hex(ConfigJson(image.config, image.layers));
  image.created_at = time(nullptr);
  image.source = source;
  BusyMark busy(*this);
  if (!canonical.empty()) {
    RETURN_IF_ERROR(CheckTagFree(canonical, force, image.digest));
    RETURN_IF_ERROR(busy.Add("name " + canonical, "image " + canonical));
  }
  RETURN_IF_ERROR(busy.Add("image " + image.digest, "image " + image.digest));
  ASSIGN_OR_RETURN(std::optional<ImageRecord> existing, Existing(image.digest, canonical, force));
  if (existing) return *existing;
  ASSIGN_OR_RETURN(auto known, KnownLayers());
  std::vector<LayerRow> new_layers;
  uint64_t total = 0;
  for (const AddedLayer& layer : layers) {
    if (!HasLayer(layer.diff_id)) return Status::Error("layer " + layer.diff_id + " is not on this host", ENOENT);
    auto it = known.find(layer.diff_id);
    total += it != known.end() ? static_cast<uint64_t>(it->second) : layer.bytes;
    if (it == known.end()) {
      known[layer.diff_id] = static_cast<int64_t>(layer.bytes);
      new_layers.push_back({layer.diff_id, static_cast<int64_t>(layer.bytes), image.created_at});
    }
  }
  if (total > config_.max_size) {
    return Status::Error("image " + image.digest + " unpacks to " + std::to_string(total) +
                             " bytes, more than images.max_size (" + std::to_string(config_.max_size) + ")",
                         EFBIG);
  }
  image.bytes = static_cast<int64_t>(total);
  RETURN_IF_ERROR(store_.InsertImage(image, new_layers, canonical, force));
  LogInfo("images", "image added", {{"digest", image.digest}, {"name", canonical}, {"source", source},
                                    {"layers", std::to_string(image.layers.size())}, {"bytes", std::to_string(total)}});
  return Get(image.digest);
}

ImageService::BuildHold ImageService::HoldForBuild() {
  const std::string key = "build " + RandomWorkName();
  {
    std::lock_guard lock(busy_mu_);
    busy_.insert(key);
  }
  return BuildHold(static_cast<void*>(this), [this, key](void*) {
    std::lock_guard lock(busy_mu_);
    busy_.erase(key);
  });
}

}  // namespace corral::supervisor
