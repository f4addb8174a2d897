// Opening image archives built here: OCI layouts as a directory and as a tar, docker save
// archives (old and OCI-style), one made by Debian's umoci, and every broken one refused with its
// cause before anything is unpacked, leaving the work directory empty. The layers found are then
// unpacked with their digests as checks, so the two halves agree.
#include "rootfs/oci_archive.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "common/file_util.h"
#include "image_archive_util.h"
#include "rootfs/layer_unpack.h"
#include "tests/testing/temp_dir.h"

namespace corral::rootfs {
namespace {

using nlohmann::json;
using test::Compression;
using test::File;
using test::LayerBlob;
using test::TarEntry;

class OciArchiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (unpacking layers chowns to their owners)";
    for (const std::string& d : {layout_, work_, scratch_, layers_}) ASSERT_EQ(mkdir(d.c_str(), 0700), 0) << d;
    bottom_ = test::MakeLayer(scratch_, {File("etc/os-release", "ID=test\n"), File("bin/sh", "sh", 0755)},
                              Compression::kGzip);
    top_ = test::MakeLayer(scratch_, {File("etc/.wh.os-release", ""), File("app/main.py", "print(1)\n")},
                           Compression::kNone);
  }

  // A one-image layout tagged `tag`; returns the manifest descriptor.
  json MakeLayout(const std::string& tag = "v1") {
    json m = test::PutImage(layout_, {bottom_, top_}, test::MakeConfig({bottom_, top_}));
    test::WriteIndex(layout_, json::array({test::Named(m, tag)}));
    return m;
  }

  StatusOr<ImageArchive> Open(const std::string& path, const std::string& select = "", ArchiveLimits limits = {}) {
    return OpenImageArchive(path, work_, limits, select);
  }

  void ExpectRefused(const std::string& path, const std::string& cause, const std::string& select = "",
                     ArchiveLimits limits = {}) {
    StatusOr<ImageArchive> a = Open(path, select, limits);
    ASSERT_FALSE(a.ok()) << "accepted; wanted: " << cause;
    EXPECT_NE(a.status().message().find(cause), std::string::npos) << a.status().message() << " (wanted: " << cause << ")";
    EXPECT_EQ(test::ListDir(work_), std::vector<std::string>{}) << "work dir not emptied after " << a.status().message();
  }

  // Unpacks every layer of `a` with its digests as checks.
  void ExpectLayersUnpack(const ImageArchive& a) {
    for (size_t i = 0; i < a.layers.size(); ++i) {
      const std::string dest = layers_ + "/" + std::to_string(i) + "-" + a.layers[i].diff_id.substr(7, 12);
      StatusOr<UnpackedLayer> u = UnpackLayer(a.layers[i].blob_path, dest, {a.layers[i].blob_digest, a.layers[i].diff_id}, {});
      EXPECT_TRUE(u.ok()) << u.status().ToString();
    }
  }

  void ExpectTheImage(const ImageArchive& a) {
    ASSERT_EQ(a.layers.size(), 2u);
    EXPECT_EQ(a.layers[0].diff_id, bottom_.diff_id);
    EXPECT_EQ(a.layers[1].diff_id, top_.diff_id);
    EXPECT_EQ(a.layers[0].size, bottom_.bytes.size());
    EXPECT_EQ(a.layers[0].blob_digest, test::BytesDigest(bottom_.bytes));
    EXPECT_EQ(a.layers[1].blob_digest, test::BytesDigest(top_.bytes));
    EXPECT_EQ(test::ReadAll(a.layers[0].blob_path), bottom_.bytes);
    EXPECT_EQ(a.config_digest, test::BytesDigest(test::MakeConfig({bottom_, top_}).dump()));
    EXPECT_EQ(a.config.env, (std::vector<std::string>{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}));
    EXPECT_EQ(a.config.working_dir, "/work");
    EXPECT_EQ(a.config.user, "1000:1000");
    EXPECT_EQ(a.config.architecture, "amd64");
    EXPECT_EQ(a.config.os, "linux");
    ExpectLayersUnpack(a);
  }

  test::TempDir tmp_{"oci-archive"};
  const std::string layout_ = tmp_.Join("layout");
  const std::string work_ = tmp_.Join("work");
  const std::string scratch_ = tmp_.Join("scratch");
  const std::string layers_ = tmp_.Join("layers");
  LayerBlob bottom_, top_;
};

