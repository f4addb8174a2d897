// Images: the operator's root file systems, besides the built-in `host` (DESIGN.md §3).
//
// An image is a stack of layers, each unpacked once under <state_dir>/images/layers/<hex of its
// diff_id> (rootfs/layer_unpack.h) and shared by every image and sandbox that uses it; its id is
// the digest of its config ("sha256:..."), so the same image imported from a file and pulled
// from a registry is one image. Names ("python:3.12", "registry:5000/acme/agent:2026-11") are
// tags pointing at an id; a tag moves only when asked (`force`). The records (images, their
// layers, tags) are in the store; the layers' directories are the files. In a fleet (a shared
// PostgreSQL store) the records are every node's and the directories each node's own: an image
// is imported or pulled on each node that runs it (an import of an image the catalog knows, whose
// layers this node lacks, unpacks them here), and a sandbox of an image this node lacks answers
// `unavailable`, saying so.
//
// Layout under images_dir (mode 0700: layers hold the images' setuid-root files with host uid 0,
// which no host user may reach):
//   layers/<hex>/     an unpacked layer: the image's own ids on disk, whiteouts in overlayfs form
//   tmp/<random>/     an import or pull in progress; whatever is here at Init is a crash's
//                     leftover and is removed
//
// An import unpacks each layer it does not have yet into tmp and moves it into place only when
// complete and verified; the records are written in one transaction after every layer is in
// place; on any error nothing new is left (no record, no directory; a layer another import
// finished meanwhile stays, it is complete). Two imports of one image (by its id) or of one name
// at once: the second is refused (EBUSY) rather than waiting.
//
// Errors carry errnos the API maps like the sandbox manager's: ENOENT not_found, EINVAL
// bad_request (a bad archive, a bad name), EEXIST and EBUSY conflict, EFBIG/EDQUOT
// limit_exceeded. Blocking: Import, Pull and Prune do file work and run on the worker pool; the
// others read the store only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "rootfs/oci_archive.h"
#include "supervisor/images/images_config.h"
#include "supervisor/store/store.h"

namespace corral::supervisor {

struct ImageRecord {
  std::string digest;               // "sha256:<hex>" of its config: the image's id
  std::vector<std::string> names;   // the tags that point at it, sorted
  rootfs::ImageConfig config;       // env, working dir, user, os, architecture
  std::vector<std::string> layers;  // diff_ids, bottom first
  uint64_t bytes = 0;               // unpacked size of its layers
  std::vector<uint64_t> layer_bytes;  // each layer's unpacked size, as `layers` (records read back)
  int64_t created_at = 0;
  std::string source;               // "import", "pull REF" or "build"
};

struct ImportRequest {
  std::string path;    // an OCI image layout (directory or tar) or a `docker save` tar
  std::string name;    // the tag to give it ("name:tag"); "": none
  std::string select;  // which image of an archive that holds several (a ref name in it)
  bool force = false;  // move `name` if it points at another image
};

struct PullRequest {
  std::string ref;     // "127.0.0.1:5000/acme/agent:1" (a registry in the reference: the only
                       // kind corrald pulls; there is no implicit docker.io)
  std::string name;    // the tag to give it; "": the reference's own name:tag
  bool force = false;
};

// A sandbox's view of an image: what its spec needs.
struct ResolvedImage {
  std::string digest;
  std::string name;                      // the name it was asked by ("" when asked by digest)
  std::vector<std::string> layer_dirs;   // top first, for SandboxSpecBuilder::SetImageLayers
  rootfs::ImageConfig config;
};

struct PruneReport {
  uint64_t layers = 0;  // layer directories removed
  uint64_t bytes = 0;   // their unpacked size
};

class ImageService {
 public:
  ImageService(Store& store, std::string images_dir, ImagesConfig config);

  // Makes the directories (0700) and removes what an interrupted import left: its work in tmp/
  // and the layers it moved into place without recording them. Before any import runs.
  Status Init();

  StatusOr<ImageRecord> Import(const ImportRequest& request);
  StatusOr<ImageRecord> Pull(const PullRequest& request);

  StatusOr<std::vector<ImageRecord>> List();
  // By name ("python:3.12"; a name without a tag means ":latest") or by digest.
  StatusOr<ImageRecord> Get(const std::string& name_or_digest);
  // Points `name` at the image; EEXIST when it points at another one and !force.
  StatusOr<ImageRecord> Tag(const std::string& name_or_digest, const std::string& name, bool force);
  // Removes the image and every tag of it; EBUSY (naming one user) while a sandbox or a snapshot
  // uses it. Its layers stay until Prune.
  Status Remove(const std::string& name_or_digest);
  // Removes every layer directory no image uses (and any the store does not know).
  StatusOr<PruneReport> Prune();

