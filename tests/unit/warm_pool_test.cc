// WarmPool's bookkeeping (supervisor/sandboxes/warm_pool.h): what it fills, what a claim takes,
// what a lowered size gives back. No processes: entries carry only their ids here.
#include "supervisor/sandboxes/warm_pool.h"

#include <gtest/gtest.h>

namespace corral::supervisor {
namespace {

WarmPool::Entry Made(const std::string& id, const PoolShape& shape) {
  WarmPool::Entry entry;
  entry.id = id;
  entry.shape = shape;
  return entry;
}

const PoolShape kHost = ShapeOf("host", 10ull << 30, 1000);
const PoolShape kImage = ShapeOf("sha256:abc", 10ull << 30, 1000);

TEST(WarmPoolTest, ShapeCountsWholeCpus) {
  EXPECT_EQ(ShapeOf("host", 1, 1000).cpus, 1u);
  EXPECT_EQ(ShapeOf("host", 1, 1001).cpus, 2u);
  EXPECT_EQ(ShapeOf("host", 1, 500).cpus, 1u);
  EXPECT_EQ(ShapeOf("host", 1, 0).cpus, 0u);
  // 1500 and 2000 millicores pin to the same two CPUs: one shape.
  EXPECT_EQ(ShapeOf("host", 1, 1500), ShapeOf("host", 1, 2000));
  EXPECT_NE(ShapeOf("host", 1, 1000), ShapeOf("host", 2, 1000));
  EXPECT_NE(ShapeOf("host", 1, 1000), ShapeOf("sha256:abc", 1, 1000));
}

TEST(WarmPoolTest, FillsEachShapeToItsTargetCountingThoseBeingMade) {
  WarmPool pool;
  EXPECT_FALSE(pool.NextToFill(4));  // no targets: nothing to make
  pool.SetTargets({{kHost, 2}, {kImage, 1}});
  std::vector<PoolShape> started;
  while (auto shape = pool.NextToFill(10)) {
    pool.Filling(*shape);
    started.push_back(*shape);
  }
  EXPECT_EQ(started.size(), 3u);
  EXPECT_EQ(pool.filling(), 3u);
  EXPECT_EQ(std::count(started.begin(), started.end(), kHost), 2);
  // At most max_filling at once.
  WarmPool one;
  one.SetTargets({{kHost, 5}});
  ASSERT_TRUE(one.NextToFill(1));
  one.Filling(kHost);
  EXPECT_FALSE(one.NextToFill(1));
  EXPECT_FALSE(one.Filled(Made("sb_1", kHost)));  // kept
  EXPECT_TRUE(one.NextToFill(1));
}

TEST(WarmPoolTest, ClaimTakesTheOldestOfItsShapeOnly) {
  WarmPool pool;
  pool.SetTargets({{kHost, 2}, {kImage, 1}});
  for (const char* id : {"sb_a", "sb_b"}) {
    pool.Filling(kHost);
    EXPECT_FALSE(pool.Filled(Made(id, kHost)));
  }
  EXPECT_EQ(pool.ready(kHost), 2u);
  EXPECT_FALSE(pool.Take(kImage));  // none of that shape yet
  EXPECT_FALSE(pool.Take(ShapeOf("host", 10ull << 30, 2000)));  // another CPU count
  auto first = pool.Take(kHost);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->id, "sb_a");
  EXPECT_EQ(pool.NextToFill(4), kHost);  // a claim makes room for another
  // A claim that did not happen puts it back first in line.
  pool.Return(std::move(*first));
  EXPECT_EQ(pool.Take(kHost)->id, "sb_a");
  EXPECT_EQ(pool.Take(kHost)->id, "sb_b");
  EXPECT_FALSE(pool.Take(kHost));
}

TEST(WarmPoolTest, LoweredTargetsGiveBackTheNewest) {
  WarmPool pool;
  pool.SetTargets({{kHost, 3}, {kImage, 1}});
  for (const char* id : {"sb_a", "sb_b", "sb_c"}) {
    pool.Filling(kHost);
    pool.Filled(Made(id, kHost));
  }
  pool.Filling(kImage);
  pool.Filled(Made("sb_i", kImage));
  EXPECT_TRUE(pool.Excess().empty());
  pool.SetTargets({{kHost, 1}});  // kImage no longer wanted at all
  std::vector<WarmPool::Entry> excess = pool.Excess();
  std::vector<std::string> ids;
  for (const auto& entry : excess) ids.push_back(entry.id);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<std::string>{"sb_b", "sb_c", "sb_i"}));
  EXPECT_EQ(pool.ready(), 1u);
  EXPECT_EQ(pool.Take(kHost)->id, "sb_a");
  // One made after its shape stopped being wanted comes back to be destroyed.
  pool.Filling(kImage);
  auto unwanted = pool.Filled(Made("sb_late", kImage));
  ASSERT_TRUE(unwanted);
  EXPECT_EQ(unwanted->id, "sb_late");
  EXPECT_EQ(pool.filling(), 0u);
}

TEST(WarmPoolTest, TakeIdAndTakeAllEmptyIt) {
  WarmPool pool;
  pool.SetTargets({{kHost, 2}});
  pool.Filling(kHost);
  pool.Filled(Made("sb_a", kHost));
  pool.Filling(kHost);
  pool.Filled(Made("sb_b", kHost));
  EXPECT_FALSE(pool.TakeId("sb_zzz"));
  EXPECT_EQ(pool.TakeId("sb_b")->id, "sb_b");
  EXPECT_EQ(pool.ready(), 1u);
  EXPECT_EQ(pool.TakeAll().size(), 1u);
  EXPECT_EQ(pool.ready(), 0u);
  // A failed fill frees its place.
  pool.Filling(kHost);
  EXPECT_EQ(pool.filling(), 1u);
  pool.FillFailed(kHost);
  EXPECT_EQ(pool.filling(), 0u);
}

}  // namespace
}  // namespace corral::supervisor
