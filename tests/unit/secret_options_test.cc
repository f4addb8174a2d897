// corral secret's options and the requests they turn into (tools/corral/secret_command.h), and
// `corral sandbox create --secret`. No daemon needed.
#include "tools/corral/secret_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "tools/corral/remote_commands.h"

namespace corral::cli {
namespace {

using ::testing::HasSubstr;
using Args = std::vector<std::string>;

EnvLookup Env() {
  return [](const char* name) -> std::optional<std::string> {
    if (std::string(name) == "CORRAL_TOKEN") return "env-token";
    return std::nullopt;
  };
}

TEST(SecretOptionsTest, PutTakesBindingsAndAValueFileNeverAValueArgument) {
  auto put = ParseSecretOptions({"put", "GITHUB_TOKEN", "--bind", R"({"hosts": ["github.com"]})", "--bind",
                                 R"([{"hosts": ["api.github.com"]}])", "--value-file", "/run/token"},
                                Env());
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->verb, SecretOptions::Verb::kPut);
  EXPECT_EQ(put->name, "GITHUB_TOKEN");
  EXPECT_EQ(put->bindings.size(), 2u);
  EXPECT_EQ(put->value_file, "/run/token");
  EXPECT_EQ(put->server.token, "env-token");
  auto body = SecretPutBody(put->bindings, "v");
  ASSERT_TRUE(body.ok());
  EXPECT_EQ((*body)["value"], "v");
  ASSERT_EQ((*body)["bindings"].size(), 2u);  // a list's entries are spliced in
  EXPECT_EQ((*body)["bindings"][1]["hosts"][0], "api.github.com");
  // No --value option exists (a value on the command line is in ps and the shell's history).
  EXPECT_FALSE(ParseSecretOptions({"put", "T", "--bind", "{}", "--value", "v"}, Env()).ok());
  EXPECT_THAT(ParseSecretOptions({"put", "T"}, Env()).status().message(), HasSubstr("--bind is required"));
  EXPECT_THAT(SecretPutBody({"{not json"}, "v").status().message(), HasSubstr("--bind: not JSON"));
}

TEST(SecretOptionsTest, VerbsArgumentsAndTheIssuersSecrets) {
  EXPECT_EQ(ParseSecretOptions({"ls"}, Env())->verb, SecretOptions::Verb::kList);
  EXPECT_TRUE(ParseSecretOptions({"ls", "--json"}, Env())->json);
  EXPECT_EQ(ParseSecretOptions({"rm", "X"}, Env())->name, "X");
  EXPECT_FALSE(ParseSecretOptions({"rm"}, Env()).ok());
  EXPECT_FALSE(ParseSecretOptions({"ls", "extra"}, Env()).ok());
  EXPECT_FALSE(ParseSecretOptions({"show", "X"}, Env()).ok());
  EXPECT_FALSE(ParseSecretOptions({}, Env()).ok());
  EXPECT_TRUE(ParseSecretOptions({"--help"}, Env())->help);
  auto issuer = ParseSecretOptions({"rm", "SHARED", "--issuer", "acme", "--admin-socket", "/tmp/a.sock"}, Env());
  ASSERT_TRUE(issuer.ok()) << issuer.status().ToString();
  EXPECT_EQ(issuer->issuer, "acme");
  EXPECT_EQ(issuer->admin.socket_path, "/tmp/a.sock");
  EXPECT_FALSE(ParseSecretOptions({"ls", "--issuer", "bad name"}, Env()).ok());
}

TEST(SecretOptionsTest, SandboxCreateNamesSecrets) {
  auto create = ParseSandboxOptions({"create", "--secret", "A_TOKEN,B_TOKEN", "--secret", "C_TOKEN"}, Env());
  ASSERT_TRUE(create.ok()) << create.status().ToString();
  EXPECT_EQ(create->secrets, (std::vector<std::string>{"A_TOKEN", "B_TOKEN", "C_TOKEN"}));
  EXPECT_EQ(BuildCreateSandboxRequest(*create)["secrets"].size(), 3u);
  auto plain = ParseSandboxOptions({"create"}, Env());
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(BuildCreateSandboxRequest(*plain).contains("secrets"));
}

}  // namespace
}  // namespace corral::cli