  // For a new sandbox: the image by name or digest, with its layer directories.
  StatusOr<ResolvedImage> Resolve(const std::string& name_or_digest);
  // An image's config by digest, from memory after the first time (an image never changes).
  StatusOr<rootfs::ImageConfig> ConfigOf(const std::string& digest);

  // Image builds (image_compose.cc; the executor is image_build.h).
  struct AddedLayer {
    std::string diff_id;  // "sha256:<hex>" of its uncompressed tar
    uint64_t bytes = 0;   // unpacked size
  };
  // Unpacks the layer tar at `tar_path` (plain, gzip or zstd) into layers/ unless a layer of its
  // diff_id is there already. The layer has no record until an image made by AddImage uses it;
  // hold a BuildHold meanwhile, or Prune takes it for a stray.
  StatusOr<AddedLayer> AddLayerFromTar(const std::string& tar_path);
  // Whether layers/ holds the layer `diff_id` (a build cache entry is good only then).
  bool HasLayer(const std::string& diff_id) const;
  // The directory of the layer `diff_id` (read-only use: a build looks into its base).
  std::string LayerDirOf(const std::string& diff_id) const { return LayerDir(diff_id); }
  // Records an image of `layers` (bottom first; each in layers/, from an image or AddLayerFromTar)
  // with `config`, named `name` (EEXIST when it names another image and !force). Its id is the
  // digest of its OCI config, which holds no time: the same layers and config are the same image.
  StatusOr<ImageRecord> AddImage(const rootfs::ImageConfig& config, const std::vector<AddedLayer>& layers,
                                 const std::string& name, bool force, const std::string& source);
  // Prune refuses (EBUSY) while a hold lives: a build's layers have no record until its image.
  using BuildHold = std::shared_ptr<void>;
  BuildHold HoldForBuild();

  const std::string& images_dir() const { return images_dir_; }
  // 16 random hex digits: names of work directories and build sandboxes.
  static std::string RandomWorkName();
  const ImagesConfig& config() const { return config_; }

 private:
  // Marks names, image ids and layers busy for one import or pull; a second one of the same is
  // refused (EBUSY). Unmarks them when it goes.
  class BusyMark {
   public:
    explicit BusyMark(ImageService& service) : service_(service) {}
    ~BusyMark();
    BusyMark(const BusyMark&) = delete;
    BusyMark& operator=(const BusyMark&) = delete;
    Status Add(const std::string& key, const std::string& what);

   private:
    ImageService& service_;
    std::vector<std::string> keys_;
  };

  std::string LayerDir(const std::string& diff_id) const;
  // Whether the layer is unpacked on this host (in a fleet, the catalog may know layers another
  // node holds).
  bool HasLayerDir(const std::string& diff_id) const;
  // Whether every layer of the image is on this host (true too when the store cannot say).
  bool HereWhole(const std::string& digest);
  // Removes the layer directories no record knows; how many. Not while an import runs.
  StatusOr<uint64_t> RemoveStrayLayers();
  StatusOr<std::string> DigestOf(const std::string& name_or_digest);
  static StatusOr<std::string> CanonicalName(const std::string& name);
  // The image `digest` when the store has it already (then named `name` too, when given);
  // nullopt when it is new.
  StatusOr<std::optional<ImageRecord>> Existing(const std::string& digest, const std::string& name, bool force);
  // The store's layers and their unpacked sizes.
  StatusOr<std::map<std::string, int64_t>> KnownLayers();
  // EEXIST when `name` names an image other than `digest` and !force.
  Status CheckTagFree(const std::string& name, bool force, const std::string& digest);
  // The archive at `path` (unpacked under `work`) into the store, named `name` if not empty.
  StatusOr<ImageRecord> ImportArchive(const std::string& path, const std::string& work, const std::string& select,
                                      const std::string& name, bool force, const std::string& source,
                                      BusyMark& busy);

  Store& store_;
  const std::string images_dir_;
  const ImagesConfig config_;
  std::mutex configs_mu_;
  std::map<std::string, rootfs::ImageConfig> configs_;
  std::mutex busy_mu_;
  std::set<std::string> busy_;  // image ids and names an import or pull is working on
};

}  // namespace corral::supervisor
