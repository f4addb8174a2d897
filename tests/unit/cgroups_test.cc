// Both cgroup backends against a temporary directory laid out like a real hierarchy.
//
// A temporary directory is not cgroupfs: mkdir creates no control files, and a write(2) without
// O_TRUNC overwrites a regular file from offset 0 instead of being parsed. So the fake kernel
// here pre-creates the files a test needs (empty when the backend writes them, with realistic
// contents when it reads them), and `Overwritten()` models what one write leaves in a file that
// already held text. Write order is observed with inotify, and "written exactly once" with a
// FIFO in place of the control file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cgroups/cgroup_backend.h"
#include "cgroups/cgroup_fs.h"
#include "common/file_util.h"
#include "common/unique_fd.h"
#include "tests/testing/temp_dir.h"

namespace corral::cgroups {
namespace {

using ::testing::TestWithParam;

// ---------------------------------------------------------------------------------------------
// Fake file system helpers

void Put(const std::string& path, const std::string& content) {
  ASSERT_TRUE(WriteNewFile(path, content).ok()) << path;
}

// The file's contents, or "<missing>".
std::string Get(const std::string& path) {
  StatusOr<std::string> content = ReadFileToString(path);
  return content.ok() ? *content : "<missing>";
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

void MakeDir(const std::string& path) { ASSERT_TRUE(MakeDirs(path).ok()) << path; }

// What one write(2) of `written` at offset 0, without O_TRUNC, leaves in a regular file that
// held `before`.
std::string Overwritten(std::string before, const std::string& written) {
  if (before.size() < written.size()) before.resize(written.size());
  return before.replace(0, written.size(), written);
}

// Records the names of files modified in watched directories, in the order of the writes.
// inotify merges an event identical to the one queued just before it, so two consecutive writes
// to one file show as one: see FifoSpy for counting writes.
class WriteRecorder {
 public:
  WriteRecorder() : fd_(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) {}
  void Watch(const std::string& dir) {
    ASSERT_GE(::inotify_add_watch(fd_.get(), dir.c_str(), IN_MODIFY), 0) << dir;
  }
  std::vector<std::string> Names() {
    std::vector<std::string> names;
    alignas(struct inotify_event) char buf[8192];
    for (;;) {
      ssize_t n = ::read(fd_.get(), buf, sizeof(buf));
      if (n <= 0) break;
      for (char* p = buf; p < buf + n;) {
        auto* event = reinterpret_cast<struct inotify_event*>(p);
        names.emplace_back(event->len > 0 ? event->name : "");
        p += sizeof(struct inotify_event) + event->len;
      }
    }
    return names;
  }

 private:
  UniqueFd fd_;
};

// A FIFO in place of a control file shows every byte written to it, in order (inotify would
// merge two consecutive writes to one file into one event).
class FifoSpy {
 public:
  explicit FifoSpy(const std::string& path) {
    (void)::unlink(path.c_str());
    EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
    // O_RDWR: the backend's O_WRONLY open then finds a reader and does not block.
    reader_.reset(::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
    EXPECT_TRUE(reader_.valid()) << path;
  }
  std::string Drain() {
    std::string out;
    char buf[256];
    ssize_t n;
    while ((n = ::read(reader_.get(), buf, sizeof(buf))) > 0)
      out.append(buf, static_cast<size_t>(n));
    return out;
  }

 private:
  UniqueFd reader_;
};

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
