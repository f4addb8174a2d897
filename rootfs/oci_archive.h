// Reading an image from an archive: an OCI image layout (a directory with oci-layout, index.json
// and blobs/sha256/<hex>), the same as a tar, or a `docker save` tar (manifest.json with Config,
// RepoTags and Layers; docker 25 and later write an OCI layout with a manifest.json beside it, and
// index.json is then preferred). The result says which blobs to unpack and what the image's
// config holds; nothing is unpacked here (UnpackLayer, layer_unpack.h, does that).
//
// A tar is first extracted into `work_dir` (archive_extract.h: files and directories only,
// capped by `max_bytes`), then read as a directory. Every file is opened under the layout's
// directory fd with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS. Blobs are found from their digests as
// blobs/sha256/<hex> only; the one exception is docker save's manifest.json, whose Config and
// Layers are paths: they must be relative, normalized and inside the archive, and their digests
// are computed.
//
// Checked before anything is unpacked: the manifest, the config and every layer blob hash to
// their digests (and have the size their descriptor gives); at most `max_layers` layers (a
// manifest with 10,000 is refused as soon as it is parsed); as many diff_ids in the config as
// layers; every JSON document at most `max_json_bytes`; layer media types known (OCI and docker
// v2, plain, gzip or zstd; foreign and non-distributable layers are refused). When the layout's
// index lists several images, `select` picks one by its `org.opencontainers.image.ref.name` (or
// `io.containerd.image.name`) annotation, or docker's RepoTags; none given and several present is
// an error listing them. A nested index (multi-platform) yields the linux manifest of the host's
// architecture. The config's os and architecture are reported, not judged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace corral::rootfs {

struct ArchiveLimits {
  uint64_t max_bytes = uint64_t{16} << 30;  // a tar archive's uncompressed size
  uint64_t max_entries = 100'000;           // a tar archive's entries
  size_t max_layers = 128;
  uint64_t max_json_bytes = 4 << 20;  // index, manifest, config, manifest.json, oci-layout
};

// The parts of an image's config corral uses (entrypoint and cmd are ignored: commands are the
// daemon's).
struct ImageConfig {
  std::vector<std::string> env;  // "K=V"
  std::string working_dir;
  std::string user;
  std::string architecture;  // "amd64"
  std::string os;            // "linux"
};

struct ArchiveLayer {
  std::string blob_path;    // absolute path of the blob file (inside the layout or work_dir)
  std::string blob_digest;  // "sha256:<hex>" (the manifest's; computed for docker save)
  std::string diff_id;      // "sha256:<hex>" from the config's rootfs.diff_ids
  std::string media_type;
  uint64_t size = 0;  // the blob's size in bytes
};

struct ImageArchive {
  std::string config_digest;  // "sha256:<hex>" of the config blob: the image's id
  ImageConfig config;
  std::vector<ArchiveLayer> layers;    // bottom first
  std::vector<std::string> ref_names;  // the chosen image's ref.name annotations or RepoTags
};

// Opens the archive at `path` (a directory or a tar file), extracting a tar into `work_dir` (an
// existing, empty directory the caller made 0700 and removes once the layers are unpacked: the
// blob paths point into it). On error, whatever was extracted into `work_dir` is removed.
StatusOr<ImageArchive> OpenImageArchive(const std::string& path, const std::string& work_dir,
                                        const ArchiveLimits& limits, const std::string& select = "");

// The OCI name of the host's architecture ("amd64", "arm64", ...).
std::string HostArchitecture();

}  // namespace corral::rootfs
