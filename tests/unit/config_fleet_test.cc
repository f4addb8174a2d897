// corrald.toml's [store] and [node] (supervisor/config_fleet.h): where the store is, and this
// corrald as a node of a fleet. The rest of the config: config_test.cc.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "supervisor/config.h"

namespace corral::supervisor {
namespace {

std::string ErrorOf(const std::string& text) {
  auto parsed = ParseConfig(text, "corrald.toml");
  EXPECT_FALSE(parsed.ok()) << "parsed:\n" << text;
  return parsed.ok() ? "" : parsed.status().message();
}

TEST(ConfigTest, StoreKeys) {
  auto sqlite = ParseConfig("");
  ASSERT_TRUE(sqlite.ok());
  EXPECT_FALSE(sqlite->store_postgresql);  // the default: SQLite in the state dir
  auto url = ParseConfig("[store]\nbackend = \"postgresql\"\nurl = \"postgresql://corral@db/corral\"\n");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  EXPECT_TRUE(url->store_postgresql);
  EXPECT_EQ(url->store_url, "postgresql://corral@db/corral");
  auto file = ParseConfig("[store]\nbackend = \"postgresql\"\nurl_file = \"/etc/corral/store-url\"\n");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->store_url_file, "/etc/corral/store-url");

  EXPECT_EQ(ErrorOf("[store]\nbackend = \"mysql\"\n"),
            "corrald.toml:2: store.backend: expected \"sqlite\" or \"postgresql\"");
  EXPECT_EQ(ErrorOf("[store]\nbackend = \"postgresql\"\n"),
            "corrald.toml:2: store.backend = \"postgresql\" needs one of store.url and store.url_file (the "
            "connection string, or a file holding it)");
  EXPECT_EQ(ErrorOf("[store]\nbackend = \"postgresql\"\nurl = \"x\"\nurl_file = \"/etc/u\"\n"),
            "corrald.toml:2: store.backend = \"postgresql\" needs one of store.url and store.url_file (the "
            "connection string, or a file holding it)");
  EXPECT_EQ(ErrorOf("[store]\nurl = \"postgresql://db\"\n"),
            "corrald.toml:2: store.url and store.url_file are for store.backend = \"postgresql\"");
  EXPECT_EQ(ErrorOf("[store]\nbackend = \"postgresql\"\nurl = \"\"\n"),
            "corrald.toml:3: store.url: expected a connection string like \"postgresql://corral@db.internal/corral\"");
  EXPECT_EQ(ErrorOf("[store]\nbackend = \"postgresql\"\nurl_file = \"relative\"\n"),
            "corrald.toml:3: store.url_file: expected an absolute path");
}

TEST(ConfigTest, NodeKeys) {
  auto parsed = ParseConfig("[node]\nid = \"host-a.dc1\"\naddress = \"10.0.0.5:7080\"\nheartbeat = 2\ndead_after = 4\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->node_id, "host-a.dc1");
  EXPECT_EQ(parsed->node_address, "10.0.0.5:7080");
  EXPECT_EQ(parsed->node_heartbeat_s, 2u);
  EXPECT_EQ(parsed->node_dead_after_s, 4u);
  EXPECT_EQ(ParseConfig("[node]\naddress = \"[fd00::5]:7080\"\n")->node_address, "[fd00::5]:7080");
  EXPECT_EQ(ParseConfig("[node]\naddress = \"node-b.internal:1\"\n")->node_address, "node-b.internal:1");
  const std::string bad_id =
      "corrald.toml:2: node.id: expected a name of letters, digits, '.', '-' and '_', at most 64 characters";
  EXPECT_EQ(ErrorOf("[node]\nid = \"a b\"\n"), bad_id);
  EXPECT_EQ(ErrorOf("[node]\nid = \"\"\n"), bad_id);
  EXPECT_EQ(ErrorOf("[node]\nid = \"" + std::string(65, 'x') + "\"\n"), bad_id);
  const std::string bad_address = "corrald.toml:2: node.address: expected host:port, like \"10.0.0.5:7080\"";
  for (const char* address : {"10.0.0.5", ":7080", "10.0.0.5:", "10.0.0.5:70800", "10.0.0.5:x", "a/b:1", "a b:1"}) {
    EXPECT_EQ(ErrorOf(std::string("[node]\naddress = \"") + address + "\"\n"), bad_address) << address;
  }
  EXPECT_EQ(ErrorOf("[node]\nheartbeat = 11\n"),
            "corrald.toml:2: node.dead_after must be at least twice node.heartbeat (which must be positive)");
  EXPECT_TRUE(ParseConfig("[node]\nheartbeat = 10\n").ok());  // control: 20 is twice 10
  EXPECT_EQ(ErrorOf("[node]\nheartbeat = 0\n"),
            "corrald.toml:2: node.dead_after must be at least twice node.heartbeat (which must be positive)");
  EXPECT_EQ(ParseConfig("[node]\ncluster_secret_file = \"/etc/corral/cluster-secret\"\n")->node_cluster_secret_file,
            "/etc/corral/cluster-secret");
  EXPECT_EQ(ErrorOf("[node]\ncluster_secret_file = \"secret\"\n"),
            "corrald.toml:2: node.cluster_secret_file: expected an absolute path");
}

TEST(ConfigReloadTest, TheStoreNeedsARestart) {
  auto live = ParseConfig("");
  auto fresh = ParseConfig("[store]\nbackend = \"postgresql\"\nurl = \"postgresql://db/c\"\n");
  ASSERT_TRUE(live.ok() && fresh.ok());
  std::vector<std::string> restart = ApplyReload(*live, *fresh);
  EXPECT_EQ(restart, std::vector<std::string>{"store"});
  EXPECT_FALSE(live->store_postgresql);
  // Control: the same store needs nothing.
  auto same = ParseConfig("");
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(ApplyReload(*live, *same).empty());
}

}  // namespace
}  // namespace corral::supervisor
