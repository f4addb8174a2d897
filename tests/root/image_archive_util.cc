#include "image_archive_util.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "common/file_util.h"

namespace corral::test {

using nlohmann::json;

LayerBlob MakeLayer(const std::string& scratch, const std::vector<TarEntry>& entries, Compression compression) {
  const std::string plain = scratch + "/layer.tar";
  const std::string stored = scratch + "/layer.stored";
  LayerBlob blob;
  EXPECT_TRUE(WriteTar(plain, entries, Compression::kNone));
  EXPECT_TRUE(WriteTar(stored, entries, compression));
  blob.diff_id = FileDigest(plain);
  blob.bytes = ReadAll(stored);
  blob.media_type = compression == Compression::kGzip   ? "application/vnd.oci.image.layer.v1.tar+gzip"
                    : compression == Compression::kZstd ? "application/vnd.oci.image.layer.v1.tar+zstd"
                                                        : "application/vnd.oci.image.layer.v1.tar";
  unlink(plain.c_str());
  unlink(stored.c_str());
  return blob;
}

json MakeConfig(const std::vector<LayerBlob>& layers, const std::string& arch) {
  json diff_ids = json::array();
  for (const LayerBlob& l : layers) diff_ids.push_back(l.diff_id);
  return {{"architecture", arch},
          {"os", "linux"},
          {"config", {{"Env", {"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}}, {"WorkingDir", "/work"}, {"User", "1000:1000"}}},
          {"rootfs", {{"type", "layers"}, {"diff_ids", diff_ids}}}};
}

std::string PutBlob(const std::string& layout, const std::string& bytes) {
  const std::string digest = BytesDigest(bytes);
  WriteBytes(layout + "/blobs/sha256/" + digest.substr(7), bytes);
  return digest;
}

json DescriptorFor(const std::string& media_type, const std::string& bytes) {
  return {{"mediaType", media_type}, {"digest", BytesDigest(bytes)}, {"size", bytes.size()}};
}

json PutImage(const std::string& layout, const std::vector<LayerBlob>& layers, const json& config) {
  const std::string config_bytes = config.dump();
  PutBlob(layout, config_bytes);
  json layer_list = json::array();
  for (const LayerBlob& l : layers) {
    PutBlob(layout, l.bytes);
    layer_list.push_back(DescriptorFor(l.media_type, l.bytes));
  }
  const json manifest = {{"schemaVersion", 2},
                         {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                         {"config", DescriptorFor("application/vnd.oci.image.config.v1+json", config_bytes)},
                         {"layers", layer_list}};
  const std::string manifest_bytes = manifest.dump();
  PutBlob(layout, manifest_bytes);
  return DescriptorFor("application/vnd.oci.image.manifest.v1+json", manifest_bytes);
}

void WriteIndex(const std::string& layout, const json& manifests) {
  WriteBytes(layout + "/oci-layout", R"({"imageLayoutVersion":"1.0.0"})");
  const json index = {{"schemaVersion", 2}, {"mediaType", "application/vnd.oci.image.index.v1+json"},
                      {"manifests", manifests}};
  unlink((layout + "/index.json").c_str());
  WriteBytes(layout + "/index.json", index.dump());
}

json Named(json descriptor, const std::string& ref_name) {
  descriptor["annotations"] = {{"org.opencontainers.image.ref.name", ref_name}};
  return descriptor;
}

namespace {

void Collect(const std::string& root, const std::string& rel, std::vector<TarEntry>* out) {
  for (const std::string& name : ListDir(root + (rel.empty() ? "" : "/" + rel))) {
    const std::string child = rel.empty() ? name : rel + "/" + name;
    struct stat st = {};
    if (lstat((root + "/" + child).c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      out->push_back(Dir(child));
      Collect(root, child, out);
    } else {
      out->push_back(File(child, ReadAll(root + "/" + child)));
    }
  }
}

}  // namespace

bool TarDirectory(const std::string& dir, const std::string& tar_path) {
  std::vector<TarEntry> entries;
  Collect(dir, "", &entries);
  return WriteTar(tar_path, entries, Compression::kNone);
}

}  // namespace corral::test
