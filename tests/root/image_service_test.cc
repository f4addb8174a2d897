// The image service on a real store and real unpacked layers: imports share layers between
// images and with themselves, names move only when asked, an image in use is not removed, prune
// takes only what nothing uses, and every refused import leaves no record and no directory.
#include "supervisor/images/image_service.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include "common/file_util.h"
#include "image_archive_util.h"
#include "tests/testing/temp_dir.h"

namespace corral::supervisor {
namespace {

using nlohmann::json;
using test::Compression;
using test::File;
using test::LayerBlob;

class ImageServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (unpacking layers chowns to their owners)";
    for (const std::string& d : {scratch_, images_dir_}) ASSERT_EQ(mkdir(d.c_str(), 0700), 0) << d;
    auto store = Store::Open(dir_.path() + "/corral.db");
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    base_ = test::MakeLayer(scratch_, {File("bin/tool", "tool\n", 0755), File("etc/owned", "x", 0644, 1000, 1000)},
                            Compression::kGzip);
    app_ = test::MakeLayer(scratch_, {File("app/main.py", "print(1)\n")}, Compression::kNone);
    other_ = test::MakeLayer(scratch_, {File("srv/other", "other\n")}, Compression::kZstd);
    Reset();
  }

  void Reset(ImagesConfig config = {}) {
    service_ = std::make_unique<ImageService>(*store_, images_dir_, config);
    ASSERT_TRUE(service_->Init().ok());
  }

  // An OCI layout directory of one image with these layers; returns its path.
  std::string Layout(const std::vector<LayerBlob>& layers, const std::string& name) {
    const std::string layout = dir_.path() + "/layout-" + std::to_string(++layouts_);
    EXPECT_EQ(mkdir(layout.c_str(), 0700), 0);
    json config = test::MakeConfig(layers);
    config["config"]["Env"] = json::array({"PATH=/opt/bin:/usr/bin", "APP=1"});
    config["config"]["WorkingDir"] = "/app";
    test::WriteIndex(layout, json::array({test::Named(test::PutImage(layout, layers, config), name)}));
    return layout;
  }

  std::vector<std::string> LayerDirs() { return test::ListDir(images_dir_ + "/layers"); }
  std::vector<std::string> TmpDirs() { return test::ListDir(images_dir_ + "/tmp"); }

  void ExpectNothingAdded(const StatusOr<ImageRecord>& result, int errno_wanted, const std::string& cause) {
    ASSERT_FALSE(result.ok()) << "accepted; wanted: " << cause;
    EXPECT_EQ(result.status().error_number(), errno_wanted) << result.status().ToString();
    EXPECT_NE(result.status().message().find(cause), std::string::npos) << result.status().message();
    auto images = service_->List();
    ASSERT_TRUE(images.ok());
    EXPECT_TRUE(images->empty()) << "a refused import left an image";
    EXPECT_TRUE(LayerDirs().empty()) << "a refused import left a layer";
    EXPECT_TRUE(TmpDirs().empty()) << "a refused import left its work";
  }

  test::TempDir dir_{"corral-images"};
  const std::string scratch_ = dir_.path() + "/scratch";
  const std::string images_dir_ = dir_.path() + "/images";
  std::unique_ptr<Store> store_;
  std::unique_ptr<ImageService> service_;
  LayerBlob base_, app_, other_;
  int layouts_ = 0;
};

