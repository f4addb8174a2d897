// A request head rewritten for a sandbox's secrets (supervisor/egress/secret_tls.h): a secret goes
// only into a request its binding matches, only for the host the connection is to, and the
// placeholder of a secret that does not match stays as it is.
#include <gtest/gtest.h>

#include <boost/beast/http.hpp>

#include "common/base64.h"
#include "supervisor/egress/secret_tls.h"

namespace corral::supervisor {
namespace {

namespace http = boost::beast::http;

SandboxSecret Secret(const std::string& name, const std::string& value, SecretBinding binding) {
  return SandboxSecret{name, "corral-placeholder-" + name, {std::move(binding)}, value};
}

SecretBinding Bearer(std::vector<std::string> hosts) {
  SecretBinding binding;
  binding.hosts = std::move(hosts);
  return binding;
}

http::request<http::empty_body> Request(http::verb method, const std::string& target, const std::string& host) {
  http::request<http::empty_body> request{method, target, 11};
  request.set(http::field::host, host);
  return request;
}

TEST(InjectSecretsTest, ABoundHostGetsTheHeaderAndTheUnboundNothing) {
  const std::vector<SandboxSecret> secrets = {Secret("GH", "ghp_real", Bearer({"api.github.test"}))};
  auto request = Request(http::verb::get, "/user", "api.github.test");
  request.set(http::field::authorization, "Bearer corral-placeholder-GH");
  EXPECT_EQ(InjectSecrets(request, "api.github.test", 443, secrets), std::vector<std::string>{"GH"});
  EXPECT_EQ(request[http::field::authorization], "Bearer ghp_real");

  // Another host (the connection's), or another port: nothing, the placeholder as it was.
  auto other = Request(http::verb::get, "/user", "evil.test");
  other.set(http::field::authorization, "Bearer corral-placeholder-GH");
  EXPECT_TRUE(InjectSecrets(other, "evil.test", 443, secrets).empty());
  EXPECT_EQ(other[http::field::authorization], "Bearer corral-placeholder-GH");
  auto port = Request(http::verb::get, "/user", "api.github.test:8443");
  EXPECT_TRUE(InjectSecrets(port, "api.github.test", 8443, secrets).empty());
  EXPECT_EQ(port.count(http::field::authorization), 0u);
}

TEST(InjectSecretsTest, AHostHeaderThatIsNotTheConnectionsGetsNothing) {
  const std::vector<SandboxSecret> secrets = {Secret("GH", "ghp_real", Bearer({"api.github.test"}))};
  // A CONNECT to the bound host, with a request that says it is for another one.
  auto lying = Request(http::verb::get, "/", "evil.test");
  EXPECT_TRUE(InjectSecrets(lying, "api.github.test", 443, secrets).empty());
  EXPECT_EQ(lying.count(http::field::authorization), 0u);
  // Two Host headers.
  auto two = Request(http::verb::get, "/", "api.github.test");
  two.insert(http::field::host, "evil.test");
  EXPECT_TRUE(InjectSecrets(two, "api.github.test", 443, secrets).empty());
  // No Host (HTTP/1.0 style).
  http::request<http::empty_body> none{http::verb::get, "/", 10};
  EXPECT_TRUE(InjectSecrets(none, "api.github.test", 443, secrets).empty());
  // A Host with the wrong port.
  auto wrong_port = Request(http::verb::get, "/", "api.github.test:444");
  EXPECT_TRUE(InjectSecrets(wrong_port, "api.github.test", 443, secrets).empty());
  // An absolute-form target (the server might route it elsewhere) or "*".
  auto absolute = Request(http::verb::get, "https://evil.test/", "api.github.test");
  EXPECT_TRUE(InjectSecrets(absolute, "api.github.test", 443, secrets).empty());
  auto star = Request(http::verb::options, "*", "api.github.test");
  EXPECT_TRUE(InjectSecrets(star, "api.github.test", 443, secrets).empty());
  // The controls: any case, a trailing dot, the port said.
  auto fine = Request(http::verb::get, "/", "API.GitHub.test.:443");
  EXPECT_EQ(InjectSecrets(fine, "api.github.test", 443, secrets), std::vector<std::string>{"GH"});
}

TEST(InjectSecretsTest, MethodsAndPathPrefixesAreMatchedOnTheNormalizedPath) {
  SecretBinding binding = Bearer({"registry.test"});
  binding.methods = {"GET"};
  binding.path_prefixes = {"/private/"};
  const std::vector<SandboxSecret> secrets = {Secret("NPM", "npm_real", binding)};
  auto get = Request(http::verb::get, "/private/pkg?x=1", "registry.test");
  EXPECT_EQ(InjectSecrets(get, "registry.test", 443, secrets), std::vector<std::string>{"NPM"});
  auto put = Request(http::verb::put, "/private/pkg", "registry.test");
  EXPECT_TRUE(InjectSecrets(put, "registry.test", 443, secrets).empty());
  auto outside = Request(http::verb::get, "/public/pkg", "registry.test");
  EXPECT_TRUE(InjectSecrets(outside, "registry.test", 443, secrets).empty());
  auto climbing = Request(http::verb::get, "/private/../public/pkg", "registry.test");
  EXPECT_TRUE(InjectSecrets(climbing, "registry.test", 443, secrets).empty());
  auto encoded = Request(http::verb::get, "/private/%2e%2e/public", "registry.test");
  EXPECT_TRUE(InjectSecrets(encoded, "registry.test", 443, secrets).empty());
}

TEST(InjectSecretsTest, PlaceholdersAreReplacedOnlyForTheSecretsThatMatch) {
  SecretBinding header = Bearer({"api.test"});
  header.header = "X-Api-Key";
  header.value_template = "{secret}";
  const std::vector<SandboxSecret> secrets = {Secret("API", "api_real", header),
                                              Secret("OTHER", "other_real", Bearer({"other.test"}))};
  auto request = Request(http::verb::post, "/v1/things", "api.test");
  request.set("X-Custom", "key=corral-placeholder-API; also corral-placeholder-OTHER");
  EXPECT_EQ(InjectSecrets(request, "api.test", 443, secrets), std::vector<std::string>{"API"});
  EXPECT_EQ(request["X-Api-Key"], "api_real");
  EXPECT_EQ(request["X-Custom"], "key=api_real; also corral-placeholder-OTHER");
}

TEST(InjectSecretsTest, BasicAuthAndWildcardHosts) {
  SecretBinding basic = Bearer({"*.git.test"});
  basic.how = SecretBinding::How::kBasic;
  basic.user = "x-access-token";
  const std::vector<SandboxSecret> secrets = {Secret("GIT", "tok", basic)};
  auto request = Request(http::verb::get, "/org/repo.git/info/refs?service=git-receive-pack", "code.git.test");
  request.set(http::field::authorization, "Basic " + Base64Encode("x:corral-placeholder-GIT"));
  EXPECT_EQ(InjectSecrets(request, "code.git.test", 443, secrets), std::vector<std::string>{"GIT"});
  EXPECT_EQ(request[http::field::authorization], "Basic " + Base64Encode("x-access-token:tok"));
  // *.git.test is not git.test itself.
  auto apex = Request(http::verb::get, "/", "git.test");
  EXPECT_TRUE(InjectSecrets(apex, "git.test", 443, secrets).empty());
  EXPECT_TRUE(SecretsBoundTo(secrets, "code.git.test", 443));
  EXPECT_FALSE(SecretsBoundTo(secrets, "git.test", 443));
  EXPECT_FALSE(SecretsBoundTo(secrets, "code.git.test", 80));
}

}  // namespace
}  // namespace corral::supervisor
