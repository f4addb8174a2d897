#include "rootfs/oci_archive.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>
#include <vector>

#include "common/file_util.h"
#include "common/sha256.h"
#include "common/unique_fd.h"
#include "rootfs/archive_extract.h"
#include "rootfs/archive_paths.h"
#include "rootfs/image_ref.h"
#include "rootfs/oci_layout.h"

namespace corral::rootfs {
namespace {

using oci::Descriptor;
using oci::Layout;
using oci::json;

constexpr std::string_view kOciIndex = "application/vnd.oci.image.index.v1+json";
constexpr std::string_view kDockerList = "application/vnd.docker.distribution.manifest.list.v2+json";
constexpr std::string_view kOciManifest = "application/vnd.oci.image.manifest.v1+json";
constexpr std::string_view kDockerManifest = "application/vnd.docker.distribution.manifest.v2+json";
constexpr std::string_view kRefName = "org.opencontainers.image.ref.name";
constexpr std::string_view kContainerdName = "io.containerd.image.name";

// Layer media types corral unpacks (the content decides the compression; these only say it is a
// layer), and those it refuses by name.
const std::set<std::string, std::less<>> kLayerTypes = {
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.layer.v1.tar+zstd",
    "application/vnd.docker.image.rootfs.diff.tar",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.docker.image.rootfs.diff.tar.zstd",
};
const std::set<std::string, std::less<>> kConfigTypes = {
    "application/vnd.oci.image.config.v1+json",
    "application/vnd.docker.container.image.v1+json",
};


std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// The names an index entry goes by: its ref.name and containerd name annotations.
std::vector<std::string> NamesOf(const Descriptor& d) {
  std::vector<std::string> names;
  for (std::string_view key : {kRefName, kContainerdName}) {
    if (auto it = d.annotations.find(std::string(key)); it != d.annotations.end()) names.push_back(it->second);
  }
  return names;
}

StatusOr<std::vector<Descriptor>> ParseIndex(const std::string& text, const std::string& what) {
  ASSIGN_OR_RETURN(json doc, oci::ParseJson(text, what));
  auto list = doc.find("manifests");
  if (list == doc.end() || !list->is_array()) return Status::Error(what + ": no manifests array");
  std::vector<Descriptor> out;
  for (const json& d : *list) {
    ASSIGN_OR_RETURN(Descriptor desc, oci::ParseDescriptor(d, what));
    out.push_back(std::move(desc));
  }
  if (out.empty()) return Status::Error(what + ": no image");
  return out;
}

// The entry `select` names, or the only one.
StatusOr<Descriptor> SelectManifest(const std::vector<Descriptor>& list, const std::string& select) {
  if (select.empty()) {
    if (list.size() == 1) return list[0];
    std::vector<std::string> names;
    for (const Descriptor& d : list) {
      std::vector<std::string> n = NamesOf(d);
      names.push_back(n.empty() ? d.digest : n[0]);
    }
    return Status::Error("the archive holds " + std::to_string(list.size()) + " images (" + Join(names) +
                         "): name one");
  }
  for (const Descriptor& d : list) {
    for (const std::string& name : NamesOf(d)) {
      if (name == select) return d;
    }
  }
  return Status::Error("no image named " + select + " in the archive");
}

// A nested index (multi-platform): the manifest for linux on the host's architecture.
StatusOr<Descriptor> PlatformManifest(const Layout& layout, const Descriptor& index, const ArchiveLimits& limits) {
  ASSIGN_OR_RETURN(std::string text, layout.ReadBlob(index, limits.max_json_bytes, "index"));
  ASSIGN_OR_RETURN(std::vector<Descriptor> list, ParseIndex(text, "index " + index.digest));
  std::vector<std::string> platforms;
  for (const Descriptor& d : list) {
    if (d.os == "linux" && d.architecture == HostArchitecture()) return d;
    platforms.push_back(d.os + "/" + d.architecture);
  }
  return Status::Error("index " + index.digest + " has no linux/" + HostArchitecture() + " image (only " +
                       Join(platforms) + ")");
}

// The config's fields, and its diff_ids.
StatusOr<std::vector<std::string>> ReadConfig(const std::string& text, ImageConfig* config) {
  const std::string what = "config";
  ASSIGN_OR_RETURN(json doc, oci::ParseJson(text, what));
  ASSIGN_OR_RETURN(config->architecture, oci::StringField(doc, "architecture", what));
  ASSIGN_OR_RETURN(config->os, oci::StringField(doc, "os", what));
  if (auto c = doc.find("config"); c != doc.end() && !c->is_null()) {
    if (!c->is_object()) return Status::Error("config: config is not an object");
    ASSIGN_OR_RETURN(config->env, oci::StringList(*c, "Env", what));
    ASSIGN_OR_RETURN(config->working_dir, oci::StringField(*c, "WorkingDir", what));
    ASSIGN_OR_RETURN(config->user, oci::StringField(*c, "User", what));
  }
  auto rootfs = doc.find("rootfs");
  if (rootfs == doc.end() || !rootfs->is_object()) return Status::Error("config: no rootfs");
  ASSIGN_OR_RETURN(std::string type, oci::StringField(*rootfs, "type", what));
  if (type != "layers") return Status::Error("config: rootfs type \"" + type + "\" is not \"layers\"");
  ASSIGN_OR_RETURN(std::vector<std::string> diff_ids, oci::StringList(*rootfs, "diff_ids", what));
  for (const std::string& id : diff_ids) {
    if (!IsDigest(id)) return Status::Error("config: diff_id \"" + id + "\" is not sha256:<64 hex>");
  }
  return diff_ids;
}

Status CheckLayerType(const std::string& type, const std::string& digest) {
  if (kLayerTypes.contains(type)) return Status();
  if (type.find("nondistributable") != std::string::npos || type.find("foreign") != std::string::npos) {
    return Status::Error("layer " + digest + ": foreign/non-distributable layer (" + type + ") refused");
  }
  return Status::Error("layer " + digest + ": unknown media type \"" + type + "\"");
}

// A layer blob of the layout: there, of its size and digest.
StatusOr<ArchiveLayer> CheckLayerBlob(const Layout& layout, const Descriptor& d) {
  RETURN_IF_ERROR(CheckLayerType(d.media_type, d.digest));
  uint64_t size = 0;
  StatusOr<std::string> got = layout.Digest(oci::BlobPath(d.digest), &size);
  if (!got.ok()) return got.status().WithContext("layer " + d.digest);
  if (*got != d.digest) return Status::Error("layer blob " + d.digest + " has digest " + *got);
  if (size != static_cast<uint64_t>(d.size)) {
    return Status::Error("layer blob " + d.digest + ": " + std::to_string(size) + " bytes, manifest says " +
                         std::to_string(d.size));
  }
  return ArchiveLayer{layout.path() + "/" + oci::BlobPath(d.digest), d.digest, "", d.media_type, size};
}

Status CheckLayerCount(size_t count, const ArchiveLimits& limits) {
  if (count <= limits.max_layers) return Status();
  return Status::Error("manifest has " + std::to_string(count) + " layers, more than " +
                       std::to_string(limits.max_layers));
}

Status AssignDiffIds(const std::vector<std::string>& diff_ids, std::vector<ArchiveLayer>* layers) {
  if (diff_ids.size() != layers->size()) {
    return Status::Error("config has " + std::to_string(diff_ids.size()) + " diff_ids for " +
                         std::to_string(layers->size()) + " layers");
  }
  for (size_t i = 0; i < diff_ids.size(); ++i) (*layers)[i].diff_id = diff_ids[i];
  return Status();
}

// An image manifest and what it names: the config and the layer blobs.
Status ReadManifest(const Layout& layout, const Descriptor& desc, const ArchiveLimits& limits, ImageArchive* out) {
  ASSIGN_OR_RETURN(std::string text, layout.ReadBlob(desc, limits.max_json_bytes, "manifest"));
  const std::string what = "manifest " + desc.digest;
  ASSIGN_OR_RETURN(json doc, oci::ParseJson(text, what));
  ASSIGN_OR_RETURN(std::string type, oci::StringField(doc, "mediaType", what));
  if (!type.empty() && type != kOciManifest && type != kDockerManifest) {
    return Status::Error(what + ": media type \"" + type + "\" is not an image manifest");
  }
  auto layers = doc.find("layers");
  if (layers == doc.end() || !layers->is_array()) return Status::Error(what + ": no layers array");
  RETURN_IF_ERROR(CheckLayerCount(layers->size(), limits).WithContext(what));
  auto config = doc.find("config");
  if (config == doc.end()) return Status::Error(what + ": no config");
  ASSIGN_OR_RETURN(Descriptor config_desc, oci::ParseDescriptor(*config, what + " config"));
  if (!kConfigTypes.contains(config_desc.media_type)) {
    return Status::Error(what + ": config media type \"" + config_desc.media_type + "\" is not an image config");
  }
  ASSIGN_OR_RETURN(std::string config_text, layout.ReadBlob(config_desc, limits.max_json_bytes, "config"));
  out->config_digest = config_desc.digest;
  ASSIGN_OR_RETURN(std::vector<std::string> diff_ids, ReadConfig(config_text, &out->config));
  for (const json& l : *layers) {
    ASSIGN_OR_RETURN(Descriptor layer, oci::ParseDescriptor(l, what + " layer"));
    ASSIGN_OR_RETURN(ArchiveLayer checked, CheckLayerBlob(layout, layer));
    out->layers.push_back(std::move(checked));
  }
  return AssignDiffIds(diff_ids, &out->layers);
}

StatusOr<ImageArchive> ReadOciLayout(const Layout& layout, const ArchiveLimits& limits, const std::string& select) {
  ASSIGN_OR_RETURN(std::string marker, layout.Read("oci-layout", limits.max_json_bytes));
  ASSIGN_OR_RETURN(json marker_doc, oci::ParseJson(marker, "oci-layout"));
  ASSIGN_OR_RETURN(std::string version, oci::StringField(marker_doc, "imageLayoutVersion", "oci-layout"));
  if (version != "1.0.0") return Status::Error("oci-layout: imageLayoutVersion \"" + version + "\" is not 1.0.0");
  ASSIGN_OR_RETURN(std::string index_text, layout.Read("index.json", limits.max_json_bytes));
  ASSIGN_OR_RETURN(std::vector<Descriptor> list, ParseIndex(index_text, "index.json"));
  ASSIGN_OR_RETURN(Descriptor chosen, SelectManifest(list, select));
  ImageArchive out;
  out.ref_names = NamesOf(chosen);
  if (chosen.media_type == kOciIndex || chosen.media_type == kDockerList) {
    ASSIGN_OR_RETURN(chosen, PlatformManifest(layout, chosen, limits));
  }
  if (chosen.media_type != kOciManifest && chosen.media_type != kDockerManifest) {
    return Status::Error("index.json: " + chosen.digest + " has media type \"" + chosen.media_type +
                         "\", not an image manifest");
  }
  RETURN_IF_ERROR(ReadManifest(layout, chosen, limits, &out));
  return out;
}

// A path from docker save's manifest.json: relative and normalized, inside the archive.
StatusOr<std::string> DockerPath(const std::string& path, const std::string& what) {
  StatusOr<std::vector<std::string>> parts = NormalizeArchivePath(path);
  if (!parts.ok()) return Status::Error(what + " \"" + path + "\": " + parts.status().message());
  if (parts->empty()) return Status::Error(what + " \"" + path + "\": not a file");
  return JoinComponents(*parts, parts->size());
}

// The entry of manifest.json that `select` names in its RepoTags, or the only one.
StatusOr<json> SelectDockerImage(const json& doc, const std::string& select) {
  if (doc.empty()) return Status::Error("manifest.json: no image");
  if (select.empty()) {
    if (doc.size() == 1) return doc[0];
    std::vector<std::string> names;
    for (const json& image : doc) {
      StatusOr<std::vector<std::string>> tags = oci::StringList(image, "RepoTags", "manifest.json");
      names.push_back(tags.ok() && !tags->empty() ? (*tags)[0] : "(untagged)");
    }
    return Status::Error("the archive holds " + std::to_string(doc.size()) + " images (" + Join(names) + "): name one");
  }
  for (const json& image : doc) {
    if (!image.is_object()) continue;
    ASSIGN_OR_RETURN(std::vector<std::string> tags, oci::StringList(image, "RepoTags", "manifest.json"));
    for (const std::string& tag : tags) {
      if (tag == select) return image;
    }
  }
  return Status::Error("no image named " + select + " in the archive");
}

StatusOr<ImageArchive> ReadDockerSave(const Layout& layout, const ArchiveLimits& limits, const std::string& select) {
  const std::string what = "manifest.json";
  ASSIGN_OR_RETURN(std::string text, layout.Read(what, limits.max_json_bytes));
  ASSIGN_OR_RETURN(json doc, oci::ParseJson(text, what, /*array=*/true));
  ASSIGN_OR_RETURN(json image, SelectDockerImage(doc, select));
  if (!image.is_object()) return Status::Error(what + ": an image is not an object");
  ImageArchive out;
  ASSIGN_OR_RETURN(out.ref_names, oci::StringList(image, "RepoTags", what));
  ASSIGN_OR_RETURN(std::vector<std::string> layer_paths, oci::StringList(image, "Layers", what));
  RETURN_IF_ERROR(CheckLayerCount(layer_paths.size(), limits).WithContext(what));
  ASSIGN_OR_RETURN(std::string config_field, oci::StringField(image, "Config", what));
  ASSIGN_OR_RETURN(std::string config_path, DockerPath(config_field, what + ": Config"));
  ASSIGN_OR_RETURN(std::string config_text, layout.Read(config_path, limits.max_json_bytes));
  out.config_digest = "sha256:" + Sha256Hex(config_text);
  // Docker names the config by its digest ("<hex>.json", or blobs/sha256/<hex>): it must match.
  std::string named = config_path.substr(config_path.rfind('/') + 1);
  if (named.ends_with(".json")) named.resize(named.size() - 5);
  if (named.size() == 64 && IsDigest("sha256:" + named) && out.config_digest != "sha256:" + named) {
    return Status::Error(what + ": config " + config_path + " has digest " + out.config_digest);
  }
  ASSIGN_OR_RETURN(std::vector<std::string> diff_ids, ReadConfig(config_text, &out.config));
  for (const std::string& field : layer_paths) {
    ASSIGN_OR_RETURN(std::string rel, DockerPath(field, what + ": layer"));
    ArchiveLayer layer;
    StatusOr<std::string> digest = layout.Digest(rel, &layer.size);
    if (!digest.ok()) return digest.status().WithContext(what + ": layer");
    layer.blob_digest = *digest;
    layer.blob_path = layout.path() + "/" + rel;
    layer.media_type = "application/vnd.docker.image.rootfs.diff.tar";
    out.layers.push_back(std::move(layer));
  }
  RETURN_IF_ERROR(AssignDiffIds(diff_ids, &out.layers));
  return out;
}

// Removes everything inside `dir` (not `dir` itself).
Status EmptyDirectory(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + dir);
  std::vector<std::string> names;
  {
    UniqueFd list(::fcntl(fd.get(), F_DUPFD_CLOEXEC, 0));
    DIR* d = list ? ::fdopendir(list.release()) : nullptr;
    if (d == nullptr) return ErrnoError("list " + dir);
    while (struct dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(d);
  }
  for (const std::string& name : names) RETURN_IF_ERROR(RemoveTreeUnder(fd.get(), name));
  return Status();
}

StatusOr<ImageArchive> ReadArchive(const std::string& path, const std::string& work_dir, const ArchiveLimits& limits,
                                   const std::string& select, bool* extracted) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoError("stat " + path);
  std::string dir = path;
  if (S_ISREG(st.st_mode)) {
    *extracted = true;
    RETURN_IF_ERROR(ExtractArchiveTree(path, work_dir, limits.max_bytes, limits.max_entries));
    dir = work_dir;
  } else if (!S_ISDIR(st.st_mode)) {
    return Status::Error("neither a directory nor a file");
  }
  ASSIGN_OR_RETURN(Layout layout, Layout::Open(dir));
  if (layout.Exists("index.json")) return ReadOciLayout(layout, limits, select);
  if (layout.Exists("manifest.json")) return ReadDockerSave(layout, limits, select);
  return Status::Error("neither an OCI layout (index.json) nor a docker save archive (manifest.json)");
}

}  // namespace

std::string HostArchitecture() {
#if defined(__x86_64__)
  return "amd64";
#elif defined(__aarch64__)
  return "arm64";
#elif defined(__i386__)
  return "386";
#elif defined(__riscv) && __riscv_xlen == 64
  return "riscv64";
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  return "ppc64le";
#elif defined(__s390x__)
  return "s390x";
#else
  return "unknown";
#endif
}

StatusOr<ImageArchive> OpenImageArchive(const std::string& path, const std::string& work_dir,
                                        const ArchiveLimits& limits, const std::string& select) {
  bool extracted = false;
  StatusOr<ImageArchive> archive = ReadArchive(path, work_dir, limits, select, &extracted);
  if (archive.ok()) return archive;
  Status status = archive.status().WithContext("image archive " + path);
  if (extracted) {
    Status emptied = EmptyDirectory(work_dir);
    if (!emptied.ok()) return Status::Error(status.message() + " (and cleaning up: " + emptied.ToString() + ")");
  }
  return status;
}

}  // namespace corral::rootfs
