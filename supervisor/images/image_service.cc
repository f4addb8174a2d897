// ImageService: the catalog (list, get, tag, remove, prune, resolve) and imports. Pulls are
// image_pull.cc.
#include "supervisor/images/image_service.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <ctime>
#include <map>
#include <random>

#include "common/file_util.h"
#include "common/log.h"
#include "rootfs/image_ref.h"
#include "rootfs/layer_unpack.h"
#include "rootfs/mount_plan.h"
#include "supervisor/images/build_cache.h"

namespace corral::supervisor {
namespace {

constexpr size_t kDigestPrefix = 7;  // "sha256:"

std::string Hex(const std::string& digest) { return digest.substr(kDigestPrefix); }

// An error of the archive or a layer: bad input unless it says otherwise.
Status BadInput(const Status& status) {
  if (status.error_number() != 0 && status.error_number() != ENOENT) return status;
  return Status::Error(status.message(), EINVAL);
}

std::string RandomName() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char name[17];
  snprintf(name, sizeof(name), "%016llx", static_cast<unsigned long long>(rng()));
  return name;
}

}  // namespace

std::string ImageService::RandomWorkName() { return RandomName(); }

namespace {

ImageRecord RecordOf(const ImageRow& row) {
  ImageRecord record{row.digest, row.names, row.config, row.layers, static_cast<uint64_t>(row.bytes),
                     {}, row.created_at, row.source};
  for (int64_t bytes : row.layer_bytes) record.layer_bytes.push_back(static_cast<uint64_t>(bytes));
  return record;
}

}  // namespace

ImageService::BusyMark::~BusyMark() {
  std::lock_guard lock(service_.busy_mu_);
  for (const std::string& key : keys_) service_.busy_.erase(key);
}

Status ImageService::BusyMark::Add(const std::string& key, const std::string& what) {
  std::lock_guard lock(service_.busy_mu_);
  if (!service_.busy_.insert(key).second) {
    return Status::Error(what + " is being imported or pulled already; try again when that ends", EBUSY);
  }
  keys_.push_back(key);
  return Status();
}

ImageService::ImageService(Store& store, std::string images_dir, ImagesConfig config)
    : store_(store), images_dir_(std::move(images_dir)), config_(std::move(config)) {}

std::string ImageService::LayerDir(const std::string& diff_id) const {
  return images_dir_ + "/layers/" + Hex(diff_id);
}

Status ImageService::Init() {
  for (const std::string& dir : {images_dir_, images_dir_ + "/layers", images_dir_ + "/tmp"}) {
    RETURN_IF_ERROR(MakeDirs(dir, 0700));
    if (chmod(dir.c_str(), 0700) != 0) return ErrnoError("chmod " + dir);
  }
  // Whatever is in tmp/ is what an interrupted import or pull left.
  DIR* tmp = opendir((images_dir_ + "/tmp").c_str());
  if (tmp == nullptr) return ErrnoError("open " + images_dir_ + "/tmp");
  std::vector<std::string> leftovers;
  while (dirent* entry = readdir(tmp)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") leftovers.push_back(name);
  }
  closedir(tmp);
  for (const std::string& name : leftovers) {
    Status removed = RemoveTree(images_dir_ + "/tmp/" + name);
    if (!removed.ok()) LogWarn("images", "cannot remove a leftover import", {{"error", removed.ToString()}});
  }
  // And the layers it had moved into place but not recorded: no import runs yet.
  auto strays = RemoveStrayLayers();
  if (!strays.ok()) return strays.status();
  if (*strays > 0) LogInfo("images", "removed layers an interrupted import left", {{"layers", std::to_string(*strays)}});
  return Status();
}

StatusOr<std::vector<ImageRecord>> ImageService::List() {
  ASSIGN_OR_RETURN(std::vector<ImageRow> rows, store_.ListImages());
  std::vector<ImageRecord> records;
  for (const ImageRow& row : rows) records.push_back(RecordOf(row));
  return records;
}

StatusOr<std::string> ImageService::DigestOf(const std::string& name_or_digest) {
  if (rootfs::IsDigest(name_or_digest)) return name_or_digest;
  auto ref = rootfs::ParseImageRef(name_or_digest);
  if (!ref.ok()) return Status::Error("image " + name_or_digest + ": " + ref.status().message(), EINVAL);
  ASSIGN_OR_RETURN(std::optional<std::string> digest, store_.ImageOfTag(ref->Name()));
  if (!digest) return Status::Error("no image named " + ref->Name(), ENOENT);
  return *digest;
}

