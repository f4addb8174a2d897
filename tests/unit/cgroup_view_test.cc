// What the backends tell the sandbox's view of its cgroup (rootfs binds it at /sys/fs/cgroup)
// and the limits they read back for the commands' cgroups, on a temporary directory laid out
// like a hierarchy. AttachToNewLeaf needs the kernel: tests/root/cgroups_test.cc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cgroups/cgroup_backend.h"
#include "common/file_util.h"
#include "tests/testing/temp_dir.h"

namespace corral::cgroups {
namespace {

TEST(CgroupViewTest, V2ShowsTheCgroupItself) {
  test::TempDir tree("cgview");
  std::unique_ptr<CgroupBackend> owned = MakeV2Backend(tree.path());
  CgroupBackend& backend = *owned;
  auto dirs = backend.ViewDirs("corral/sb_x");
  ASSERT_TRUE(dirs.ok());
  ASSERT_EQ(dirs->size(), 1u);
  EXPECT_EQ((*dirs)[0].host_dir, tree.path() + "/corral/sb_x");
  EXPECT_EQ((*dirs)[0].name, "");
  EXPECT_FALSE(backend.ViewDirs("../escape").ok());
}

TEST(CgroupViewTest, V2ReadsLimitsBackInSetLimitsTerms) {
  test::TempDir tree("cgview");
  tree.Put("sb/memory.max", "268435456\n");
  tree.Put("sb/cpu.max", "50000 100000\n");
  tree.Put("sb/pids.max", "64\n");
  std::unique_ptr<CgroupBackend> owned = MakeV2Backend(tree.path());
  CgroupBackend& backend = *owned;
  auto limits = backend.ReadLimits("sb");
  ASSERT_TRUE(limits.ok()) << limits.status().ToString();
  EXPECT_EQ(limits->memory_max_bytes, 268435456u);
  EXPECT_EQ(limits->cpu_quota_us, 50000u);
  EXPECT_EQ(limits->cpu_period_us, 100000u);
  EXPECT_EQ(limits->pids_max, 64u);
}

TEST(CgroupViewTest, V2MaxAndMissingFilesAreNoLimit) {
  test::TempDir tree("cgview");
  tree.Put("sb/memory.max", "max\n");
  tree.Put("sb/cpu.max", "max 100000\n");
  // No pids.max: the controller is not enabled there.
  std::unique_ptr<CgroupBackend> owned = MakeV2Backend(tree.path());
  CgroupBackend& backend = *owned;
  auto limits = backend.ReadLimits("sb");
  ASSERT_TRUE(limits.ok()) << limits.status().ToString();
  EXPECT_FALSE(limits->memory_max_bytes.has_value());
  EXPECT_FALSE(limits->cpu_quota_us.has_value());
  EXPECT_FALSE(limits->pids_max.has_value());
  // Garbage is an error, not "no limit".
  tree.Put("bad/memory.max", "lots\n");
  EXPECT_FALSE(backend.ReadLimits("bad").ok());
}

TEST(CgroupViewTest, V2LimitsRoundTripThroughSetLimits) {
  test::TempDir tree("cgview");
  for (const char* file : {"memory.max", "memory.swap.max", "cpu.max", "pids.max"}) tree.Put(std::string("sb/") + file, "");
  std::unique_ptr<CgroupBackend> owned = MakeV2Backend(tree.path());
  CgroupBackend& backend = *owned;
  CgroupLimits limits;
  limits.memory_max_bytes = 1 << 30;
  limits.cpu_quota_us = 150000;
  limits.pids_max = 100;
  ASSERT_TRUE(backend.SetLimits("sb", limits).ok());
  auto read = backend.ReadLimits("sb");
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->memory_max_bytes, limits.memory_max_bytes);
  EXPECT_EQ(read->cpu_quota_us, limits.cpu_quota_us);
  EXPECT_EQ(read->cpu_period_us, limits.cpu_period_us);
  EXPECT_EQ(read->pids_max, limits.pids_max);
}

void MakeV1(const test::TempDir& tree) {
  for (const char* controller : {"memory", "cpu", "cpuacct", "pids", "freezer"}) {
    ASSERT_TRUE(MakeDirs(tree.path() + "/" + controller).ok());
  }
}

TEST(CgroupViewTest, V1ShowsOneDirectoryPerController) {
  test::TempDir tree("cgview");
  MakeV1(tree);
  ASSERT_TRUE(MakeDirs(tree.path() + "/blkio").ok());  // not ours: not shown
  std::unique_ptr<CgroupBackend> owned = MakeV1Backend(tree.path());
  CgroupBackend& backend = *owned;
  auto dirs = backend.ViewDirs("corral/sb_x");
  ASSERT_TRUE(dirs.ok()) << dirs.status().ToString();
  std::vector<std::string> names, sources;
  for (const auto& dir : *dirs) {
    names.push_back(dir.name);
    sources.push_back(dir.host_dir);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"memory", "cpu", "cpuacct", "pids", "freezer"}));
  EXPECT_EQ(sources[0], tree.path() + "/memory/corral/sb_x");
  EXPECT_EQ(sources[1], tree.path() + "/cpu/corral/sb_x");
}

TEST(CgroupViewTest, V1LeavesOutAControllerThatIsNotMounted) {
  test::TempDir tree("cgview");
  MakeV1(tree);
  ASSERT_EQ(::rmdir((tree.path() + "/cpu").c_str()), 0);
  std::unique_ptr<CgroupBackend> owned = MakeV1Backend(tree.path());
  CgroupBackend& backend = *owned;
  auto dirs = backend.ViewDirs("sb");
  ASSERT_TRUE(dirs.ok());
  for (const auto& dir : *dirs) EXPECT_NE(dir.name, "cpu");
  EXPECT_EQ(dirs->size(), 4u);
}

TEST(CgroupViewTest, V1ReadsLimitsBackInV2Terms) {
  test::TempDir tree("cgview");
  MakeV1(tree);
  tree.Put("memory/sb/memory.limit_in_bytes", "268435456\n");
  tree.Put("cpu/sb/cpu.cfs_quota_us", "50000\n");
  tree.Put("cpu/sb/cpu.cfs_period_us", "100000\n");
  tree.Put("pids/sb/pids.max", "64\n");
  // The kernel's "no limit" values.
  tree.Put("memory/free/memory.limit_in_bytes", "9223372036854771712\n");
  tree.Put("cpu/free/cpu.cfs_quota_us", "-1\n");
  tree.Put("cpu/free/cpu.cfs_period_us", "100000\n");
  tree.Put("pids/free/pids.max", "max\n");
  std::unique_ptr<CgroupBackend> owned = MakeV1Backend(tree.path());
  CgroupBackend& backend = *owned;
  auto limits = backend.ReadLimits("sb");
  ASSERT_TRUE(limits.ok()) << limits.status().ToString();
  EXPECT_EQ(limits->memory_max_bytes, 268435456u);
  EXPECT_EQ(limits->cpu_quota_us, 50000u);
  EXPECT_EQ(limits->cpu_period_us, 100000u);
  EXPECT_EQ(limits->pids_max, 64u);
  auto free = backend.ReadLimits("free");
  ASSERT_TRUE(free.ok()) << free.status().ToString();
  EXPECT_FALSE(free->memory_max_bytes.has_value());
  EXPECT_FALSE(free->cpu_quota_us.has_value());
  EXPECT_FALSE(free->pids_max.has_value());
}

}  // namespace
}  // namespace corral::cgroups
