// Image archives built by tests: OCI image layouts (directory or tar) and `docker save` archives
// with the layers, configs, manifests and indexes a test needs, the broken ones included.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "layer_tar_util.h"

namespace corral::test {

struct LayerBlob {
  std::string bytes;    // as stored (compressed or not)
  std::string diff_id;  // "sha256:" of the uncompressed tar
  std::string media_type;
};

// A layer with `entries`, compressed as asked; `scratch` is a directory for the temporary tar.
LayerBlob MakeLayer(const std::string& scratch, const std::vector<TarEntry>& entries, Compression compression);

// The config JSON of an image with these layers' diff_ids.
nlohmann::json MakeConfig(const std::vector<LayerBlob>& layers, const std::string& arch = "amd64");

// Writes `bytes` as blobs/sha256/<hex> under `layout`; returns "sha256:<hex>".
std::string PutBlob(const std::string& layout, const std::string& bytes);

// A descriptor for `bytes` (which PutBlob stored).
nlohmann::json DescriptorFor(const std::string& media_type, const std::string& bytes);

// Writes an image manifest (and its config, and the layer blobs) into `layout`; returns the
// manifest's descriptor.
nlohmann::json PutImage(const std::string& layout, const std::vector<LayerBlob>& layers,
                        const nlohmann::json& config);

// Writes oci-layout and index.json listing `manifests` into `layout`.
void WriteIndex(const std::string& layout, const nlohmann::json& manifests);

// A descriptor with the ref.name annotation.
nlohmann::json Named(nlohmann::json descriptor, const std::string& ref_name);

// Tars the directory `dir` (regular files and directories, relative paths) into `tar_path`.
bool TarDirectory(const std::string& dir, const std::string& tar_path);

}  // namespace corral::test
