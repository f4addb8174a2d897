// The cgroup v2 backend against a temporary directory laid out like a v2 hierarchy.
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
// A fake cgroup v2 hierarchy

class FakeV2 {
 public:
  FakeV2() {
    root_ = tmp_.path();
    Put(root_ + "/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
    Put(root_ + "/cgroup.subtree_control", "");
  }
  const std::string& root() const { return root_; }
  std::string Path(const std::string& name) const { return root_ + "/" + name; }

  // What mkdir in cgroupfs creates: the core files and those of the offered controllers.
  // Files the backend writes start empty; files it reads hold an idle cgroup's values.
  void AddControlFiles(const std::string& name, const std::string& offered = "cpu memory pids\n") {
    std::string dir = Path(name);
    MakeDir(dir);
    Put(dir + "/cgroup.controllers", offered);
    Put(dir + "/cgroup.subtree_control", "");
    Put(dir + "/cgroup.procs", "");
    Put(dir + "/cgroup.events", "populated 0\nfrozen 0\n");
    Put(dir + "/cgroup.freeze", "");
    Put(dir + "/cgroup.kill", "");
    Put(dir + "/cpu.stat", "usage_usec 0\nuser_usec 0\nsystem_usec 0\n");
    for (const char* file : {"memory.max", "memory.swap.max", "cpu.max", "pids.max"}) {
      Put(dir + "/" + file, "");
    }
  }

 private:
  test::TempDir tmp_{"cgroups"};
  std::string root_;
};

class V2BackendTest : public ::testing::Test {
 protected:
  FakeV2 fake_;
  std::unique_ptr<CgroupBackend> owned_ = MakeV2Backend(fake_.root());
  CgroupBackend& backend_ = *owned_;
};

TEST_F(V2BackendTest, CreateEnablesControllersFromTheRootDown) {
  fake_.AddControlFiles("corral");
  ASSERT_TRUE(backend_.Create("corral/box").ok());
  EXPECT_EQ(Get(fake_.root() + "/cgroup.subtree_control"), "+memory +cpu +pids");
  EXPECT_EQ(Get(fake_.Path("corral/cgroup.subtree_control")), "+memory +cpu +pids");
  struct stat st;
  ASSERT_EQ(::stat(fake_.Path("corral/box").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  // The new cgroup itself hands nothing down: it will hold processes.
  EXPECT_FALSE(Exists(fake_.Path("corral/box/cgroup.subtree_control")));
}

TEST_F(V2BackendTest, CreateEnablesOnlyOfferedControllersNotYetEnabled) {
  Put(fake_.root() + "/cgroup.controllers", "cpuset cpu io memory\n");  // no pids offered
  Put(fake_.root() + "/cgroup.subtree_control", "memory\n");            // memory already on
  ASSERT_TRUE(backend_.Create("box").ok());
  EXPECT_EQ(Get(fake_.root() + "/cgroup.subtree_control"), Overwritten("memory\n", "+cpu"));
}

TEST_F(V2BackendTest, CreateWritesNothingWhenAllControllersAreEnabled) {
  Put(fake_.root() + "/cgroup.subtree_control", "cpu memory pids\n");
  WriteRecorder recorder;
  recorder.Watch(fake_.root());
  ASSERT_TRUE(backend_.Create("box").ok());
  EXPECT_EQ(Get(fake_.root() + "/cgroup.subtree_control"), "cpu memory pids\n");
  EXPECT_TRUE(recorder.Names().empty());
}

TEST_F(V2BackendTest, CreateOfAnExistingCgroupIsEEXIST) {
  ASSERT_TRUE(backend_.Create("box").ok());
  Status again = backend_.Create("box");
  EXPECT_FALSE(again.ok());
  EXPECT_EQ(again.error_number(), EEXIST) << again.ToString();
}

// corrald's anchor leaf below a cgroup that still holds a process: no subtree_control write
// anywhere (the kernel would refuse it with EBUSY), and one that exists already is fine.
TEST_F(V2BackendTest, CreateLeafEnablesNothingAndToleratesAnExistingOne) {
  fake_.AddControlFiles("system.slice");
  WriteRecorder recorder;
  recorder.Watch(fake_.root());
  recorder.Watch(fake_.Path("system.slice"));
  ASSERT_TRUE(backend_.CreateLeaf("system.slice/x.scope/anchor").ok());
  EXPECT_TRUE(Exists(fake_.Path("system.slice/x.scope/anchor")));
  EXPECT_TRUE(recorder.Names().empty());
  EXPECT_EQ(Get(fake_.root() + "/cgroup.subtree_control"), "");
  EXPECT_TRUE(backend_.CreateLeaf("system.slice/x.scope/anchor").ok());
  EXPECT_FALSE(backend_.CreateLeaf("../escape").ok());
  // The control: Create() beside it enables on the way, and the recorder sees those writes.
  ASSERT_TRUE(backend_.Create("system.slice/box").ok());
  EXPECT_FALSE(recorder.Names().empty());
  EXPECT_EQ(Get(fake_.root() + "/cgroup.subtree_control"), "+memory +cpu +pids");
}

TEST_F(V2BackendTest, SetLimitsWritesV2Files) {
  fake_.AddControlFiles("box");
  CgroupLimits limits;
  limits.memory_max_bytes = 64 << 20;
  limits.cpu_quota_us = 150000;
  limits.cpu_period_us = 100000;
  limits.pids_max = 100;
  ASSERT_TRUE(backend_.SetLimits("box", limits).ok());
  EXPECT_EQ(Get(fake_.Path("box/memory.max")), "67108864");
  EXPECT_EQ(Get(fake_.Path("box/memory.swap.max")), "0");
  EXPECT_EQ(Get(fake_.Path("box/cpu.max")), "150000 100000");
  EXPECT_EQ(Get(fake_.Path("box/pids.max")), "100");
}

TEST_F(V2BackendTest, SetLimitsWritesOnlyWhatIsSet) {
  fake_.AddControlFiles("box");
  CgroupLimits limits;
  limits.pids_max = 7;
  ASSERT_TRUE(backend_.SetLimits("box", limits).ok());
  EXPECT_EQ(Get(fake_.Path("box/pids.max")), "7");
  EXPECT_EQ(Get(fake_.Path("box/memory.max")), "");
  EXPECT_EQ(Get(fake_.Path("box/memory.swap.max")), "");
  EXPECT_EQ(Get(fake_.Path("box/cpu.max")), "");
}

TEST_F(V2BackendTest, SetLimitsToleratesMissingSwapAccounting) {
  fake_.AddControlFiles("box");
  ASSERT_EQ(::unlink(fake_.Path("box/memory.swap.max").c_str()), 0);
  CgroupLimits limits;
  limits.memory_max_bytes = 1 << 20;
  EXPECT_TRUE(backend_.SetLimits("box", limits).ok());
  EXPECT_EQ(Get(fake_.Path("box/memory.max")), "1048576");
}

TEST_F(V2BackendTest, SetLimitsFailsWhenMemoryControllerIsAbsent) {
  fake_.AddControlFiles("box");
  ASSERT_EQ(::unlink(fake_.Path("box/memory.max").c_str()), 0);
  CgroupLimits limits;
  limits.memory_max_bytes = 1 << 20;
  Status status = backend_.SetLimits("box", limits);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("memory.max"), std::string::npos) << status.ToString();
}

TEST_F(V2BackendTest, SetLimitsRejectsCpuValuesTheKernelRefuses) {
  fake_.AddControlFiles("box");
  CgroupLimits short_period;
  short_period.cpu_quota_us = 50000;
  short_period.cpu_period_us = 500;
  EXPECT_FALSE(backend_.SetLimits("box", short_period).ok());
  CgroupLimits tiny_quota;
  tiny_quota.cpu_quota_us = 10;
  EXPECT_FALSE(backend_.SetLimits("box", tiny_quota).ok());
  EXPECT_EQ(Get(fake_.Path("box/cpu.max")), "");
}

TEST_F(V2BackendTest, StatsParsesKernelFormats) {
  fake_.AddControlFiles("box");
  Put(fake_.Path("box/cpu.stat"),
      "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\n"
      "core_sched.force_idle_usec 0\nnr_periods 10\nnr_throttled 2\nthrottled_usec 5000\n"
      "nr_bursts 0\nburst_usec 0\n");
  Put(fake_.Path("box/memory.current"), "1048576\n");
  Put(fake_.Path("box/memory.peak"), "67100672\n");
  Put(fake_.Path("box/memory.events"),
      "low 0\nhigh 0\nmax 1520\noom 3\noom_group_kill 0\noom_kill 2\n");
  Put(fake_.Path("box/pids.current"), "5\n");
  Put(fake_.Path("box/pids.events"), "max 9\n");
  StatusOr<CgroupStats> stats = backend_.Stats("box");
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->cpu_usage_usec, 1234567u);
  EXPECT_EQ(stats->cpu_user_usec, 1000000u);
  EXPECT_EQ(stats->cpu_system_usec, 234567u);
  EXPECT_EQ(stats->memory_current_bytes, 1048576u);
  EXPECT_EQ(stats->memory_peak_bytes, 67100672u);
  EXPECT_EQ(stats->oom_kill_count, 2u);
  EXPECT_EQ(stats->pids_current, 5u);
  EXPECT_EQ(stats->pids_max_events, 9u);
  StatusOr<uint64_t> usage = backend_.CpuUsageUsec("box");
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(*usage, 1234567u);
}

TEST_F(V2BackendTest, StatsReadsAbsentPeakAsZeroButNeedsCpuStat) {
  fake_.AddControlFiles("box");
  Put(fake_.Path("box/memory.current"), "4096\n");  // no memory.peak: a kernel before 5.19
  StatusOr<CgroupStats> stats = backend_.Stats("box");
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->memory_current_bytes, 4096u);
  EXPECT_EQ(stats->memory_peak_bytes, 0u);
  ASSERT_EQ(::unlink(fake_.Path("box/cpu.stat").c_str()), 0);
  EXPECT_FALSE(backend_.Stats("box").ok());
  EXPECT_FALSE(backend_.Stats("missing").ok());
}