StatusOr<ImageRecord> ImageService::Get(const std::string& name_or_digest) {
  ASSIGN_OR_RETURN(std::string digest, DigestOf(name_or_digest));
  ASSIGN_OR_RETURN(std::optional<ImageRow> row, store_.GetImage(digest));
  if (!row) return Status::Error("no image " + name_or_digest, ENOENT);
  return RecordOf(*row);
}

StatusOr<ImageRecord> ImageService::Tag(const std::string& name_or_digest, const std::string& name, bool force) {
  ASSIGN_OR_RETURN(std::string canonical, CanonicalName(name));
  ASSIGN_OR_RETURN(std::string digest, DigestOf(name_or_digest));
  RETURN_IF_ERROR(store_.SetImageTag(canonical, digest, force));
  return Get(digest);
}

Status ImageService::Remove(const std::string& name_or_digest) {
  ASSIGN_OR_RETURN(std::string digest, DigestOf(name_or_digest));
  return store_.DeleteImage(digest);
}

StatusOr<ResolvedImage> ImageService::Resolve(const std::string& name_or_digest) {
  ASSIGN_OR_RETURN(ImageRecord image, Get(name_or_digest));
  ResolvedImage resolved;
  resolved.digest = image.digest;
  if (!rootfs::IsDigest(name_or_digest)) resolved.name = rootfs::ParseImageRef(name_or_digest)->Name();
  for (auto it = image.layers.rbegin(); it != image.layers.rend(); ++it) resolved.layer_dirs.push_back(LayerDir(*it));
  for (const std::string& diff_id : image.layers) {
    if (!HasLayerDir(diff_id)) {
      // In a fleet: another node imported or pulled it, this one not (yet).
      return Status::Error("image " + image.digest + " is not on this host (its layer " + diff_id +
                               " is missing): import or pull it here, as on every node of a fleet",
                           EAGAIN);
    }
  }
  resolved.config = image.config;
  return resolved;
}

StatusOr<rootfs::ImageConfig> ImageService::ConfigOf(const std::string& digest) {
  {
    std::lock_guard lock(configs_mu_);
    if (auto it = configs_.find(digest); it != configs_.end()) return it->second;
  }
  ASSIGN_OR_RETURN(std::optional<ImageRow> row, store_.GetImage(digest));
  if (!row) return Status::Error("no image " + digest, ENOENT);
  std::lock_guard lock(configs_mu_);
  configs_[digest] = row->config;
  return row->config;
}

StatusOr<uint64_t> ImageService::RemoveStrayLayers() {
  std::set<std::string> known;
  ASSIGN_OR_RETURN(std::vector<LayerRow> rows, store_.ListLayers());
  for (const LayerRow& layer : rows) known.insert(Hex(layer.diff_id));
  DIR* dir = opendir((images_dir_ + "/layers").c_str());
  if (dir == nullptr) return ErrnoError("open " + images_dir_ + "/layers");
  std::vector<std::string> strays;
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != ".." && known.count(name) == 0) strays.push_back(name);
  }
  closedir(dir);
  for (const std::string& name : strays) RETURN_IF_ERROR(RemoveTree(images_dir_ + "/layers/" + name));
  return static_cast<uint64_t>(strays.size());
}

StatusOr<PruneReport> ImageService::Prune() {
  PruneReport report;
  // Held throughout: no import, pull or build starts or moves a layer into place meanwhile.
  std::lock_guard lock(busy_mu_);
  if (!busy_.empty()) return Status::Error("an import, pull or build is running; prune when it ends", EBUSY);
  ASSIGN_OR_RETURN(std::vector<LayerRow> unused, store_.DeleteUnusedLayers());
  for (const LayerRow& layer : unused) {
    RETURN_IF_ERROR(RemoveTree(LayerDir(layer.diff_id)));
    ++report.layers;
    report.bytes += static_cast<uint64_t>(layer.bytes);
  }
  ASSIGN_OR_RETURN(uint64_t strays, RemoveStrayLayers());
  report.layers += strays;
  // The build cache's entries of the layers gone (the store's records: what is left).
  auto dropped = BuildCache(images_dir() + "/build-cache.json").Retain([this](const std::string& diff_id) {
    return HasLayer(diff_id);
  });
  if (!dropped.ok()) LogWarn("images", "cannot prune the build cache", {{"error", dropped.status().ToString()}});
  return report;
}