TEST_F(ImageServiceTest, ImportsAnImageWithItsConfigAndName) {
  auto image = service_->Import({Layout({base_, app_}, "v1"), "acme/app:1", "", false});
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ(image->names, std::vector<std::string>{"acme/app:1"});
  EXPECT_EQ(image->layers, (std::vector<std::string>{base_.diff_id, app_.diff_id}));
  EXPECT_EQ(image->config.working_dir, "/app");
  EXPECT_EQ(image->config.env, (std::vector<std::string>{"PATH=/opt/bin:/usr/bin", "APP=1"}));
  EXPECT_EQ(image->source, "import");
  EXPECT_GT(image->bytes, 0u);
  // Each layer's size, and they add up to the image's.
  ASSERT_EQ(image->layer_bytes.size(), 2u);
  EXPECT_GT(image->layer_bytes[0], 0u);
  EXPECT_GT(image->layer_bytes[1], 0u);
  EXPECT_EQ(image->layer_bytes[0] + image->layer_bytes[1], image->bytes);
  // By name, by digest; top layer first for the overlay.
  auto resolved = service_->Resolve("acme/app:1");
  ASSERT_TRUE(resolved.ok()) << resolved.status().ToString();
  EXPECT_EQ(resolved->digest, image->digest);
  EXPECT_EQ(resolved->name, "acme/app:1");
  ASSERT_EQ(resolved->layer_dirs.size(), 2u);
  EXPECT_EQ(resolved->layer_dirs[0], images_dir_ + "/layers/" + app_.diff_id.substr(7));
  struct stat st;
  ASSERT_EQ(stat((resolved->layer_dirs[1] + "/etc/owned").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u) << "layers keep the image's own ids on disk";
  ASSERT_EQ(stat(images_dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u) << "layers hold setuid-root files: no host user may reach them";
  EXPECT_TRUE(service_->Resolve(image->digest).ok());
  EXPECT_EQ(service_->Resolve("acme/app:2").status().error_number(), ENOENT);
  EXPECT_EQ(service_->Resolve("Acme/../app").status().error_number(), EINVAL);
}

TEST_F(ImageServiceTest, LayersAreStoredOnceAcrossImagesAndImports) {
  ASSERT_TRUE(service_->Import({Layout({base_, app_}, "v1"), "app:1", "", false}).ok());
  ASSERT_TRUE(service_->Import({Layout({base_, other_}, "v1"), "other:1", "", false}).ok());
  EXPECT_EQ(LayerDirs().size(), 3u) << "the shared base layer is unpacked once";
  // The same image again, under a second name: one image, no new layer.
  auto again = service_->Import({Layout({base_, app_}, "v1"), "app:latest", "", false});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->names, (std::vector<std::string>{"app:1", "app:latest"}));
  EXPECT_EQ(service_->List()->size(), 2u);
  EXPECT_EQ(LayerDirs().size(), 3u);
}

TEST_F(ImageServiceTest, ANameMovesOnlyWhenForced) {
  auto first = service_->Import({Layout({base_}, "v1"), "app:1", "", false});
  ASSERT_TRUE(first.ok());
  auto refused = service_->Import({Layout({base_, app_}, "v1"), "app:1", "", false});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().error_number(), EEXIST) << refused.status().ToString();
  EXPECT_EQ(service_->List()->size(), 1u) << "a refused import recorded its image";
  EXPECT_EQ(LayerDirs().size(), 1u) << "a refused import left its layer";
  auto forced = service_->Import({Layout({base_, app_}, "v1"), "app:1", "", true});
  ASSERT_TRUE(forced.ok()) << forced.status().ToString();
  EXPECT_EQ(service_->Resolve("app:1")->digest, forced->digest);
  EXPECT_NE(forced->digest, first->digest);
  // Tag: the same rule.
  EXPECT_EQ(service_->Tag(first->digest, "app:1", false).status().error_number(), EEXIST);
  EXPECT_TRUE(service_->Tag(first->digest, "app:old", false).ok());
  EXPECT_EQ(service_->Tag(first->digest, "app:x@sha256:" + std::string(64, 'a'), false).status().error_number(), EINVAL);
}

TEST_F(ImageServiceTest, NamesUnderBuildsAreReservedForTheBuildsRoute) {
  // GET /v1/images/builds/{id} is a build's state: an image named builds/... could not be read.
  auto imported = service_->Import({Layout({base_}, "v1"), "builds/app:1", "", false});
  ASSERT_FALSE(imported.ok());
  EXPECT_EQ(imported.status().error_number(), EINVAL);
  EXPECT_NE(imported.status().message().find("reserved"), std::string::npos) << imported.status().ToString();
  EXPECT_EQ(service_->List()->size(), 0u);
  EXPECT_EQ(LayerDirs().size(), 0u);
  // The controls: the same word elsewhere in the name, or behind a registry.
  auto app = service_->Import({Layout({base_}, "v1"), "acme/builds:1", "", false});
  ASSERT_TRUE(app.ok()) << app.status().ToString();
  EXPECT_TRUE(service_->Tag(app->digest, "builds:2", false).ok());
  EXPECT_TRUE(service_->Tag(app->digest, "registry.example.com/builds/app:1", false).ok());
  auto tagged = service_->Tag(app->digest, "builds/app:2", false);
  ASSERT_FALSE(tagged.ok());
  EXPECT_EQ(tagged.status().error_number(), EINVAL);
}

TEST_F(ImageServiceTest, AnImageInUseStaysAndPruneTakesOnlyUnusedLayers) {
  auto app = service_->Import({Layout({base_, app_}, "v1"), "app:1", "", false});
  auto other = service_->Import({Layout({base_, other_}, "v1"), "other:1", "", false});
  ASSERT_TRUE(app.ok() && other.ok());
  SandboxRow row;
  row.id = "sb_uses_app";
  row.iss = "corp";
  row.sub = "alice";
  row.image = app->digest;
  row.state = "stopped";
  ASSERT_TRUE(store_->CreateSandbox(row, 1 << 20, 1 << 16, 64).ok());
  Status refused = service_->Remove("app:1");
  EXPECT_EQ(refused.error_number(), EBUSY) << refused.ToString();
  EXPECT_NE(refused.message().find("sb_uses_app"), std::string::npos) << refused.message();
  EXPECT_TRUE(service_->Remove("other:1").ok());  // control: an unused image goes
  EXPECT_EQ(service_->Get("other:1").status().error_number(), ENOENT);
  auto pruned = service_->Prune();
  ASSERT_TRUE(pruned.ok()) << pruned.status().ToString();
  EXPECT_EQ(pruned->layers, 1u) << "only other's own layer is unused";
  EXPECT_EQ(LayerDirs().size(), 2u);
  EXPECT_TRUE(service_->Resolve("app:1").ok()) << "the used image's layers are all there";
  ASSERT_TRUE(store_->DeleteSandbox(row.id).ok());
  EXPECT_TRUE(service_->Remove(app->digest).ok());
  EXPECT_EQ(service_->Prune()->layers, 2u);
  EXPECT_TRUE(LayerDirs().empty());
}

