// The cgroup v1 backend against a temporary directory laid out like v1 hierarchies (separate
// and co-mounted cpu,cpuacct).
// The fake kernel's rules: cgroups_fake_fs.h.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "cgroups/cgroup_backend.h"
#include "common/file_util.h"
#include "common/unique_fd.h"
#include "tests/testing/temp_dir.h"
#include "tests/unit/cgroups_fake_fs.h"

namespace corral::cgroups {
namespace {

using fake::Exists;
using fake::FifoSpy;
using fake::Get;
using fake::MakeDir;
using fake::Overwritten;
using fake::Put;
using fake::WriteRecorder;

// ---------------------------------------------------------------------------------------------
// A fake cgroup v1 hierarchy

enum class V1Layout { kSeparate, kCpuCoMounted };

class FakeV1 {
 public:
  explicit FakeV1(V1Layout layout) {
    root_ = tmp_.path();
    for (const char* controller : {"memory", "pids", "freezer"}) MakeDir(root_ + "/" + controller);
    if (layout == V1Layout::kSeparate) {
      MakeDir(root_ + "/cpu");
      MakeDir(root_ + "/cpuacct");
    } else {
      // What systemd sets up: one "cpu,cpuacct" mount and two symlinks to it.
      MakeDir(root_ + "/cpu,cpuacct");
      EXPECT_EQ(::symlink("cpu,cpuacct", (root_ + "/cpu").c_str()), 0);
      EXPECT_EQ(::symlink("cpu,cpuacct", (root_ + "/cpuacct").c_str()), 0);
    }
  }
  const std::string& root() const { return root_; }
  std::string Path(const std::string& controller, const std::string& name) const {
    return root_ + "/" + controller + "/" + name;
  }

  // What mkdir in each v1 hierarchy creates (the files the backend uses), in the hierarchies
  // that exist. Files the backend writes start empty; those it reads hold an idle cgroup's.
  void AddControlFiles(const std::string& name) {
    using Files = std::vector<std::pair<std::string, std::string>>;
    auto add = [&](const std::string& controller, Files files) {
      if (!Exists(root_ + "/" + controller)) return;  // a test removed that hierarchy
      std::string dir = Path(controller, name);
      MakeDir(dir);
      files.emplace_back("cgroup.procs", "");
      files.emplace_back("tasks", "");
      for (const auto& [file, content] : files) Put(dir + "/" + file, content);
    };
    add("memory", {{"memory.limit_in_bytes", ""},
                   {"memory.memsw.limit_in_bytes", ""},
                   {"memory.swappiness", ""},
                   {"memory.usage_in_bytes", "0\n"},
                   {"memory.max_usage_in_bytes", "0\n"},
                   {"memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"}});
    add("cpu", {{"cpu.cfs_period_us", ""}, {"cpu.cfs_quota_us", ""}});
    add("cpuacct", {{"cpuacct.usage", "0\n"},
                    {"cpuacct.usage_user", "0\n"},
                    {"cpuacct.usage_sys", "0\n"},
                    {"cpuacct.stat", "user 0\nsystem 0\n"}});
    add("pids", {{"pids.max", ""}, {"pids.current", "0\n"}, {"pids.events", "max 0\n"}});
    add("freezer", {{"freezer.state", ""}});
  }