// ---------------------------------------------------------------------------------------------
// Import

StatusOr<ImageRecord> ImageService::Import(const ImportRequest& request) {
  if (request.path.empty() || request.path[0] != '/') {
    return Status::Error("import: the path must be absolute, got '" + request.path + "'", EINVAL);
  }
  struct stat st;
  if (stat(request.path.c_str(), &st) != 0) return Status::Error("import: " + request.path + ": no such file", ENOENT);
  std::string name;
  BusyMark busy(*this);
  if (!request.name.empty()) {
    ASSIGN_OR_RETURN(name, CanonicalName(request.name));
    RETURN_IF_ERROR(CheckTagFree(name, request.force, ""));
    RETURN_IF_ERROR(busy.Add("name " + name, "image " + name));
  }
  const std::string work = images_dir_ + "/tmp/" + RandomWorkName();
  RETURN_IF_ERROR(MakeDirs(work, 0700));
  auto imported = ImportArchive(request.path, work, request.select, name, request.force, "import", busy);
  Status cleaned = RemoveTree(work);
  if (!cleaned.ok()) LogWarn("images", "cannot remove an import's work directory", {{"error", cleaned.ToString()}});
  return imported;
}

StatusOr<std::string> ImageService::CanonicalName(const std::string& name) {
  auto ref = rootfs::ParseImageRef(name);
  if (!ref.ok()) return Status::Error("image name " + name + ": " + ref.status().message(), EINVAL);
  if (!ref->digest.empty()) return Status::Error("image name " + name + ": a name takes no digest", EINVAL);
  if (ref->registry.empty() && ref->name.rfind("builds/", 0) == 0) {
    // GET /v1/images/builds/{id} is a build's state: an image of that name could not be read.
    return Status::Error("image name " + name + ": \"builds/\" is reserved (GET /v1/images/builds/{id} is a build's)",
                         EINVAL);
  }
  return ref->Name();
}

StatusOr<std::optional<ImageRecord>> ImageService::Existing(const std::string& digest, const std::string& name,
                                                             bool force) {
  ASSIGN_OR_RETURN(std::optional<ImageRow> existing, store_.GetImage(digest));
  if (!existing) return std::optional<ImageRecord>();
  // In a fleet the catalog is every node's and the layers each node's own: an image another
  // node has, whose layers this one lacks, is imported here as if new (its record is kept).
  for (const std::string& diff_id : existing->layers) {
    if (!HasLayerDir(diff_id)) return std::optional<ImageRecord>();
  }
  // The same image again: only its name is new.
  if (!name.empty()) RETURN_IF_ERROR(store_.SetImageTag(name, digest, force));
  ASSIGN_OR_RETURN(ImageRecord record, Get(digest));
  return std::optional<ImageRecord>(std::move(record));
}

StatusOr<std::map<std::string, int64_t>> ImageService::KnownLayers() {
  ASSIGN_OR_RETURN(std::vector<LayerRow> rows, store_.ListLayers());
  std::map<std::string, int64_t> known;
  for (const LayerRow& row : rows) {
    if (HasLayerDir(row.diff_id)) known[row.diff_id] = row.bytes;  // recorded, and on this host
  }
  return known;
}

bool ImageService::HereWhole(const std::string& digest) {
  StatusOr<std::optional<ImageRow>> image = store_.GetImage(digest);
  if (!image.ok() || !image->has_value()) return true;  // nothing to import it for: taken
  for (const std::string& diff_id : (*image)->layers) {
    if (!HasLayerDir(diff_id)) return false;
  }
  return true;
}

