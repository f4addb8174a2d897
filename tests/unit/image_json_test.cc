// The image routes' JSON: the records as replies, the bodies checked into requests (each bad body
// refused with a message naming its field, beside one that passes), and the image fields of
// sandboxes and snapshots.
#include "api/image_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <string>

#include "api/protocol_json.h"

namespace corral::api {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

supervisor::ImageRecord Busybox() {
  supervisor::ImageRecord image;
  image.digest = "sha256:" + std::string(64, 'a');
  image.names = {"busybox:latest", "busybox:test"};
  image.config.env = {"PATH=/bin"};
  image.config.working_dir = "/root";
  image.config.user = "0";
  image.config.os = "linux";
  image.config.architecture = "amd64";
  image.layers = {"sha256:" + std::string(64, '1'), "sha256:" + std::string(64, '2')};
  image.bytes = 1234567;
  image.layer_bytes = {1000000, 234567};
  image.created_at = 1700000000;
  image.source = "import";
  return image;
}

TEST(ImageJsonTest, ALayerWithoutAKnownSizeHasNone) {
  auto image = Busybox();
  image.layer_bytes = {1000000};  // a record not read back from the store
  const json j = ImageJson(image);
  EXPECT_EQ(j["layers"][0]["size"], 1000000);
  EXPECT_FALSE(j["layers"][1].contains("size"));
}

TEST(ImageJsonTest, AnImageAsAReply) {
  const json j = ImageJson(Busybox());
  EXPECT_EQ(j["digest"], "sha256:" + std::string(64, 'a'));
  EXPECT_EQ(j["names"], json({"busybox:latest", "busybox:test"}));
  ASSERT_EQ(j["layers"].size(), 2u);
  EXPECT_EQ(j["layers"][0]["diff_id"], "sha256:" + std::string(64, '1'));  // bottom first
  EXPECT_EQ(j["layers"][1]["diff_id"], "sha256:" + std::string(64, '2'));
  EXPECT_EQ(j["layers"][0]["size"], 1000000);
  EXPECT_EQ(j["layers"][1]["size"], 234567);
  EXPECT_EQ(j["size"], 1234567);
  EXPECT_EQ(j["created_at"], 1700000000);
  EXPECT_EQ(j["source"], "import");
  EXPECT_EQ(j["config"], json({{"env", {"PATH=/bin"}}, {"working_dir", "/root"}, {"user", "0"}, {"os", "linux"},
                               {"architecture", "amd64"}}));
  EXPECT_EQ(PruneJson({3, 4096}), json({{"layers_removed", 3}, {"bytes_freed", 4096}}));
}

std::string ErrorOf(const Status& status) {
  EXPECT_EQ(status.error_number(), EINVAL) << status.ToString();
  return std::string(status.message());
}

TEST(ImageJsonTest, ImportBodies) {
  auto good = ParseImport(json{{"path", "/srv/busybox.tar"}, {"name", "busybox:1"}, {"select", "b"}, {"force", true}});
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->path, "/srv/busybox.tar");
  EXPECT_EQ(good->name, "busybox:1");
  EXPECT_EQ(good->select, "b");
  EXPECT_TRUE(good->force);
  auto least = ParseImport(json{{"path", "/srv/layout"}});
  ASSERT_TRUE(least.ok());
  EXPECT_EQ(least->name, "");
  EXPECT_FALSE(least->force);

  EXPECT_THAT(ErrorOf(ParseImport(json::object()).status()), HasSubstr("path: expected"));
  EXPECT_THAT(ErrorOf(ParseImport(json{{"path", ""}}).status()), HasSubstr("path: expected"));
  EXPECT_THAT(ErrorOf(ParseImport(json{{"path", 5}}).status()), HasSubstr("path: expected"));
  EXPECT_THAT(ErrorOf(ParseImport(json{{"path", "busybox.tar"}}).status()),
              HasSubstr("path: expected an absolute path"));
  EXPECT_THAT(ErrorOf(ParseImport(json{{"path", "/a"}, {"force", "yes"}}).status()), HasSubstr("force"));
  EXPECT_THAT(ErrorOf(ParseImport(json{{"path", "/a"}, {"name", 1}}).status()), HasSubstr("name"));
  EXPECT_THAT(ErrorOf(ParseImport(json{{"path", "/a"}, {"tag", "x"}}).status()), HasSubstr("unknown field \"tag\""));
}

TEST(ImageJsonTest, PullAndTagBodies) {
  auto pull = ParsePull(json{{"ref", "127.0.0.1:5000/acme/agent:1"}, {"name", "agent:1"}});
  ASSERT_TRUE(pull.ok()) << pull.status().ToString();
  EXPECT_EQ(pull->ref, "127.0.0.1:5000/acme/agent:1");
  EXPECT_EQ(pull->name, "agent:1");
  EXPECT_FALSE(pull->force);
  EXPECT_THAT(ErrorOf(ParsePull(json::object()).status()), HasSubstr("ref: expected"));
  EXPECT_THAT(ErrorOf(ParsePull(json{{"ref", "r/a:1"}, {"path", "/x"}}).status()), HasSubstr("unknown field"));

  auto tag = ParseTag(json{{"name", "busybox:stable"}, {"force", true}});
  ASSERT_TRUE(tag.ok()) << tag.status().ToString();
  EXPECT_EQ(tag->name, "busybox:stable");
  EXPECT_TRUE(tag->force);
  EXPECT_THAT(ErrorOf(ParseTag(json::object()).status()), HasSubstr("name: expected"));
  EXPECT_THAT(ErrorOf(ParseTag(json{{"name", "b:1"}, {"force", 1}}).status()), HasSubstr("force"));
}

TEST(ImageJsonTest, SandboxesAndSnapshotsNameTheirImageAndItsDigest) {
  const std::string digest = "sha256:" + std::string(64, 'b');
  supervisor::SandboxRow host;
  host.image = "host";
  EXPECT_EQ(SandboxJson(host, false)["image"], "host");
  EXPECT_FALSE(SandboxJson(host, false).contains("image_digest"));

  supervisor::SandboxRow named;
  named.image = digest;
  named.image_name = "python:3.12";
  EXPECT_EQ(SandboxJson(named, false)["image"], "python:3.12");
  EXPECT_EQ(SandboxJson(named, false)["image_digest"], digest);

  supervisor::SandboxRow by_digest;
  by_digest.image = digest;
  EXPECT_EQ(SandboxJson(by_digest, false)["image"], digest);
  EXPECT_EQ(SandboxJson(by_digest, false)["image_digest"], digest);

  supervisor::SnapshotRow snapshot;
  snapshot.image = digest;
  snapshot.image_name = "python:3.12";
  EXPECT_EQ(SnapshotJson(snapshot, false)["image"], "python:3.12");
  EXPECT_EQ(SnapshotJson(snapshot, false)["image_digest"], digest);
  supervisor::SnapshotRow host_snapshot;
  host_snapshot.image = "host";
  EXPECT_EQ(SnapshotJson(host_snapshot, false)["image"], "host");
  EXPECT_FALSE(SnapshotJson(host_snapshot, false).contains("image_digest"));
}

}  // namespace
}  // namespace corral::api