 private:
  test::TempDir tmp_{"cgroups"};
  std::string root_;
};

constexpr const char* kV1Controllers[] = {"memory", "cpu", "cpuacct", "pids", "freezer"};

class V1BackendTest : public ::testing::Test {
 protected:
  FakeV1 fake_{V1Layout::kSeparate};
  std::unique_ptr<CgroupBackend> owned_ = MakeV1Backend(fake_.root());
  CgroupBackend& backend_ = *owned_;
};

TEST_F(V1BackendTest, CreateMakesTheCgroupInEveryHierarchy) {
  ASSERT_TRUE(backend_.Create("corral/box").ok());
  for (const char* controller : kV1Controllers) {
    EXPECT_TRUE(Exists(fake_.Path(controller, "corral/box"))) << controller;
  }
  Status again = backend_.Create("corral/box");
  EXPECT_EQ(again.error_number(), EEXIST) << again.ToString();
}

TEST_F(V1BackendTest, CreateLeafMakesItInEveryHierarchyAndToleratesAnExistingOne) {
  ASSERT_TRUE(backend_.CreateLeaf("system.slice/x.scope/anchor").ok());
  for (const char* controller : kV1Controllers) {
    EXPECT_TRUE(Exists(fake_.Path(controller, "system.slice/x.scope/anchor"))) << controller;
  }
  EXPECT_TRUE(backend_.CreateLeaf("system.slice/x.scope/anchor").ok());
  EXPECT_EQ(backend_.Create("system.slice/x.scope/anchor").error_number(), EEXIST);
}

TEST_F(V1BackendTest, CreateNamesAMissingHierarchyAndLeavesNothing) {
  for (const char* missing : {"memory", "cpuacct", "pids", "freezer"}) {
    FakeV1 fake(V1Layout::kSeparate);
    std::unique_ptr<CgroupBackend> owned = MakeV1Backend(fake.root());
    CgroupBackend& backend = *owned;
    ASSERT_EQ(::rmdir((fake.root() + "/" + missing).c_str()), 0);
    Status status = backend.Create("box");
    ASSERT_FALSE(status.ok()) << missing;
    EXPECT_NE(status.message().find(missing), std::string::npos) << status.ToString();
    for (const char* controller : kV1Controllers) {
      EXPECT_FALSE(Exists(fake.Path(controller, "box"))) << controller;
    }
  }
}

TEST_F(V1BackendTest, CreateRollsBackWhenOneHierarchyFails) {
  // The name is taken in the freezer hierarchy only (a leftover): Create fails with EEXIST and
  // removes what it made in the hierarchies before it.
  MakeDir(fake_.Path("freezer", "box"));
  Status status = backend_.Create("box");
  EXPECT_EQ(status.error_number(), EEXIST) << status.ToString();
  for (const char* controller : {"memory", "cpu", "cpuacct", "pids"}) {
    EXPECT_FALSE(Exists(fake_.Path(controller, "box"))) << controller;
  }
}

TEST_F(V1BackendTest, CpuHierarchyIsNeededOnlyForACpuLimit) {
  ASSERT_EQ(::rmdir((fake_.root() + "/cpu").c_str()), 0);
  ASSERT_TRUE(backend_.Create("box").ok());
  fake_.AddControlFiles("box");
  CgroupLimits memory_only;
  memory_only.memory_max_bytes = 1 << 20;
  EXPECT_TRUE(backend_.SetLimits("box", memory_only).ok());
  CgroupLimits cpu;
  cpu.cpu_quota_us = 50000;
  Status status = backend_.SetLimits("box", cpu);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("no cpu hierarchy"), std::string::npos) << status.ToString();
}

TEST_F(V1BackendTest, SetLimitsTranslatesInTheKernelsOrder) {
  fake_.AddControlFiles("box");
  WriteRecorder recorder;
  for (const char* controller : kV1Controllers) recorder.Watch(fake_.Path(controller, "box"));
  CgroupLimits limits;
  limits.memory_max_bytes = 64 << 20;
  limits.cpu_quota_us = 150000;
  limits.cpu_period_us = 100000;
  limits.pids_max = 100;
  ASSERT_TRUE(backend_.SetLimits("box", limits).ok());
  EXPECT_EQ(Get(fake_.Path("memory", "box/memory.limit_in_bytes")), "67108864");
  EXPECT_EQ(Get(fake_.Path("memory", "box/memory.memsw.limit_in_bytes")), "67108864");
  EXPECT_EQ(Get(fake_.Path("memory", "box/memory.swappiness")), "0");
  EXPECT_EQ(Get(fake_.Path("cpu", "box/cpu.cfs_period_us")), "100000");
  EXPECT_EQ(Get(fake_.Path("cpu", "box/cpu.cfs_quota_us")), "150000");
  EXPECT_EQ(Get(fake_.Path("pids", "box/pids.max")), "100");
  // memsw after the limit (memsw >= limit at every step), the period before the quota.
  EXPECT_EQ(recorder.Names(),
            (std::vector<std::string>{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes",
                                      "memory.swappiness", "cpu.cfs_period_us", "cpu.cfs_quota_us",
                                      "pids.max"}));
}

TEST_F(V1BackendTest, SetLimitsWithoutSwapAccountingSkipsMemsw) {
  fake_.AddControlFiles("box");
  ASSERT_EQ(::unlink(fake_.Path("memory", "box/memory.memsw.limit_in_bytes").c_str()), 0);
  CgroupLimits limits;
  limits.memory_max_bytes = 1 << 20;
  ASSERT_TRUE(backend_.SetLimits("box", limits).ok());
  EXPECT_EQ(Get(fake_.Path("memory", "box/memory.limit_in_bytes")), "1048576");
  EXPECT_EQ(Get(fake_.Path("memory", "box/memory.swappiness")), "0");
  EXPECT_FALSE(Exists(fake_.Path("memory", "box/memory.memsw.limit_in_bytes")));
}

TEST_F(V1BackendTest, AttachWritesEveryHierarchy) {
  fake_.AddControlFiles("box");
  ASSERT_TRUE(backend_.Attach("box", 4242).ok());
  for (const char* controller : kV1Controllers) {
    EXPECT_EQ(Get(fake_.Path(controller, "box/cgroup.procs")), "4242") << controller;
  }
}

TEST_F(V1BackendTest, StatsTranslatesV1Counters) {
  fake_.AddControlFiles("box");
  Put(fake_.Path("cpuacct", "box/cpuacct.usage"), "1234567890\n");
  Put(fake_.Path("cpuacct", "box/cpuacct.usage_user"), "1000000000\n");
  Put(fake_.Path("cpuacct", "box/cpuacct.usage_sys"), "230000000\n");
  Put(fake_.Path("memory", "box/memory.usage_in_bytes"), "2097152\n");
  Put(fake_.Path("memory", "box/memory.max_usage_in_bytes"), "67108864\n");
  Put(fake_.Path("memory", "box/memory.oom_control"),
      "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
  Put(fake_.Path("pids", "box/pids.current"), "7\n");
  Put(fake_.Path("pids", "box/pids.events"), "max 5\n");
  StatusOr<CgroupStats> stats = backend_.Stats("box");
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->cpu_usage_usec, 1234567u);
  EXPECT_EQ(stats->cpu_user_usec, 1000000u);
  EXPECT_EQ(stats->cpu_system_usec, 230000u);
  EXPECT_EQ(stats->memory_current_bytes, 2097152u);
  EXPECT_EQ(stats->memory_peak_bytes, 67108864u);
  EXPECT_EQ(stats->oom_kill_count, 3u);
  EXPECT_EQ(stats->pids_current, 7u);
  EXPECT_EQ(stats->pids_max_events, 5u);
  StatusOr<uint64_t> usage = backend_.CpuUsageUsec("box");
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(*usage, 1234567u);
}

TEST_F(V1BackendTest, StatsFallsBackToCpuacctStatTicks) {
  fake_.AddControlFiles("box");
  ASSERT_EQ(::unlink(fake_.Path("cpuacct", "box/cpuacct.usage_user").c_str()), 0);
  ASSERT_EQ(::unlink(fake_.Path("cpuacct", "box/cpuacct.usage_sys").c_str()), 0);
  Put(fake_.Path("cpuacct", "box/cpuacct.stat"), "user 150\nsystem 25\n");
  StatusOr<CgroupStats> stats = backend_.Stats("box");
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  const uint64_t usec_per_tick = 1000000 / static_cast<uint64_t>(::sysconf(_SC_CLK_TCK));
  EXPECT_EQ(stats->cpu_user_usec, 150 * usec_per_tick);
  EXPECT_EQ(stats->cpu_system_usec, 25 * usec_per_tick);
}

TEST_F(V1BackendTest, FreezeAndThawUseFreezerState) {
  fake_.AddControlFiles("box");
  ASSERT_TRUE(backend_.Freeze("box").ok());
  EXPECT_EQ(Get(fake_.Path("freezer", "box/freezer.state")), "FROZEN");
  ASSERT_TRUE(backend_.Thaw("box").ok());
  EXPECT_EQ(Get(fake_.Path("freezer", "box/freezer.state")), "THAWED");
}

TEST_F(V1BackendTest, KillOfAnEmptyCgroupTouchesNothing) {
  fake_.AddControlFiles("box");
  ASSERT_TRUE(backend_.Kill("box").ok());
  EXPECT_EQ(Get(fake_.Path("freezer", "box/freezer.state")), "");
  EXPECT_EQ(backend_.Kill("missing").error_number(), ENOENT);
}

TEST_F(V1BackendTest, ProcsIsTheUnionOverHierarchiesAndSubtrees) {
  fake_.AddControlFiles("box");
  fake_.AddControlFiles("box/cmd1");
  Put(fake_.Path("memory", "box/cgroup.procs"), "1\n2\n");
  Put(fake_.Path("freezer", "box/cgroup.procs"), "3\n2\n");
  Put(fake_.Path("pids", "box/cmd1/cgroup.procs"), "4\n");
  StatusOr<std::vector<pid_t>> pids = backend_.Procs("box");
  ASSERT_TRUE(pids.ok()) << pids.status().ToString();
  EXPECT_EQ(*pids, (std::vector<pid_t>{1, 2, 3, 4}));
}

TEST_F(V1BackendTest, ListChildrenIsTheUnionOverHierarchies) {
  MakeDir(fake_.Path("memory", "box/cmd1"));
  MakeDir(fake_.Path("pids", "box/cmd2"));
  MakeDir(fake_.Path("freezer", "box/cmd1"));
  StatusOr<std::vector<std::string>> children = backend_.ListChildren("box");
  ASSERT_TRUE(children.ok());
  EXPECT_EQ(*children, (std::vector<std::string>{"box/cmd1", "box/cmd2"}));
}

TEST_F(V1BackendTest, RemoveIfEmptyRemovesFromEveryHierarchyOrNone) {
  for (const char* controller : kV1Controllers) MakeDir(fake_.Path(controller, "box"));
  // A task left in the freezer cgroup: nothing is removed, not even the idle memory cgroup.
  Put(fake_.Path("freezer", "box/cgroup.procs"), "99\n");
  ASSERT_TRUE(backend_.RemoveIfEmpty("box").ok());
  for (const char* controller : kV1Controllers) {
    EXPECT_TRUE(Exists(fake_.Path(controller, "box"))) << controller;
  }
  // A child cgroup in one hierarchy: likewise.
  ASSERT_EQ(::unlink(fake_.Path("freezer", "box/cgroup.procs").c_str()), 0);
  MakeDir(fake_.Path("pids", "box/cmd"));
  ASSERT_TRUE(backend_.RemoveIfEmpty("box").ok());
  EXPECT_TRUE(Exists(fake_.Path("memory", "box")));
  ASSERT_EQ(::rmdir(fake_.Path("pids", "box/cmd").c_str()), 0);
  ASSERT_TRUE(backend_.RemoveIfEmpty("box").ok());
  for (const char* controller : kV1Controllers) {
    EXPECT_FALSE(Exists(fake_.Path(controller, "box"))) << controller;
  }
  EXPECT_TRUE(backend_.RemoveIfEmpty("box").ok());
}

TEST_F(V1BackendTest, DestroyOfAMissingCgroupIsOk) {
  EXPECT_TRUE(backend_.Destroy("missing").ok());
}

TEST_F(V1BackendTest, OpenForCloneIsNotSupported) {
  fake_.AddControlFiles("box");
  StatusOr<UniqueFd> fd = backend_.OpenForClone("box");
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().error_number(), EOPNOTSUPP);
}