bool ImageService::HasLayerDir(const std::string& diff_id) const {
  struct stat st;
  return lstat(LayerDir(diff_id).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Status ImageService::CheckTagFree(const std::string& name, bool force, const std::string& digest) {
  ASSIGN_OR_RETURN(std::optional<std::string> current, store_.ImageOfTag(name));
  // Before the archive is read (no digest yet), a name whose image another node of the fleet has
  // and this one lacks is not taken here: importing it again is how a node gets it (the check
  // with the archive's digest then says whether it is the same image).
  if (current && digest.empty() && !force && !HereWhole(*current)) return Status();
  if (current && !force && *current != digest) {
    return Status::Error("image name " + name + " already names " + *current + " (force to move it)", EEXIST);
  }
  return Status();
}

StatusOr<ImageRecord> ImageService::ImportArchive(const std::string& path, const std::string& work,
                                                  const std::string& select, const std::string& name, bool force,
                                                  const std::string& source, BusyMark& busy) {
  rootfs::ArchiveLimits limits;
  limits.max_bytes = config_.max_size;
  limits.max_layers = static_cast<size_t>(std::min<uint64_t>(config_.max_layers, rootfs::kMaxImageLayers));
  auto opened = rootfs::OpenImageArchive(path, work + "/archive", limits, select);
  if (!opened.ok()) return BadInput(opened.status());
  const rootfs::ImageArchive& archive = *opened;
  if (!archive.config.os.empty() && archive.config.os != "linux") {
    return Status::Error("image " + archive.config_digest + " is for " + archive.config.os + ", not linux", EINVAL);
  }
  RETURN_IF_ERROR(busy.Add("image " + archive.config_digest, "image " + archive.config_digest));
  if (!name.empty()) RETURN_IF_ERROR(CheckTagFree(name, force, archive.config_digest));
  ASSIGN_OR_RETURN(std::optional<ImageRecord> existing, Existing(archive.config_digest, name, force));
  if (existing) return *existing;
  ASSIGN_OR_RETURN(auto known, KnownLayers());

  ImageRow image;
  image.digest = archive.config_digest;
  image.config = archive.config;
  image.created_at = time(nullptr);
  image.source = source;
  std::vector<LayerRow> new_layers;
  std::vector<std::string> made;  // directories this import moved into place
  auto undo = [&](Status status) {
    for (const std::string& dir : made) (void)RemoveTree(dir);
    return status;
  };
  uint64_t total = 0;
  for (const rootfs::ArchiveLayer& layer : archive.layers) {
    image.layers.push_back(layer.diff_id);
    if (auto it = known.find(layer.diff_id); it != known.end()) {
      total += static_cast<uint64_t>(it->second);
      continue;
    }
    if (std::find_if(new_layers.begin(), new_layers.end(),
                     [&](const LayerRow& row) { return row.diff_id == layer.diff_id; }) != new_layers.end()) {
      continue;  // the same layer twice in one image
    }
    Status marked = busy.Add("layer " + layer.diff_id, "layer " + layer.diff_id);
    if (!marked.ok()) return undo(marked);
    const std::string dest = LayerDir(layer.diff_id);
    // A directory without a record is what a crash left between unpacking and recording.
    Status stale = RemoveTree(dest);
    if (!stale.ok()) return undo(stale);
    rootfs::UnpackLimits unpack_limits;
    unpack_limits.max_bytes = total < config_.max_size ? config_.max_size - total : 0;
    auto unpacked = rootfs::UnpackLayer(layer.blob_path, dest, {layer.blob_digest, layer.diff_id}, unpack_limits);
    if (!unpacked.ok()) {
      if (unpacked.status().error_number() == EFBIG) {
        return undo(Status::Error(unpacked.status().message() + " (images.max_size: " +
                                      std::to_string(config_.max_size) + " bytes for the whole image)",
                                  EFBIG));
      }
      return undo(BadInput(unpacked.status()));
    }
    made.push_back(dest);
    total += unpacked->unpacked_bytes;
    new_layers.push_back({layer.diff_id, static_cast<int64_t>(unpacked->unpacked_bytes), image.created_at});
  }
  if (total > config_.max_size) {
    return undo(Status::Error("image " + image.digest + " unpacks to " + std::to_string(total) +
                                  " bytes, more than images.max_size (" + std::to_string(config_.max_size) + ")",
                              EFBIG));
  }
  image.bytes = static_cast<int64_t>(total);
  Status recorded = store_.InsertImage(image, new_layers, name, force);
  if (!recorded.ok()) return undo(recorded);
  LogInfo("images", "image added", {{"digest", image.digest}, {"name", name}, {"source", source},
                                    {"layers", std::to_string(image.layers.size())}, {"bytes", std::to_string(total)}});
  return Get(image.digest);
}

}  // namespace corral::supervisor
