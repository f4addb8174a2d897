// What both cgroup backends share: name validation, keyed-file parsing, detection by file
// system type. Each backend against its fake hierarchy: cgroups_v1_test.cc, cgroups_v2_test.cc.
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cgroups/cgroup_backend.h"
#include "cgroups/cgroup_fs.h"
#include "common/file_util.h"
#include "tests/testing/temp_dir.h"

namespace corral::cgroups {
namespace {

using ::testing::TestWithParam;

// ---------------------------------------------------------------------------------------------
// What both backends share

struct BackendCase {
  const char* label;
  std::function<std::unique_ptr<CgroupBackend>(const std::string& root)> make;
};

class NameValidationTest : public TestWithParam<BackendCase> {};

TEST_P(NameValidationTest, EveryCallRejectsBadNames) {
  test::TempDir tmp("cgroups");
  std::unique_ptr<CgroupBackend> backend = GetParam().make(tmp.path());
  CgroupLimits limits;
  limits.pids_max = 1;
  const std::vector<std::string> bad_names = {
      "",    "/abs", "a/../b", "..", "a/..", ".", "a/./b", "a//b", "a/", std::string("a\0b", 3),
      "a\nb"};
  for (const std::string& bad : bad_names) {
    SCOPED_TRACE("name \"" + bad + "\"");
    EXPECT_FALSE(backend->Create(bad).ok());
    EXPECT_FALSE(backend->SetLimits(bad, limits).ok());
    EXPECT_FALSE(backend->Attach(bad, 1).ok());
    EXPECT_FALSE(backend->OpenForClone(bad).ok());
    EXPECT_FALSE(backend->OpenSelfJoin(bad).ok());
    EXPECT_FALSE(backend->Stats(bad).ok());
    EXPECT_FALSE(backend->CpuUsageUsec(bad).ok());
    EXPECT_FALSE(backend->Procs(bad).ok());
    EXPECT_FALSE(backend->Freeze(bad).ok());
    EXPECT_FALSE(backend->Thaw(bad).ok());
    EXPECT_FALSE(backend->Kill(bad).ok());
    EXPECT_FALSE(backend->Destroy(bad).ok());
    EXPECT_FALSE(backend->ListChildren(bad).ok());
    EXPECT_FALSE(backend->RemoveIfEmpty(bad).ok());
  }
  // Nothing was created outside (or inside) the root.
  StatusOr<std::vector<std::string>> left = ListSubdirectories(tmp.path());
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());
  EXPECT_TRUE(ValidateCgroupName("corral/run-1.a_b").ok());
}

INSTANTIATE_TEST_SUITE_P(
    Backends, NameValidationTest,
    ::testing::Values(
        BackendCase{"V1", [](const std::string& root) { return MakeV1Backend(root); }},
        BackendCase{"V2", [](const std::string& root) { return MakeV2Backend(root); }}),
    [](const ::testing::TestParamInfo<BackendCase>& param_info) {
      return std::string(param_info.param.label);
    });

TEST(KeyedFileTest, MatchesWholeKeysOnly) {
  const std::string events = "oom 3\noom_group_kill 5\noom_kill 1\nmax 9\n";
  EXPECT_EQ(FindKeyedValue(events, "oom_kill"), 1u);
  EXPECT_EQ(FindKeyedValue(events, "oom"), 3u);
  EXPECT_EQ(FindKeyedValue(events, "max"), 9u);
  EXPECT_EQ(FindKeyedValue(events, "oom_kil"), std::nullopt);
  EXPECT_EQ(FindKeyedValue("populated 1", "populated"), 1u);
  EXPECT_EQ(FindKeyedValue("max garbage\n", "max"), std::nullopt);
}

TEST(HasSubdirectoriesTest, OnlyADirectoryCounts) {
  test::TempDir tmp("has-subdirs");
  const std::string dir = tmp.path() + "/parent";
  StatusOr<bool> missing = HasSubdirectories(dir);
  ASSERT_TRUE(missing.ok()) << missing.status().ToString();
  EXPECT_FALSE(*missing);
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  EXPECT_FALSE(*HasSubdirectories(dir));
  // A file and a symlink to a directory are no children (ListSubdirectories agrees).
  ASSERT_TRUE(WriteNewFile(dir + "/cgroup.procs", "").ok());
  ASSERT_EQ(::symlink(tmp.path().c_str(), (dir + "/link").c_str()), 0);
  EXPECT_FALSE(*HasSubdirectories(dir));
  EXPECT_TRUE(ListSubdirectories(dir)->empty());
  ASSERT_EQ(::mkdir((dir + "/child").c_str(), 0755), 0);
  EXPECT_TRUE(*HasSubdirectories(dir));
  ASSERT_EQ(::rmdir((dir + "/child").c_str()), 0);
  EXPECT_FALSE(*HasSubdirectories(dir));
  StatusOr<bool> file = HasSubdirectories(dir + "/cgroup.procs");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().error_number(), ENOTDIR);
}

TEST(DetectBackendTest, DecidesByFileSystemType) {
  StatusOr<std::unique_ptr<CgroupBackend>> proc = DetectBackend("/proc");
  EXPECT_FALSE(proc.ok());
  StatusOr<std::unique_ptr<CgroupBackend>> missing = DetectBackend("/nonexistent-corral-root");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().error_number(), ENOENT);
  struct statfs fs;
  if (::statfs("/dev/shm", &fs) == 0 && fs.f_type == TMPFS_MAGIC) {
    StatusOr<std::unique_ptr<CgroupBackend>> tmpfs = DetectBackend("/dev/shm");
    ASSERT_TRUE(tmpfs.ok()) << tmpfs.status().ToString();
    EXPECT_EQ((*tmpfs)->version(), CgroupVersion::kV1);
  }
  if (::statfs("/sys/fs/cgroup", &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC) {
    StatusOr<std::unique_ptr<CgroupBackend>> v2 = DetectBackend("/sys/fs/cgroup");
    ASSERT_TRUE(v2.ok()) << v2.status().ToString();
    EXPECT_EQ((*v2)->version(), CgroupVersion::kV2);
  }
}

}  // namespace
}  // namespace corral::cgroups