// v1: the `tasks` file of every hierarchy, once each (a co-mount is one hierarchy); a
// hierarchy without the cgroup is an error, not a silently shorter list.
TEST_F(V1BackendTest, OpenSelfJoinGivesEveryHierarchysTasks) {
  fake_.AddControlFiles("box");
  StatusOr<std::vector<UniqueFd>> fds = backend_.OpenSelfJoin("box");
  ASSERT_TRUE(fds.ok()) << fds.status().ToString();
  ASSERT_EQ(fds->size(), std::size(kV1Controllers));
  for (const UniqueFd& fd : *fds) {
    EXPECT_EQ(::fcntl(fd.get(), F_GETFL) & O_ACCMODE, O_WRONLY);
    EXPECT_NE(::fcntl(fd.get(), F_GETFD) & FD_CLOEXEC, 0);
    ASSERT_EQ(::write(fd.get(), "0", 1), 1);
  }
  for (const char* controller : kV1Controllers) {
    EXPECT_EQ(Get(fake_.Path(controller, "box/tasks")), "0") << controller;
    EXPECT_EQ(Get(fake_.Path(controller, "box/cgroup.procs")), "") << controller;
  }
  ASSERT_EQ(::unlink(fake_.Path("pids", "box/tasks").c_str()), 0);
  StatusOr<std::vector<UniqueFd>> partial = backend_.OpenSelfJoin("box");
  ASSERT_FALSE(partial.ok());
  EXPECT_EQ(partial.status().error_number(), ENOENT);
  EXPECT_FALSE(backend_.OpenSelfJoin("missing").ok());
}