TEST_F(OciArchiveTest, OciLayoutDirectory) {
  MakeLayout();
  StatusOr<ImageArchive> a = Open(layout_);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ExpectTheImage(*a);
  EXPECT_EQ(a->ref_names, std::vector<std::string>{"v1"});
  EXPECT_EQ(a->layers[0].media_type, "application/vnd.oci.image.layer.v1.tar+gzip");
  EXPECT_EQ(a->layers[0].blob_path.rfind(layout_ + "/blobs/sha256/", 0), 0u);
  EXPECT_EQ(test::ListDir(work_), std::vector<std::string>{});  // a directory is read in place
}

TEST_F(OciArchiveTest, OciLayoutTar) {
  MakeLayout();
  const std::string tar = scratch_ + "/image.tar";
  ASSERT_TRUE(test::TarDirectory(layout_, tar));
  StatusOr<ImageArchive> a = Open(tar);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ExpectTheImage(*a);
  EXPECT_EQ(a->layers[1].blob_path.rfind(work_ + "/blobs/sha256/", 0), 0u);
}

// The old docker save: <id>/layer.tar, <hex>.json, manifest.json.
void MakeDockerSave(const std::string& dir, const std::vector<LayerBlob>& layers, const json& config,
                    std::vector<std::string> layer_paths = {}) {
  const std::string config_bytes = config.dump();
  const std::string config_name = test::BytesDigest(config_bytes).substr(7) + ".json";
  test::WriteBytes(dir + "/" + config_name, config_bytes);
  if (layer_paths.empty()) {
    for (size_t i = 0; i < layers.size(); ++i) {
      layer_paths.push_back("layer" + std::to_string(i) + "/layer.tar");
      test::WriteBytes(dir + "/" + layer_paths.back(), layers[i].bytes);
    }
  }
  const json manifest = json::array({{{"Config", config_name}, {"RepoTags", {"acme/app:1"}}, {"Layers", layer_paths}}});
  test::WriteBytes(dir + "/manifest.json", manifest.dump());
}

TEST_F(OciArchiveTest, DockerSaveTar) {
  // docker save's layers are plain tars.
  bottom_ = test::MakeLayer(scratch_, {File("etc/os-release", "ID=test\n"), File("bin/sh", "sh", 0755)}, Compression::kNone);
  const std::string dir = tmp_.Join("save");
  MakeDockerSave(dir, {bottom_, top_}, test::MakeConfig({bottom_, top_}));
  const std::string tar = scratch_ + "/save.tar";
  ASSERT_TRUE(test::TarDirectory(dir, tar));
  StatusOr<ImageArchive> a = Open(tar);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ExpectTheImage(*a);
  EXPECT_EQ(a->ref_names, std::vector<std::string>{"acme/app:1"});
  EXPECT_EQ(a->layers[0].blob_path, work_ + "/layer0/layer.tar");
  EXPECT_EQ(test::ListDir(layers_).size(), 2u);
}

TEST_F(OciArchiveTest, IndexJsonIsPreferredOverManifestJson) {
  MakeLayout();
  // docker 25+ writes both; a manifest.json that would fail proves which one was read.
  test::WriteBytes(layout_ + "/manifest.json", R"([{"Config":"missing.json","Layers":["missing.tar"]}])");
  StatusOr<ImageArchive> a = Open(layout_);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ExpectTheImage(*a);
  unlink((layout_ + "/index.json").c_str());  // control: without index.json, manifest.json is read
  StatusOr<ImageArchive> b = Open(layout_);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("missing.json: missing"), std::string::npos) << b.status().message();
}