TEST_F(ImageServiceTest, RefusedImportsLeaveNothing) {
  // Control: the same service imports a good one (then removes and prunes it).
  ASSERT_TRUE(service_->Import({Layout({base_}, "v1"), "", "", false}).ok());
  ASSERT_TRUE(service_->Remove(service_->List()->front().digest).ok());
  ASSERT_TRUE(service_->Prune().ok());
  ExpectNothingAdded(service_->Import({"relative/path", "", "", false}), EINVAL, "absolute");
  ExpectNothingAdded(service_->Import({dir_.path() + "/missing", "", "", false}), ENOENT, "no such file");
  ExpectNothingAdded(service_->Import({Layout({base_}, "v1"), "bad/../name", "", false}), EINVAL, "image name");
  // A layer that writes outside itself: refused after the good layer below it was unpacked,
  // which is removed again.
  LayerBlob escape = test::MakeLayer(scratch_, {File("../escape", "x")}, Compression::kNone);
  ExpectNothingAdded(service_->Import({Layout({base_, escape}, "v1"), "", "", false}), EINVAL, "escape");
  // A blob that does not match its digest.
  const std::string tampered = Layout({base_, app_}, "v1");
  const std::string blob = tampered + "/blobs/sha256/" + test::BytesDigest(app_.bytes).substr(7);
  ASSERT_TRUE(WriteNewFile(blob + ".new", app_.bytes + "!", 0644).ok());
  ASSERT_EQ(rename((blob + ".new").c_str(), blob.c_str()), 0);
  ExpectNothingAdded(service_->Import({tampered, "", "", false}), EINVAL, "");
}

TEST_F(ImageServiceTest, AnImageAboveMaxSizeIsRefused) {
  LayerBlob big = test::MakeLayer(scratch_, {File("big", std::string(1 << 20, 'x'))}, Compression::kGzip);
  ImagesConfig small;
  small.max_size = 512 << 10;
  Reset(small);
  ExpectNothingAdded(service_->Import({Layout({base_, big}, "v1"), "", "", false}), EFBIG, "images.max_size");
  Reset();  // control: the default cap takes it
  EXPECT_TRUE(service_->Import({Layout({base_, big}, "v1"), "", "", false}).ok());
}

TEST_F(ImageServiceTest, TwoImportsOfOneImageAtOnceEndWithOneImage) {
  LayerBlob big = test::MakeLayer(scratch_, {File("big", std::string(8 << 20, 'y'))}, Compression::kGzip);
  const std::string a = Layout({base_, big}, "v1"), b = Layout({base_, big}, "v1");
  StatusOr<ImageRecord> first = Status::Error("not run"), second = Status::Error("not run");
  std::thread one([&] { first = service_->Import({a, "big:1", "", false}); });
  std::thread two([&] { second = service_->Import({b, "big:1", "", false}); });
  one.join();
  two.join();
  ASSERT_TRUE(first.ok() || second.ok()) << first.status().ToString() << " / " << second.status().ToString();
  for (const auto* result : {&first, &second}) {
    if (!result->ok()) {
      EXPECT_EQ(result->status().error_number(), EBUSY) << result->status().ToString();
    }
  }
  EXPECT_EQ(service_->List()->size(), 1u);
  EXPECT_EQ(LayerDirs().size(), 2u);
  EXPECT_TRUE(TmpDirs().empty());
}

// What a daemon killed in the middle of an import left: its work, and a layer moved into place
// but not recorded. The next start removes both, and keeps the layers of recorded images.
TEST_F(ImageServiceTest, InitRemovesWhatAnInterruptedImportLeft) {
  auto kept = service_->Import({Layout({base_}, "v1"), "kept:1", "", false});
  ASSERT_TRUE(kept.ok());
  ASSERT_EQ(mkdir((images_dir_ + "/tmp/0123456789abcdef").c_str(), 0700), 0);
  ASSERT_TRUE(WriteNewFile(images_dir_ + "/tmp/0123456789abcdef/half", "x", 0600).ok());
  ASSERT_EQ(mkdir((images_dir_ + "/layers/" + std::string(64, 'c')).c_str(), 0755), 0);
  Reset();
  EXPECT_TRUE(TmpDirs().empty());
  EXPECT_EQ(LayerDirs(), std::vector<std::string>{base_.diff_id.substr(7)});
  EXPECT_TRUE(service_->Resolve("kept:1").ok());
  // The same kind of stray, left while the daemon runs, goes at prune.
  ASSERT_EQ(mkdir((images_dir_ + "/layers/" + std::string(64, 'd')).c_str(), 0755), 0);
  auto pruned = service_->Prune();
  ASSERT_TRUE(pruned.ok());
  EXPECT_EQ(pruned->layers, 1u);
  EXPECT_EQ(LayerDirs().size(), 1u);
}

}  // namespace
}  // namespace corral::supervisor