// v1's placement: the child joins by itself (no clone fd), and with no leaf there is nothing to
// do after its namespace. (A leaf needs the kernel to make its files: tests/root.)
TEST_F(V1BackendTest, PrepareCloneGivesJoinFiles) {
  fake_.AddControlFiles("box");
  StatusOr<ClonePlacement> placement = backend_.PrepareClone("box");
  ASSERT_TRUE(placement.ok()) << placement.status().ToString();
  EXPECT_EQ(placement->clone_fd(), -1);
  EXPECT_EQ(placement->join_fds().size(), std::size(kV1Controllers));
  EXPECT_TRUE(placement->leaf_fds().empty());
  EXPECT_TRUE(placement->AfterNamespace(4242).ok());
  for (const char* controller : kV1Controllers) {
    EXPECT_EQ(Get(fake_.Path(controller, "box/cgroup.procs")), "") << controller;
  }
  EXPECT_FALSE(backend_.PrepareClone("box", "a/b").ok());
}

class V1CoMountTest : public ::testing::Test {
 protected:
  FakeV1 fake_{V1Layout::kCpuCoMounted};
  std::unique_ptr<CgroupBackend> owned_ = MakeV1Backend(fake_.root());
  CgroupBackend& backend_ = *owned_;
};

TEST_F(V1CoMountTest, CreateMakesTheSharedDirectoryOnce) {
  // A second mkdir of "cpu,cpuacct/box" through the other symlink would fail with EEXIST.
  ASSERT_TRUE(backend_.Create("box").ok()) << backend_.Create("box").ToString();
  EXPECT_TRUE(Exists(fake_.Path("cpu,cpuacct", "box")));
  EXPECT_TRUE(Exists(fake_.Path("memory", "box")));
}

TEST_F(V1CoMountTest, AttachWritesTheSharedCgroupOnce) {
  fake_.AddControlFiles("box");
  FifoSpy procs(fake_.Path("cpu,cpuacct", "box/cgroup.procs"));
  ASSERT_TRUE(backend_.Attach("box", 4242).ok());
  EXPECT_EQ(procs.Drain(), "4242");  // not "42424242": once, not once per symlink
  EXPECT_EQ(Get(fake_.Path("memory", "box/cgroup.procs")), "4242");
}

TEST_F(V1CoMountTest, StatsAndLimitsReachTheSharedDirectory) {
  fake_.AddControlFiles("box");
  Put(fake_.Path("cpuacct", "box/cpuacct.usage"), "5000000\n");
  CgroupLimits limits;
  limits.cpu_quota_us = 20000;
  ASSERT_TRUE(backend_.SetLimits("box", limits).ok());
  EXPECT_EQ(Get(fake_.Path("cpu,cpuacct", "box/cpu.cfs_quota_us")), "20000");
  StatusOr<uint64_t> usage = backend_.CpuUsageUsec("box");
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(*usage, 5000u);
}

}  // namespace
}  // namespace corral::cgroups