TEST_F(OciArchiveTest, ManifestWithTenThousandLayersIsRefusedFast) {
  json layers = json::array();
  for (int i = 0; i < 10'000; ++i) {
    layers.push_back({{"mediaType", "application/vnd.oci.image.layer.v1.tar"},
                      {"digest", test::BytesDigest(std::to_string(i))},
                      {"size", 1}});
  }
  const std::string config = test::MakeConfig({bottom_}).dump();
  test::PutBlob(layout_, config);
  const std::string manifest = json{{"schemaVersion", 2},
                                    {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                                    {"config", test::DescriptorFor("application/vnd.oci.image.config.v1+json", config)},
                                    {"layers", layers}}.dump();
  test::PutBlob(layout_, manifest);
  test::WriteIndex(layout_, json::array({test::DescriptorFor("application/vnd.oci.image.manifest.v1+json", manifest)}));
  auto start = std::chrono::steady_clock::now();
  ExpectRefused(layout_, "has 10000 layers, more than 128");
  RecordProperty("refused_after_seconds",
                 std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
  ArchiveLimits many;
  many.max_layers = 10'000;  // control: allowed that many, it gets as far as the missing blobs
  ExpectRefused(layout_, ": missing", "", many);
}

TEST_F(OciArchiveTest, BlobsThatDoNotMatchTheirDigestsAreRefused) {
  json m = MakeLayout();
  const std::string layer_path = layout_ + "/blobs/sha256/" + test::BytesDigest(top_.bytes).substr(7);
  std::string bad = top_.bytes;
  bad[100] ^= 1;
  unlink(layer_path.c_str());
  test::WriteBytes(layer_path, bad);
  ExpectRefused(layout_, "layer blob " + test::BytesDigest(top_.bytes) + " has digest " + test::BytesDigest(bad));
  unlink(layer_path.c_str());
  test::WriteBytes(layer_path, top_.bytes);
  ASSERT_TRUE(Open(layout_).ok());  // control
  const std::string manifest_path = layout_ + "/blobs/sha256/" + m["digest"].get<std::string>().substr(7);
  const std::string manifest = test::ReadAll(manifest_path);
  unlink(manifest_path.c_str());
  test::WriteBytes(manifest_path, manifest + " ");
  ExpectRefused(layout_, "manifest blob " + m["digest"].get<std::string>() + " has digest");
}

TEST_F(OciArchiveTest, MissingBlobIsRefused) {
  MakeLayout();
  unlink((layout_ + "/blobs/sha256/" + test::BytesDigest(bottom_.bytes).substr(7)).c_str());
  ExpectRefused(layout_, "layer " + test::BytesDigest(bottom_.bytes) + ": blobs/sha256/");
}

TEST_F(OciArchiveTest, SeveralImagesNeedASelection) {
  json first = test::PutImage(layout_, {bottom_}, test::MakeConfig({bottom_}));
  json second = test::PutImage(layout_, {bottom_, top_}, test::MakeConfig({bottom_, top_}));
  test::WriteIndex(layout_, json::array({test::Named(first, "v1"), test::Named(second, "v2")}));
  ExpectRefused(layout_, "the archive holds 2 images (v1, v2): name one");
  ExpectRefused(layout_, "no image named v3", "v3");
  StatusOr<ImageArchive> v2 = Open(layout_, "v2");
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  ExpectTheImage(*v2);
  StatusOr<ImageArchive> v1 = Open(layout_, "v1");
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  EXPECT_EQ(v1->layers.size(), 1u);
}

TEST_F(OciArchiveTest, NestedIndexPicksTheHostsPlatform) {
  json amd64 = test::PutImage(layout_, {bottom_, top_}, test::MakeConfig({bottom_, top_}));
  amd64["platform"] = {{"os", "linux"}, {"architecture", HostArchitecture()}};
  // The other platform's manifest is not in the layout at all: picking it would fail.
  json other = test::DescriptorFor("application/vnd.oci.image.manifest.v1+json", "absent");
  other["platform"] = {{"os", "linux"}, {"architecture", "s390x-not-here"}};
  const std::string nested = json{{"schemaVersion", 2}, {"manifests", json::array({other, amd64})}}.dump();
  test::PutBlob(layout_, nested);
  test::WriteIndex(layout_, json::array({test::Named(test::DescriptorFor("application/vnd.oci.image.index.v1+json", nested), "multi")}));
  StatusOr<ImageArchive> a = Open(layout_);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ExpectTheImage(*a);
  EXPECT_EQ(a->ref_names, std::vector<std::string>{"multi"});
  // Control: with only the other platform, it is refused naming what there is.
  const std::string only_other = json{{"schemaVersion", 2}, {"manifests", json::array({other})}}.dump();
  test::PutBlob(layout_, only_other);
  test::WriteIndex(layout_, json::array({test::DescriptorFor("application/vnd.oci.image.index.v1+json", only_other)}));
  ExpectRefused(layout_, "has no linux/" + HostArchitecture() + " image (only linux/s390x-not-here)");
}

TEST_F(OciArchiveTest, DiffIdCountAndLayerTypesAreChecked) {
  json m = test::PutImage(layout_, {bottom_, top_}, test::MakeConfig({bottom_}));
  test::WriteIndex(layout_, json::array({m}));
  ExpectRefused(layout_, "config has 1 diff_ids for 2 layers");
  LayerBlob foreign = top_;
  foreign.media_type = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip";
  test::WriteIndex(layout_, json::array({test::PutImage(layout_, {bottom_, foreign}, test::MakeConfig({bottom_, foreign}))}));
  ExpectRefused(layout_, "foreign/non-distributable layer");
  LayerBlob odd = top_;
  odd.media_type = "application/x-tar";
  test::WriteIndex(layout_, json::array({test::PutImage(layout_, {bottom_, odd}, test::MakeConfig({bottom_, odd}))}));
  ExpectRefused(layout_, "unknown media type \"application/x-tar\"");
  test::WriteIndex(layout_, json::array({test::PutImage(layout_, {bottom_, top_}, test::MakeConfig({bottom_, top_}))}));
  EXPECT_TRUE(Open(layout_).ok());  // control
}

TEST_F(OciArchiveTest, DockerSaveLayerPathsMustStayInside) {
  const std::string dir = tmp_.Join("save");
  test::WriteBytes(tmp_.Join("outside.tar"), top_.bytes);
  MakeDockerSave(dir, {bottom_}, test::MakeConfig({bottom_}), {"../outside.tar"});
  ExpectRefused(dir, "layer \"../outside.tar\": path leaves the layer");
  RemoveTree(dir);
  MakeDockerSave(dir, {bottom_}, test::MakeConfig({bottom_}), {tmp_.Join("outside.tar")});
  ExpectRefused(dir, "absolute path");
  RemoveTree(dir);
  MakeDockerSave(dir, {bottom_}, test::MakeConfig({bottom_}), {"a/../../outside.tar"});
  const std::string tar = scratch_ + "/save.tar";
  ASSERT_TRUE(test::TarDirectory(dir, tar));
  ExpectRefused(tar, "path leaves the layer");
  RemoveTree(dir);
  MakeDockerSave(dir, {bottom_}, test::MakeConfig({bottom_}));  // control
  EXPECT_TRUE(Open(dir).ok());
}

TEST_F(OciArchiveTest, ArchiveTarsHoldOnlyFilesAndDirectories) {
  MakeLayout();
  const std::string tar = scratch_ + "/evil.tar";
  ASSERT_TRUE(test::WriteTar(tar, {File("oci-layout", "{}"), test::Symlink("index.json", "/etc/passwd")}));
  ExpectRefused(tar, "entry index.json: symlink");
  ASSERT_TRUE(test::WriteTar(tar, {File("../escape", "x")}));
  ExpectRefused(tar, "entry ../escape: path leaves the layer");
  EXPECT_FALSE(access(tmp_.Join("escape").c_str(), F_OK) == 0);
  ASSERT_TRUE(test::WriteTar(tar, {test::Device("dev", false, 1, 3)}));
  ExpectRefused(tar, "special file");
  ArchiveLimits small;
  small.max_bytes = 64 << 10;
  TarEntry big = File("blobs/sha256/big", "");
  big.zeros = 1 << 20;
  ASSERT_TRUE(test::WriteTar(tar, {big}, Compression::kGzip));
  ExpectRefused(tar, "uncompressed size exceeds 65536 bytes", "", small);
  ASSERT_TRUE(test::TarDirectory(layout_, tar));  // control
  EXPECT_TRUE(Open(tar).ok());
}

TEST_F(OciArchiveTest, LayoutMadeByUmoci) {
  if (system("command -v umoci >/dev/null 2>&1") != 0) GTEST_SKIP() << "umoci is not installed (Debian's umoci)";
  const std::string image = tmp_.Join("umoci-image");
  const std::string layer_tar = scratch_ + "/rootfs.tar";
  ASSERT_TRUE(test::WriteTar(layer_tar, {test::Dir("etc"), File("etc/hostname", "umoci\n"),
                                         File("usr/bin/tool", "#!/bin/sh\n", 0755, 0, 0)}));
  const std::string cmd = "umoci init --layout " + image + " && umoci new --image " + image + ":latest" +
                          " && umoci raw add-layer --image " + image + ":latest " + layer_tar;
  ASSERT_EQ(system((cmd + " >/dev/null 2>&1").c_str()), 0) << cmd;
  StatusOr<ImageArchive> a = Open(image);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->layers.size(), 1u);
  EXPECT_EQ(a->layers[0].diff_id, test::FileDigest(layer_tar));
  EXPECT_EQ(a->ref_names, std::vector<std::string>{"latest"});
  EXPECT_EQ(a->config.os, "linux");
  const std::string dest = layers_ + "/umoci";
  StatusOr<UnpackedLayer> u = UnpackLayer(a->layers[0].blob_path, dest, {a->layers[0].blob_digest, a->layers[0].diff_id}, {});
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(test::ReadAll(dest + "/etc/hostname"), "umoci\n");
}

}  // namespace
}  // namespace corral::rootfs
