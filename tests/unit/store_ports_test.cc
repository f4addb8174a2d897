// The store's sandbox ports (store_ports.cc), on both engines: shown once per (sandbox, port), a
// second put sets `public` and is not new; listed by port; deleted one by one (ENOENT for one not
// there) or all of a sandbox at once, which says which; gone with their sandbox; and the port URL
// key, made by the first caller and the same for every later one.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include "supervisor/store/store.h"
#include "tests/unit/store_test_util.h"

namespace corral::supervisor {
namespace {

std::vector<int64_t> PortsOf(Store& store, const std::string& id) {
  std::vector<int64_t> ports;
  auto rows = store.ListPorts(id);
  EXPECT_TRUE(rows.ok()) << rows.status().ToString();
  if (rows.ok()) {
    for (const PortRow& row : *rows) ports.push_back(row.port);
  }
  return ports;
}

TEST_P(StoreEngineTest, PortsAreShownOncePerSandboxAndPort) {
  ASSERT_GT(Create("sb_a"), 0);
  ASSERT_GT(Create("sb_b"), 0);
  auto added = store_->PutPort(PortRow{"sb_a", 8000, false, 10});
  ASSERT_TRUE(added.ok()) << added.status().ToString();
  EXPECT_TRUE(*added);
  EXPECT_TRUE(*store_->PutPort(PortRow{"sb_a", 3000, false, 11}));
  EXPECT_TRUE(*store_->PutPort(PortRow{"sb_b", 8000, false, 12}));
  // Again: not new; `public` set, created_at kept.
  EXPECT_FALSE(*store_->PutPort(PortRow{"sb_a", 8000, true, 99}));
  auto rows = store_->ListPorts("sb_a");
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].port, 3000);
  EXPECT_FALSE((*rows)[0].is_public);
  EXPECT_EQ((*rows)[1].port, 8000);
  EXPECT_TRUE((*rows)[1].is_public);
  EXPECT_EQ((*rows)[1].created_at, 10);
  EXPECT_EQ(PortsOf(*store_, "sb_b"), std::vector<int64_t>{8000});
  EXPECT_TRUE(PortsOf(*store_, "sb_none").empty());
}

TEST_P(StoreEngineTest, PortsAreDeletedOneByOneOrAllOfASandbox) {
  ASSERT_GT(Create("sb_a"), 0);
  ASSERT_GT(Create("sb_b"), 0);
  for (int64_t port : {3000, 8000, 9000}) ASSERT_TRUE(store_->PutPort(PortRow{"sb_a", port, false, 1}).ok());
  ASSERT_TRUE(store_->PutPort(PortRow{"sb_b", 3000, false, 1}).ok());
  EXPECT_TRUE(store_->DeletePort("sb_a", 3000).ok());
  EXPECT_EQ(store_->DeletePort("sb_a", 3000).error_number(), ENOENT);
  EXPECT_EQ(store_->DeletePort("sb_b", 8000).error_number(), ENOENT);
  EXPECT_EQ(PortsOf(*store_, "sb_a"), (std::vector<int64_t>{8000, 9000}));
  auto deleted = store_->DeleteSandboxPorts("sb_a");
  ASSERT_TRUE(deleted.ok()) << deleted.status().ToString();
  EXPECT_EQ(*deleted, (std::vector<int64_t>{8000, 9000}));
  EXPECT_TRUE(PortsOf(*store_, "sb_a").empty());
  EXPECT_TRUE(store_->DeleteSandboxPorts("sb_a")->empty());
  EXPECT_EQ(PortsOf(*store_, "sb_b"), std::vector<int64_t>{3000});  // another sandbox's stay
  // A sandbox's ports go with it.
  ASSERT_TRUE(store_->DeleteSandbox("sb_b").ok());
  EXPECT_TRUE(PortsOf(*store_, "sb_b").empty());
  EXPECT_EQ(RawExec("SELECT count(*) FROM sandbox_ports"), "0");
}

TEST_P(StoreEngineTest, ThePortUrlKeyIsTheFirstCallersForEveryone) {
  const std::string first(32, '\x01');
  const std::string second(32, '\x02');
  auto key = store_->PortUrlKey(first);
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_EQ(*key, first);
  EXPECT_EQ(*store_->PortUrlKey(second), first);
  // Any bytes (NUL, high bits) come back as they went in.
  RawExec("DELETE FROM port_url_key");
  const std::string binary = std::string("\x00\xff", 2) + std::string(30, '\x80');
  EXPECT_EQ(*store_->PortUrlKey(binary), binary);
}

CORRAL_STORE_ON_BOTH_ENGINES();

}  // namespace
}  // namespace corral::supervisor
