// corral image: its options, the requests they become, and its table. No daemon needed.
#include "tools/corral/image_command.h"

#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace corral::cli {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

EnvLookup Env(std::map<std::string, std::string> vars = {}) {
  return [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::string ErrorOf(const std::vector<std::string>& args) {
  auto parsed = ParseImageOptions(args, Env());
  EXPECT_FALSE(parsed.ok()) << "parsed: " << (args.empty() ? "" : args[0]);
  return parsed.ok() ? "" : std::string(parsed.status().message());
}

TEST(ImageOptionsTest, ImportMakesARelativeFileAbsolute) {
  auto options = ParseImageOptions({"import", "busybox.tar", "--name", "busybox:test", "--force"}, Env());
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  EXPECT_EQ(options->file, std::string(cwd) + "/busybox.tar");
  EXPECT_EQ(options->admin.socket_path, "/run/corral/admin.sock");
  const ImageRequest request = BuildImageRequest(*options);
  EXPECT_EQ(request.method, "POST");
  EXPECT_EQ(request.target, "/v1/images/import");
  EXPECT_EQ(request.body, json({{"path", std::string(cwd) + "/busybox.tar"}, {"name", "busybox:test"}, {"force", true}}));

  auto absolute = ParseImageOptions({"import", "/srv/layout", "--select=b:1", "--admin-socket", "/tmp/a.sock"}, Env());
  ASSERT_TRUE(absolute.ok()) << absolute.status().ToString();
  EXPECT_EQ(BuildImageRequest(*absolute).body, json({{"path", "/srv/layout"}, {"select", "b:1"}}));
  EXPECT_EQ(absolute->admin.socket_path, "/tmp/a.sock");
}

TEST(ImageOptionsTest, EachVerbsRequest) {
  struct Case {
    std::vector<std::string> args;
    std::string method, target;
    json body;
  };
  const Case cases[] = {
      {{"pull", "127.0.0.1:5000/acme/agent:1"}, "POST", "/v1/images/pull",
       {{"ref", "127.0.0.1:5000/acme/agent:1"}}},
      {{"pull", "r:5000/a:1", "--name", "agent:1", "-f"}, "POST", "/v1/images/pull",
       {{"ref", "r:5000/a:1"}, {"name", "agent:1"}, {"force", true}}},
      {{"ls"}, "GET", "/v1/images", nullptr},
      {{"inspect", "acme/agent:1"}, "GET", "/v1/images/acme%2Fagent%3A1", nullptr},
      {{"tag", "busybox:test", "busybox:stable"}, "POST", "/v1/images/busybox%3Atest/tag", {{"name", "busybox:stable"}}},
      {{"rm", "sha256:abc"}, "DELETE", "/v1/images/sha256%3Aabc", nullptr},
      {{"prune"}, "POST", "/v1/images/prune", nullptr},
  };
  for (const Case& c : cases) {
    auto options = ParseImageOptions(c.args, Env());
    ASSERT_TRUE(options.ok()) << c.args[0] << ": " << options.status().ToString();
    const ImageRequest request = BuildImageRequest(*options);
    EXPECT_EQ(request.method, c.method) << c.args[0];
    EXPECT_EQ(request.target, c.target) << c.args[0];
    EXPECT_EQ(request.body, c.body) << c.args[0];
    EXPECT_FALSE(options->server.has_value()) << c.args[0];  // the admin socket
  }
}

TEST(ImageOptionsTest, ListAndInspectMayAskTheApi) {
  auto remote = ParseImageOptions({"ls", "--url", "http://127.0.0.1:9000", "--token", "jwt"}, Env());
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  ASSERT_TRUE(remote->server.has_value());
  EXPECT_EQ(remote->server->url.text, "http://127.0.0.1:9000");
  EXPECT_EQ(remote->server->token, "jwt");
  auto by_env = ParseImageOptions({"inspect", "busybox:test", "--url", "http://127.0.0.1:9000"},
                                  Env({{"CORRAL_TOKEN", "env-token"}}));
  ASSERT_TRUE(by_env.ok()) << by_env.status().ToString();
  EXPECT_EQ(by_env->server->token, "env-token");
  // Changes are the admin socket's only.
  EXPECT_THAT(ErrorOf({"rm", "busybox:test", "--url", "http://127.0.0.1:9000"}), HasSubstr("--url"));
  EXPECT_THAT(ErrorOf({"import", "/a", "--token", "t"}), HasSubstr("--token"));
}

TEST(ImageOptionsTest, BadArgumentsAreRefusedNamingThem) {
  EXPECT_EQ(ErrorOf({}), "missing command: import|pull|ls|inspect|tag|rm|prune");
  EXPECT_THAT(ErrorOf({"frobnicate"}), HasSubstr("unknown command 'image frobnicate'"));
  EXPECT_THAT(ErrorOf({"build", "-t", "x:1"}), HasSubstr("corral image build --help"));
  EXPECT_EQ(ErrorOf({"import"}), "image import: expected one FILE");
  EXPECT_EQ(ErrorOf({"import", "a.tar", "b.tar"}), "image import: expected one FILE");
  EXPECT_EQ(ErrorOf({"import", ""}), "image import: an empty argument");
  EXPECT_EQ(ErrorOf({"import", "/a", "--name="}), "--name: empty");
  EXPECT_THAT(ErrorOf({"pull"}), HasSubstr("image pull: expected one reference"));
  EXPECT_EQ(ErrorOf({"tag", "busybox:test"}), "image tag: expected an image and its new NAME");
  EXPECT_EQ(ErrorOf({"rm"}), "image rm: expected one image (a name or a digest)");
  EXPECT_EQ(ErrorOf({"ls", "x"}), "image ls: expected no argument");
  EXPECT_THAT(ErrorOf({"prune", "--force"}), HasSubstr("--force"));
  // Help, anywhere.
  auto help = ParseImageOptions({"--help"}, Env());
  ASSERT_TRUE(help.ok());
  EXPECT_TRUE(help->help);
  auto verb_help = ParseImageOptions({"import", "--help"}, Env());
  ASSERT_TRUE(verb_help.ok());
  EXPECT_TRUE(verb_help->help);
  EXPECT_THAT(ImageUsage(), HasSubstr("import FILE"));
}

TEST(ImageOptionsTest, TableHasARowPerName) {
  const json images = json::parse(R"([
    {"digest": "sha256:0123456789abcdef0000", "names": ["busybox:latest", "busybox:test"], "size": 1048576,
     "created_at": 1000, "source": "import"},
    {"digest": "sha256:fedcba9876543210ffff", "names": [], "size": 512, "created_at": 1000 , "source": "pull r/a:1"}
  ])");
  EXPECT_EQ(FormatImageTable(images, 1000 + 7200),
            "NAME             DIGEST         SIZE      CREATED       SOURCE\n"
            "busybox:latest   0123456789ab   1.0 MiB   2 hours ago   import\n"
            "busybox:test     0123456789ab   1.0 MiB   2 hours ago   import\n"
            "<none>           fedcba987654   512 B     2 hours ago   pull r/a:1\n");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(3ull << 30), "3.0 GiB");
}

}  // namespace
}  // namespace corral::cli
