// corrald.toml's [ports] (supervisor/config_ports.h): preview URLs' domain and bounds.
#include <gtest/gtest.h>

#include <string>

#include "supervisor/config.h"

namespace corral::supervisor {
namespace {

std::string PortsError(const std::string& text) {
  auto parsed = ParseConfig("[ports]\n" + text, "corrald.toml");
  EXPECT_FALSE(parsed.ok()) << "parsed:\n" << text;
  return parsed.ok() ? "" : parsed.status().message();
}

TEST(ConfigPortsTest, KeysAndDefaults) {
  auto defaults = ParseConfig("");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->ports.domain, "");
  EXPECT_EQ(defaults->ports.max_connections_per_port, 64u);
  EXPECT_EQ(defaults->ports.max_ttl_s, 86400u);
  EXPECT_EQ(defaults->ports.idle_timeout_s, 300u);
  auto set = ParseConfig(
      "[ports]\ndomain = \"preview.example.com\"\nmax_connections_per_port = 8\nmax_ttl = 600\nidle_timeout = 30\n");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->ports.domain, "preview.example.com");
  EXPECT_EQ(set->ports.max_connections_per_port, 8u);
  EXPECT_EQ(set->ports.max_ttl_s, 600u);
  EXPECT_EQ(set->ports.idle_timeout_s, 30u);
}

TEST(ConfigPortsTest, BadValuesNameTheKey) {
  for (const char* domain : {"Preview.example.com", ".example.com", "example.com.", "a..b", "-a.b", "a b", "a_b.c"}) {
    EXPECT_NE(PortsError(std::string("domain = \"") + domain + "\"\n").find("ports.domain"), std::string::npos) << domain;
  }
  EXPECT_NE(PortsError("max_connections_per_port = 0\n").find("ports.max_connections_per_port"), std::string::npos);
  EXPECT_NE(PortsError("max_ttl = -1\n").find("ports.max_ttl"), std::string::npos);
  EXPECT_NE(PortsError("idle_timeout = \"5\"\n").find("ports.idle_timeout"), std::string::npos);
  EXPECT_NE(PortsError("doman = \"x\"\n").find("unknown key"), std::string::npos);
}

}  // namespace
}  // namespace corral::supervisor