TEST_F(V2BackendTest, AttachWritesThePid) {
  fake_.AddControlFiles("box");
  ASSERT_TRUE(backend_.Attach("box", 4242).ok());
  EXPECT_EQ(Get(fake_.Path("box/cgroup.procs")), "4242");
  EXPECT_FALSE(backend_.Attach("missing", 4242).ok());
}

TEST_F(V2BackendTest, OpenForCloneGivesADirectoryFd) {
  fake_.AddControlFiles("box");
  StatusOr<UniqueFd> fd = backend_.OpenForClone("box");
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  struct stat st, expected;
  ASSERT_EQ(::fstat(fd->get(), &st), 0);
  ASSERT_EQ(::stat(fake_.Path("box").c_str(), &expected), 0);
  EXPECT_EQ(st.st_ino, expected.st_ino);
  EXPECT_NE(::fcntl(fd->get(), F_GETFD) & FD_CLOEXEC, 0);
  EXPECT_FALSE(backend_.OpenForClone("missing").ok());
}

// The file a process writes "0" to, itself: cgroup.procs, write-only, close-on-exec.
TEST_F(V2BackendTest, OpenSelfJoinGivesCgroupProcs) {
  fake_.AddControlFiles("box");
  StatusOr<std::vector<UniqueFd>> fds = backend_.OpenSelfJoin("box");
  ASSERT_TRUE(fds.ok()) << fds.status().ToString();
  ASSERT_EQ(fds->size(), 1u);
  const int fd = (*fds)[0].get();
  EXPECT_EQ(::fcntl(fd, F_GETFL) & O_ACCMODE, O_WRONLY);
  EXPECT_NE(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
  ASSERT_EQ(::write(fd, "0", 1), 1);
  EXPECT_EQ(Get(fake_.Path("box/cgroup.procs")), "0");
  EXPECT_FALSE(backend_.OpenSelfJoin("missing").ok());
}

TEST_F(V2BackendTest, ProcsIsTheUnionOverTheSubtree) {
  fake_.AddControlFiles("box");
  fake_.AddControlFiles("box/cmd1");
  fake_.AddControlFiles("box/cmd1/deeper");
  Put(fake_.Path("box/cgroup.procs"), "34\n12\n");
  Put(fake_.Path("box/cmd1/cgroup.procs"), "56\n");
  Put(fake_.Path("box/cmd1/deeper/cgroup.procs"), "12\n78\n");
  StatusOr<std::vector<pid_t>> pids = backend_.Procs("box");
  ASSERT_TRUE(pids.ok()) << pids.status().ToString();
  EXPECT_EQ(*pids, (std::vector<pid_t>{12, 34, 56, 78}));
  EXPECT_FALSE(backend_.Procs("missing").ok());
}

TEST_F(V2BackendTest, FreezeWaitsForFrozenAndThawWritesZero) {
  fake_.AddControlFiles("box");
  Put(fake_.Path("box/cgroup.events"), "populated 1\nfrozen 1\n");
  ASSERT_TRUE(backend_.Freeze("box").ok());
  EXPECT_EQ(Get(fake_.Path("box/cgroup.freeze")), "1");
  ASSERT_TRUE(backend_.Thaw("box").ok());
  EXPECT_EQ(Get(fake_.Path("box/cgroup.freeze")), "0");
}

TEST_F(V2BackendTest, KillWritesCgroupKillAndWaitsForUnpopulated) {
  fake_.AddControlFiles("box");
  ASSERT_TRUE(backend_.Kill("box").ok());
  EXPECT_EQ(Get(fake_.Path("box/cgroup.kill")), "1");
  Status missing = backend_.Kill("missing");
  EXPECT_FALSE(missing.ok());
  EXPECT_EQ(missing.error_number(), ENOENT);
}

TEST_F(V2BackendTest, KillWithoutCgroupKillFreezesAndThaws) {
  // A kernel before 5.14: no cgroup.kill.
  fake_.AddControlFiles("box");
  ASSERT_EQ(::unlink(fake_.Path("box/cgroup.kill").c_str()), 0);
  Put(fake_.Path("box/cgroup.events"), "populated 0\nfrozen 1\n");
  FifoSpy freeze(fake_.Path("box/cgroup.freeze"));
  ASSERT_TRUE(backend_.Kill("box").ok());
  EXPECT_EQ(freeze.Drain(), "10");
}

TEST_F(V2BackendTest, ListChildrenNamesSubdirectoriesOnly) {
  fake_.AddControlFiles("box");
  MakeDir(fake_.Path("box/cmd2"));
  MakeDir(fake_.Path("box/cmd1"));
  StatusOr<std::vector<std::string>> children = backend_.ListChildren("box");
  ASSERT_TRUE(children.ok());
  EXPECT_EQ(*children, (std::vector<std::string>{"box/cmd1", "box/cmd2"}));
  StatusOr<std::vector<std::string>> none = backend_.ListChildren("missing");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_F(V2BackendTest, RemoveIfEmptyLeavesBusyCgroupsAlone) {
  MakeDir(fake_.Path("empty"));
  MakeDir(fake_.Path("parent/child"));
  EXPECT_TRUE(backend_.RemoveIfEmpty("empty").ok());
  EXPECT_FALSE(Exists(fake_.Path("empty")));
  EXPECT_TRUE(backend_.RemoveIfEmpty("parent").ok());
  EXPECT_TRUE(Exists(fake_.Path("parent/child")));
  EXPECT_TRUE(backend_.RemoveIfEmpty("missing").ok());
}

TEST_F(V2BackendTest, DestroyOfAMissingCgroupIsOk) {
  EXPECT_TRUE(backend_.Destroy("missing").ok());
  EXPECT_TRUE(backend_.Destroy("missing/child").ok());
}

}  // namespace
}  // namespace corral::cgroups
