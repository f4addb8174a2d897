// BuildCache (supervisor/images/build_cache.h): entries by step key, and Retain, which prune
// uses to drop the entries of layers gone.
#include "supervisor/images/build_cache.h"

#include <unistd.h>

#include <set>
#include <string>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "tests/testing/temp_dir.h"

namespace corral::supervisor {
namespace {

std::string Digest(char c) { return "sha256:" + std::string(64, c); }

TEST(BuildCache, PutLookupAndRetain) {
  test::TempDir tmp("build-cache");
  BuildCache cache(tmp.Join("build-cache.json"));
  EXPECT_FALSE(cache.Lookup("k1").has_value());
  // Retain on no file at all is nothing to do.
  auto none = cache.Retain([](const std::string&) { return false; });
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0u);
  ASSERT_TRUE(cache.Put("k1", {Digest('a'), 10}).ok());
  ASSERT_TRUE(cache.Put("k2", {Digest('b'), 20}).ok());
  ASSERT_TRUE(cache.Put("k3", {Digest('a'), 10}).ok());
  ASSERT_TRUE(cache.Lookup("k2").has_value());
  EXPECT_EQ(cache.Lookup("k2")->diff_id, Digest('b'));
  EXPECT_EQ(cache.Lookup("k2")->bytes, 20u);
  // Layer b is gone: its entry goes, a's two stay (the control).
  const std::set<std::string> live = {Digest('a')};
  auto dropped = cache.Retain([&](const std::string& diff_id) { return live.count(diff_id) > 0; });
  ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
  EXPECT_EQ(*dropped, 1u);
  EXPECT_FALSE(cache.Lookup("k2").has_value());
  EXPECT_TRUE(cache.Lookup("k1").has_value());
  EXPECT_TRUE(cache.Lookup("k3").has_value());
  // The file itself says so (a fresh reader).
  EXPECT_FALSE(BuildCache(tmp.Join("build-cache.json")).Lookup("k2").has_value());
}

TEST(BuildCache, ACorruptFileIsAnEmptyCacheThatRetainRewrites) {
  test::TempDir tmp("build-cache");
  const std::string path = tmp.Join("build-cache.json");
  ASSERT_TRUE(WriteNewFile(path, "{not json", 0600).ok());
  BuildCache cache(path);
  EXPECT_FALSE(cache.Lookup("k1").has_value());
  ASSERT_TRUE(cache.Put("k1", {Digest('c'), 1}).ok());
  EXPECT_TRUE(cache.Lookup("k1").has_value());
  // An entry of the wrong shape is dropped as dead.
  ASSERT_EQ(unlink(path.c_str()), 0);
  ASSERT_TRUE(WriteNewFile(path, R"({"k1": {"diff_id": 5}, "k2": {"diff_id": ")" + Digest('d') + R"("}})", 0600).ok());
  auto dropped = cache.Retain([](const std::string&) { return true; });
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, 1u);
  EXPECT_TRUE(cache.Lookup("k2").has_value());
}

}  // namespace
}  // namespace corral::supervisor
