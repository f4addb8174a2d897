// Where a secret may go (supervisor/secrets/secret_binding.h): the host, port, method and path a
// binding names, and nothing that only looks like them; the header it adds.
#include "supervisor/secrets/secret_binding.h"

#include <gtest/gtest.h>

#include "common/base64.h"

namespace corral::supervisor {
namespace {

SecretBinding GitHub() {
  SecretBinding b;
  b.hosts = {"github.com", "*.github.com"};
  return b;
}

TEST(SecretBindingTest, HostsMatchExactlyOrBelowASuffix) {
  const SecretBinding b = GitHub();
  ASSERT_TRUE(ValidateBinding(b).ok());
  for (const char* host : {"github.com", "GitHub.com", "github.com.", "api.github.com", "a.b.github.com"}) {
    EXPECT_TRUE(BindingMatches(b, host, 443, "GET", "/")) << host;
  }
  for (const char* host : {"github.com.evil.test", "evilgithub.com", "github.co", "xgithub.com", "githubXcom",
                           "api.github.com.evil", "", "."}) {
    EXPECT_FALSE(BindingMatches(b, host, 443, "GET", "/")) << host;
  }
  SecretBinding below_only;
  below_only.hosts = {"*.example.com"};
  EXPECT_FALSE(BindingMatches(below_only, "example.com", 443, "GET", "/"));  // not the suffix itself
  EXPECT_TRUE(BindingMatches(below_only, "x.example.com", 443, "GET", "/"));
}

TEST(SecretBindingTest, PortsMethodsAndPathsNarrowIt) {
  SecretBinding b = GitHub();
  EXPECT_FALSE(BindingMatches(b, "github.com", 80, "GET", "/"));  // 443 unless named
  b.ports = {443, 8443};
  b.methods = {"GET", "POST"};
  b.path_prefixes = {"/repos/acme/", "/user"};
  ASSERT_TRUE(ValidateBinding(b).ok());
  EXPECT_TRUE(BindingMatches(b, "github.com", 8443, "POST", "/repos/acme/app/pulls?x=1"));
  EXPECT_TRUE(BindingMatches(b, "github.com", 443, "GET", "/user"));
  EXPECT_TRUE(BindingMatches(b, "github.com", 443, "GET", "/user/keys"));
  EXPECT_FALSE(BindingMatches(b, "github.com", 443, "GET", "/users"));      // not below /user
  EXPECT_FALSE(BindingMatches(b, "github.com", 443, "DELETE", "/user"));
  EXPECT_FALSE(BindingMatches(b, "github.com", 444, "GET", "/user"));
  EXPECT_FALSE(BindingMatches(b, "github.com", 443, "get", "/user"));       // methods are exact
  EXPECT_FALSE(BindingMatches(b, "github.com", 443, "GET", "/repos/other/app"));
  // Paths that only look as if they were below a prefix.
  for (const char* path : {"/repos/acme/../other/app", "/repos/acme/%2e%2e/other", "/repos/acme%2fx",
                           "/repos/acme/..%2Fother", "/repos\\acme/x", "/repos/acme/%5c..", "/repos/acme/.."}) {
    EXPECT_FALSE(BindingMatches(b, "github.com", 443, "GET", path)) << path;
  }
  EXPECT_TRUE(BindingMatches(b, "github.com", 443, "GET", "/repos/./acme//app/../app2"));  // resolves inside
}

TEST(SecretBindingTest, NormalizedPathResolvesDotSegments) {
  EXPECT_EQ(*NormalizedPath("/a/b/../c"), "/a/c");
  EXPECT_EQ(*NormalizedPath("/a/./b/"), "/a/b/");
  EXPECT_EQ(*NormalizedPath("/../../x"), "/x");
  EXPECT_EQ(*NormalizedPath("/a/.."), "/");
  EXPECT_EQ(*NormalizedPath(""), "/");
  EXPECT_FALSE(NormalizedPath("/a/%2E%2E/b").has_value());
  EXPECT_FALSE(NormalizedPath("/a\\b").has_value());
}

TEST(SecretBindingTest, BadBindingsAreRefused) {
  auto bad = [](auto edit) {
    SecretBinding b = GitHub();
    edit(b);
    return ValidateBinding(b).error_number();
  };
  EXPECT_EQ(bad([](SecretBinding& b) { b.hosts.clear(); }), EINVAL);
  for (const char* host : {"*", "*.", "a*b.com", "GitHub.com", "-x.com", "x..com", "exa mple.com", "*.*.com", ""}) {
    EXPECT_EQ(bad([&](SecretBinding& b) { b.hosts = {host}; }), EINVAL) << host;
  }
  EXPECT_EQ(bad([](SecretBinding& b) { b.ports = {0}; }), EINVAL);
  EXPECT_EQ(bad([](SecretBinding& b) { b.methods = {"get"}; }), EINVAL);
  EXPECT_EQ(bad([](SecretBinding& b) { b.methods = {"GE T"}; }), EINVAL);
  EXPECT_EQ(bad([](SecretBinding& b) { b.path_prefixes = {"repos"}; }), EINVAL);
  EXPECT_EQ(bad([](SecretBinding& b) { b.path_prefixes = {"/a/../b"}; }), EINVAL);
  for (const char* header : {"Host", "content-length", "Transfer-Encoding", "Connection", "Proxy-Authorization",
                             "X Bad", ""}) {
    EXPECT_EQ(bad([&](SecretBinding& b) { b.header = header; }), EINVAL) << header;
  }
  for (const char* value : {"Bearer", "{secret} {secret}", "Bearer {secret}\r\nX-Evil: 1"}) {
    EXPECT_EQ(bad([&](SecretBinding& b) { b.value_template = value; }), EINVAL) << value;
  }
  EXPECT_EQ(bad([](SecretBinding& b) {
              b.how = SecretBinding::How::kBasic;
              b.user = "a:b";
            }),
            EINVAL);
  EXPECT_EQ(bad([](SecretBinding&) {}), 0);  // control
}

TEST(SecretBindingTest, TheHeaderItAdds) {
  SecretBinding b = GitHub();
  EXPECT_EQ(BindingHeader(b, "ghp_x"), (std::pair<std::string, std::string>{"Authorization", "Bearer ghp_x"}));
  b.header = "X-Api-Key";
  b.value_template = "{secret}";
  EXPECT_EQ(BindingHeader(b, "k1"), (std::pair<std::string, std::string>{"X-Api-Key", "k1"}));
  b.how = SecretBinding::How::kBasic;
  b.user = "x-access-token";
  EXPECT_EQ(BindingHeader(b, "ghp_x").second, "Basic " + Base64Encode("x-access-token:ghp_x"));
  EXPECT_TRUE(ValidateSecretValue("ghp_x").ok());
  EXPECT_EQ(ValidateSecretValue("").error_number(), EINVAL);
  EXPECT_EQ(ValidateSecretValue("a\r\nX-Evil: 1").error_number(), EINVAL);
  EXPECT_EQ(ValidateSecretValue(std::string(8193, 'a')).error_number(), EINVAL);
  EXPECT_EQ(ValidateSecretValue("a\r\nX").message().find("a\r\nX"), std::string::npos);  // never the value
}

TEST(SecretBindingTest, TheJsonFormRoundTripsAndIsChecked) {
  const nlohmann::json j = nlohmann::json::parse(R"([
    {"hosts": ["github.com"], "ports": [443], "methods": ["GET"], "path_prefixes": ["/repos/"],
     "header": "Authorization", "value": "token {secret}"},
    {"hosts": ["*.npm.acme.test"], "basic_user": "ci"}])");
  auto parsed = ParseSecretBindings(j, "bindings");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].value_template, "token {secret}");
  EXPECT_EQ((*parsed)[1].how, SecretBinding::How::kBasic);
  EXPECT_EQ(*ParseSecretBindings(SecretBindingsJson(*parsed), "again"), *parsed);
  for (const char* bad : {R"([])", R"({})", R"([{"hosts": []}])", R"([{"hosts": ["x.test"], "port": [1]}])",
                          R"([{"hosts": ["x.test"], "ports": [0]}])", R"([{"hosts": ["x.test"], "ports": ["443"]}])",
                          R"([{"hosts": ["x.test"], "basic_user": "u", "header": "X-A"}])",
                          R"([{"hosts": ["x.test"], "value": "no placeholder"}])", R"([{"hosts": "x.test"}])"}) {
    auto refused = ParseSecretBindings(nlohmann::json::parse(bad), "bindings");
    EXPECT_EQ(refused.status().error_number(), EINVAL) << bad;
    EXPECT_NE(refused.status().message().find("bindings"), std::string::npos) << refused.status().message();
  }
  nlohmann::json many = nlohmann::json::array();
  for (int i = 0; i < 17; ++i) many.push_back({{"hosts", {"x.test"}}});
  EXPECT_EQ(ParseSecretBindings(many, "bindings").status().error_number(), EINVAL);
}

}  // namespace
}  // namespace corral::supervisor
