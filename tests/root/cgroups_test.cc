// The cgroup backends on the real kernel.
//
// One suite, run over the backend DetectBackend() picks for /sys/fs/cgroup (v1 on a hybrid host,
// v2 in the QEMU guest), and, on a hybrid host, also over the v2 backend on systemd's
// controller-less cgroup2 mount (/sys/fs/cgroup/unified): there the core files (procs, freeze,
// kill, cpu.stat, CLONE_INTO_CGROUP) are real, and tests needing a controller skip.
//
// Every test works in its own cgroup "corral/test-<pid>-<random>" (absolute: never below this
// process's own cgroup), destroyed in TearDown even when the test failed, and checks its outcome
// from outside: /proc/<pid>/cgroup, the cgroup's own files, exit statuses, stat(2) of the paths.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cgroups/cgroup_backend.h"
#include "common/file_util.h"

namespace corral::cgroups {
namespace {

constexpr char kMountRoot[] = "/sys/fs/cgroup";
constexpr char kHybridUnifiedRoot[] = "/sys/fs/cgroup/unified";
constexpr const char* kV1Controllers[] = {"memory", "cpu", "cpuacct", "pids", "freezer"};

enum class Target { kDetected, kHybridUnified };

std::string TargetName(const ::testing::TestParamInfo<Target>& info) {
  return info.param == Target::kDetected ? "Detected" : "HybridUnified";
}

void PrintTo(Target target, std::ostream* os) {
  *os << (target == Target::kDetected ? "Detected" : "HybridUnified");
}

bool IsFsType(const std::string& path, unsigned long magic) {
  struct statfs fs;
  return ::statfs(path.c_str(), &fs) == 0 &&
         (static_cast<unsigned long>(fs.f_type) & 0xffffffffUL) == magic;
}

std::string ReadOr(const std::string& path, const std::string& fallback = "<missing>") {
  StatusOr<std::string> content = ReadFileToString(path);
  return content.ok() ? *content : fallback;
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string RandomHex() {
  uint64_t value = 0;
  if (::getrandom(&value, sizeof(value), 0) != sizeof(value)) value = ::time(nullptr);
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

// The cgroup path of `pid` for each line of /proc/<pid>/cgroup, keyed by controller ("" for the
// v2 line "0::/path"; "memory", "cpu", ... for v1 lines such as "4:cpu,cpuacct:/path").
std::map<std::string, std::string> CgroupsOf(pid_t pid) {
  std::map<std::string, std::string> out;
  std::istringstream lines(ReadOr("/proc/" + std::to_string(pid) + "/cgroup", ""));
  std::string line;
  while (std::getline(lines, line)) {
    size_t first = line.find(':');
    size_t second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (controllers.empty()) out[""] = path;
    std::istringstream names(controllers);
    std::string controller;
    while (std::getline(names, controller, ',')) out[controller] = path;
  }
  return out;
}

// Spins in user space until this process has used `cpu_ms` of CPU time. The CPU-time clock is
// a real system call (no vDSO), so it is read only every million iterations: otherwise most of
// the time would be system time.
void BurnCpu(int cpu_ms) {
  volatile uint64_t sink = 0;
  struct timespec ts;
  for (;;) {
    for (int i = 0; i < 1000000; ++i) sink = sink + static_cast<uint64_t>(i);
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    if (ts.tv_sec * 1000 + ts.tv_nsec / 1000000 >= cpu_ms) return;
  }
}

// Allocates `bytes` and writes to every page. Returns 0 if it survived.
int TouchMemory(size_t bytes) {
  void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return 2;
  auto* bytes_ptr = static_cast<volatile char*>(mem);
  for (size_t i = 0; i < bytes; i += 4096) bytes_ptr[i] = 1;
  return 0;
}

class CgroupRootTest : public ::testing::TestWithParam<Target> {
 protected:
  static void SetUpTestSuite() {
    // Orphans of the escape tests (double forks, setsid) are re-parented to us and reaped here
    // instead of lingering as zombies under a PID 1 that may not reap.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  }

  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (writes to " << kMountRoot << ")";
    const char* expect = std::getenv("CORRAL_EXPECT_CGROUP_VERSION");
    if (GetParam() == Target::kDetected) {
      StatusOr<std::unique_ptr<CgroupBackend>> detected = DetectBackend(kMountRoot);
      if (!detected.ok()) {
        ASSERT_EQ(expect, nullptr)
            << "CORRAL_EXPECT_CGROUP_VERSION is set but " << detected.status().ToString();
        GTEST_SKIP() << "no usable cgroup hierarchy: " << detected.status().ToString();
      }
      backend_ = std::move(detected).value();
      root_ = kMountRoot;
      if (expect != nullptr) {
        ASSERT_EQ(std::string(expect),
                  backend_->version() == CgroupVersion::kV2 ? std::string("2") : std::string("1"))
            << "DetectBackend picked the other cgroup version";
      }
    } else {
      if (!IsFsType(kMountRoot, TMPFS_MAGIC) ||
          !IsFsType(kHybridUnifiedRoot, CGROUP2_SUPER_MAGIC)) {
        GTEST_SKIP() << "not a hybrid host (" << kHybridUnifiedRoot << " is not cgroup2)";
      }
      backend_ = MakeV2Backend(kHybridUnifiedRoot);
      root_ = kHybridUnifiedRoot;
    }
    name_ = "corral/test-" + std::to_string(::getpid()) + "-" + RandomHex();
    Status created = backend_->Create(name_);
    if (!created.ok() && (created.error_number() == EROFS || created.error_number() == EACCES ||
                          created.error_number() == EPERM)) {
      GTEST_SKIP() << "cgroup hierarchy not writable: " << created.ToString();
    }
    ASSERT_TRUE(created.ok()) << created.ToString();
    created_ = true;
  }

  void TearDown() override {
    for (auto& [pid, go_fd] : children_) {
      ::close(go_fd);
      ::kill(pid, SIGKILL);
    }
    if (created_) {
      Status destroyed = backend_->Destroy(name_);
      EXPECT_TRUE(destroyed.ok()) << destroyed.ToString();
      for (const std::string& dir : Dirs(name_)) {
        EXPECT_FALSE(PathExists(dir)) << dir << " left behind";
      }
      EXPECT_TRUE(backend_->RemoveIfEmpty("corral").ok());
    }
    for (auto& [pid, go_fd] : children_) ::waitpid(pid, nullptr, 0);
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
  }

  bool IsV2() const { return backend_->version() == CgroupVersion::kV2; }

  // The real directories of cgroup `name`: one on v2, one per mounted controller on v1.
  std::vector<std::string> Dirs(const std::string& name) const {
    if (IsV2()) return {root_ + "/" + name};
    std::vector<std::string> dirs;
    for (const char* controller : kV1Controllers) {
      if (PathExists(root_ + "/" + controller))
        dirs.push_back(root_ + "/" + controller + "/" + name);
    }
    return dirs;
  }

  // The directory holding `controller`'s files for our cgroup.
  std::string Dir(const std::string& controller) const {
    return IsV2() ? root_ + "/" + name_ : root_ + "/" + controller + "/" + name_;
  }

  // Whether our cgroup has `controller` (v2: its cgroup.controllers; v1: the hierarchy exists).
  bool Has(const std::string& controller) const {
    if (!IsV2()) return PathExists(root_ + "/" + controller);
    std::istringstream words(ReadOr(root_ + "/" + name_ + "/cgroup.controllers", ""));
    std::string word;
    while (words >> word) {
      if (word == controller) return true;
    }
    return false;
  }

  // Forks a child that waits for Go(), runs `body` and exits with its result. It exits at once
  // if the test ends without Go() (the pipe closes).
  pid_t Fork(std::function<int()> body) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return -1;
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[1]);
      char byte;
      if (::read(fds[0], &byte, 1) != 1) ::_exit(99);
      ::_exit(body());
    }
    ::close(fds[0]);
    if (pid > 0) children_[pid] = fds[1];
    return pid;
  }

  void Go(pid_t pid) { ASSERT_EQ(::write(children_[pid], "g", 1), 1); }

  // Reaps `pid`; returns its wait status.
  int Wait(pid_t pid) {
    int status = -1;
    EXPECT_EQ(::waitpid(pid, &status, 0), pid);
    auto it = children_.find(pid);
    if (it != children_.end()) {
      ::close(it->second);
      children_.erase(it);
    }
    return status;
  }

  CgroupStats StatsOrFail() {
    StatusOr<CgroupStats> stats = backend_->Stats(name_);
    EXPECT_TRUE(stats.ok()) << stats.status().ToString();
    return stats.ok() ? *stats : CgroupStats{};
  }

  std::unique_ptr<CgroupBackend> backend_;
  std::string root_;
  std::string name_;
  bool created_ = false;
  std::map<pid_t, int> children_;  // pid -> write end of its go pipe
};

TEST_P(CgroupRootTest, LimitsAreWrittenAndAttachMovesAChild) {
  CgroupLimits limits;
  if (Has("memory")) limits.memory_max_bytes = 64 << 20;
  if (Has("cpu")) limits.cpu_quota_us = 50000;
  if (Has("pids")) limits.pids_max = 64;
  Status set = backend_->SetLimits(name_, limits);
  ASSERT_TRUE(set.ok()) << set.ToString();
  if (IsV2()) {
    if (Has("memory")) {
      EXPECT_EQ(ReadOr(Dir("memory") + "/memory.max"), "67108864\n");
      EXPECT_EQ(ReadOr(Dir("memory") + "/memory.swap.max", "0\n"), "0\n");
    }
    if (Has("cpu")) {
      EXPECT_EQ(ReadOr(Dir("cpu") + "/cpu.max"), "50000 100000\n");
    }
    if (Has("pids")) {
      EXPECT_EQ(ReadOr(Dir("pids") + "/pids.max"), "64\n");
    }
  } else {
    EXPECT_EQ(ReadOr(Dir("memory") + "/memory.limit_in_bytes"), "67108864\n");
    EXPECT_EQ(ReadOr(Dir("memory") + "/memory.memsw.limit_in_bytes", "67108864\n"), "67108864\n");
    EXPECT_EQ(ReadOr(Dir("memory") + "/memory.swappiness"), "0\n");
    EXPECT_EQ(ReadOr(Dir("cpu") + "/cpu.cfs_period_us"), "100000\n");
    EXPECT_EQ(ReadOr(Dir("cpu") + "/cpu.cfs_quota_us"), "50000\n");
    EXPECT_EQ(ReadOr(Dir("pids") + "/pids.max"), "64\n");
  }

  pid_t pid = Fork([] { return 0; });
  ASSERT_GT(pid, 0);
  Status attached = backend_->Attach(name_, pid);
  ASSERT_TRUE(attached.ok()) << attached.ToString();
  std::map<std::string, std::string> cgroups = CgroupsOf(pid);
  if (IsV2()) {
    EXPECT_EQ(cgroups[""], "/" + name_);
  } else {
    for (const char* controller : kV1Controllers) {
      EXPECT_EQ(cgroups[controller], "/" + name_) << controller;
    }
  }
  StatusOr<std::vector<pid_t>> procs = backend_->Procs(name_);
  ASSERT_TRUE(procs.ok()) << procs.status().ToString();
  EXPECT_EQ(*procs, std::vector<pid_t>{pid});
  Go(pid);
  int status = Wait(pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST_P(CgroupRootTest, MemoryLimitCanBeRaisedAndLowered) {
  if (!Has("memory")) GTEST_SKIP() << "no memory controller for " << root_;
  for (uint64_t mib : {64, 256, 32}) {
    CgroupLimits limits;
    limits.memory_max_bytes = mib << 20;
    Status set = backend_->SetLimits(name_, limits);
    ASSERT_TRUE(set.ok()) << mib << " MiB: " << set.ToString();
    std::string expected = std::to_string(mib << 20) + "\n";
    if (IsV2()) {
      EXPECT_EQ(ReadOr(Dir("memory") + "/memory.max"), expected);
    } else {
      EXPECT_EQ(ReadOr(Dir("memory") + "/memory.limit_in_bytes"), expected);
      EXPECT_EQ(ReadOr(Dir("memory") + "/memory.memsw.limit_in_bytes", expected), expected);
    }
  }
}

TEST_P(CgroupRootTest, AllocationUnderTheMemoryLimitSurvives) {
  if (!Has("memory")) GTEST_SKIP() << "no memory controller for " << root_;
  CgroupLimits limits;
  limits.memory_max_bytes = 32 << 20;
  ASSERT_TRUE(backend_->SetLimits(name_, limits).ok());
  pid_t pid = Fork([] { return TouchMemory(8 << 20); });
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(backend_->Attach(name_, pid).ok());
  Go(pid);
  int status = Wait(pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  CgroupStats stats = StatsOrFail();
  EXPECT_EQ(stats.oom_kill_count, 0u);
  EXPECT_GE(stats.memory_peak_bytes, 8u << 20);
  EXPECT_LE(stats.memory_peak_bytes, 32u << 20);
}

TEST_P(CgroupRootTest, MemoryBombIsOomKilled) {
  if (!Has("memory")) GTEST_SKIP() << "no memory controller for " << root_;
  CgroupLimits limits;
  limits.memory_max_bytes = 32 << 20;
  ASSERT_TRUE(backend_->SetLimits(name_, limits).ok());
  pid_t pid = Fork([] { return TouchMemory(128 << 20); });
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(backend_->Attach(name_, pid).ok());
  Go(pid);
  int status = Wait(pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  CgroupStats stats = StatsOrFail();
  EXPECT_GE(stats.oom_kill_count, 1u);
  EXPECT_GE(stats.memory_peak_bytes, 16u << 20);
}

TEST_P(CgroupRootTest, PidsLimitRefusesForksAndCountsThem) {
  if (!Has("pids")) GTEST_SKIP() << "no pids controller for " << root_;
  constexpr int kMax = 8;
  CgroupLimits limits;
  limits.pids_max = kMax;
  ASSERT_TRUE(backend_->SetLimits(name_, limits).ok());
  int result[2];
  ASSERT_EQ(::pipe2(result, O_CLOEXEC), 0);
  pid_t pid = Fork([&] {
    int forked = 0;
    int error = 0;
    for (int i = 0; i < 4 * kMax; ++i) {
      pid_t child = ::fork();
      if (child == 0) {
        for (;;) ::pause();
      }
      if (child < 0) {
        error = errno;
        break;
      }
      ++forked;
    }
    int report[2] = {forked, error};
    if (::write(result[1], report, sizeof(report)) != sizeof(report)) return 3;
    for (;;) ::pause();
  });
  ASSERT_GT(pid, 0);
  ::close(result[1]);
  ASSERT_TRUE(backend_->Attach(name_, pid).ok());
  Go(pid);
  int report[2] = {-1, -1};
  ASSERT_EQ(::read(result[0], report, sizeof(report)), static_cast<ssize_t>(sizeof(report)));
  ::close(result[0]);
  EXPECT_EQ(report[0], kMax - 1);  // the child itself is the first of the kMax
  EXPECT_EQ(report[1], EAGAIN);
  CgroupStats stats = StatsOrFail();
  EXPECT_LE(stats.pids_current, static_cast<uint64_t>(kMax));
  EXPECT_GE(stats.pids_current, 1u);
  EXPECT_GE(stats.pids_max_events, 1u);
  Status killed = backend_->Kill(name_);
  ASSERT_TRUE(killed.ok()) << killed.ToString();
  int status = Wait(pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
}

TEST_P(CgroupRootTest, CpuTimeIsAccounted) {
  pid_t pid = Fork([] {
    BurnCpu(300);
    return 0;
  });
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(backend_->Attach(name_, pid).ok());
  Go(pid);
  int status = Wait(pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  CgroupStats stats = StatsOrFail();
  EXPECT_GE(stats.cpu_usage_usec, 200000u);
  EXPECT_LT(stats.cpu_usage_usec, 60000000u);
  EXPECT_GE(stats.cpu_user_usec, 100000u);
  StatusOr<uint64_t> usage = backend_->CpuUsageUsec(name_);
  ASSERT_TRUE(usage.ok()) << usage.status().ToString();
  EXPECT_GE(*usage, 200000u);
}

TEST_P(CgroupRootTest, KillReachesATreeThatEscapedItsSession) {
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  // A: setsid, forks B; B forks C and exits; C: setsid again and waits. C is an orphan in its
  // own session, outside A's process group: only the cgroup still holds it.
  pid_t a = Fork([&] {
    ::setsid();
    pid_t b = ::fork();
    if (b == 0) {
      if (::fork() == 0) {
        ::setsid();
        pid_t self = ::getpid();
        (void)!::write(ready[1], &self, sizeof(self));
        for (;;) ::pause();
      }
      ::_exit(0);
    }
    ::waitpid(b, nullptr, 0);
    pid_t self = ::getpid();
    (void)!::write(ready[1], &self, sizeof(self));
    for (;;) ::pause();
    return 0;
  });
  ASSERT_GT(a, 0);
  ::close(ready[1]);
  ASSERT_TRUE(backend_->Attach(name_, a).ok());
  Go(a);
  pid_t reported[2] = {0, 0};
  ASSERT_EQ(::read(ready[0], &reported[0], sizeof(pid_t)), static_cast<ssize_t>(sizeof(pid_t)));
  ASSERT_EQ(::read(ready[0], &reported[1], sizeof(pid_t)), static_cast<ssize_t>(sizeof(pid_t)));
  ::close(ready[0]);
  pid_t c = reported[0] == a ? reported[1] : reported[0];
  StatusOr<std::vector<pid_t>> before = backend_->Procs(name_);
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(before->size(), 2u);
  EXPECT_NE(::getsid(c), ::getsid(a));

  Status killed = backend_->Kill(name_);
  ASSERT_TRUE(killed.ok()) << killed.ToString();
  StatusOr<std::vector<pid_t>> after = backend_->Procs(name_);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->empty());
  int status = Wait(a);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  // C was re-parented to us (a child subreaper) when B exited.
  int c_status = -1;
  ASSERT_EQ(::waitpid(c, &c_status, 0), c);
  EXPECT_TRUE(WIFSIGNALED(c_status) && WTERMSIG(c_status) == SIGKILL) << c_status;
}

TEST_P(CgroupRootTest, FreezeStopsTheTreeAndThawResumesIt) {
  auto* counter = static_cast<std::atomic<uint64_t>*>(
      ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(counter, MAP_FAILED);
  counter->store(0);
  pid_t pid = Fork([counter] {
    for (;;) counter->fetch_add(1, std::memory_order_relaxed);
    return 0;
  });
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(backend_->Attach(name_, pid).ok());
  Go(pid);
  while (counter->load() == 0) std::this_thread::yield();

  Status frozen = backend_->Freeze(name_);
  ASSERT_TRUE(frozen.ok()) << frozen.ToString();
  if (IsV2()) {
    EXPECT_NE(ReadOr(root_ + "/" + name_ + "/cgroup.events").find("frozen 1"), std::string::npos);
  } else {
    EXPECT_EQ(ReadOr(Dir("freezer") + "/freezer.state"), "FROZEN\n");
  }
  uint64_t at_freeze = counter->load();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(counter->load(), at_freeze);

  Status thawed = backend_->Thaw(name_);
  ASSERT_TRUE(thawed.ok()) << thawed.ToString();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (counter->load() == at_freeze && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GT(counter->load(), at_freeze);

  // Killing a frozen tree works too (v1 must thaw it for the SIGKILL to land).
  ASSERT_TRUE(backend_->Freeze(name_).ok());
  Status killed = backend_->Kill(name_);
  ASSERT_TRUE(killed.ok()) << killed.ToString();
  int status = Wait(pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  ::munmap(counter, 4096);
}

TEST_P(CgroupRootTest, DestroyKillsAndRemovesTheWholeTree) {
  const std::string cmd1 = name_ + "/cmd1";
  const std::string cmd2 = name_ + "/cmd2";
  ASSERT_TRUE(backend_->Create(cmd1).ok());
  ASSERT_TRUE(backend_->Create(cmd2).ok());
  pid_t pid = Fork([] {
    for (;;) ::pause();
    return 0;
  });
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(backend_->Attach(cmd1, pid).ok());
  Go(pid);

  StatusOr<std::vector<std::string>> children = backend_->ListChildren(name_);
  ASSERT_TRUE(children.ok());
  EXPECT_EQ(*children, (std::vector<std::string>{cmd1, cmd2}));
  StatusOr<std::vector<pid_t>> procs = backend_->Procs(name_);
  ASSERT_TRUE(procs.ok());
  EXPECT_EQ(*procs, std::vector<pid_t>{pid});
  // RemoveIfEmpty never kills: a cgroup with a task or a child stays; an idle leaf goes.
  EXPECT_TRUE(backend_->RemoveIfEmpty(cmd1).ok());
  EXPECT_TRUE(backend_->RemoveIfEmpty(name_).ok());
  for (const std::string& dir : Dirs(cmd1)) EXPECT_TRUE(PathExists(dir)) << dir;
  EXPECT_EQ(::kill(pid, 0), 0);
  EXPECT_TRUE(backend_->RemoveIfEmpty(cmd2).ok());
  for (const std::string& dir : Dirs(cmd2)) EXPECT_FALSE(PathExists(dir)) << dir;

  Status destroyed = backend_->Destroy(name_);
  ASSERT_TRUE(destroyed.ok()) << destroyed.ToString();
  for (const std::string& dir : Dirs(name_)) EXPECT_FALSE(PathExists(dir)) << dir;
  int status = Wait(pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_TRUE(backend_->Destroy(name_).ok());  // already gone: OK
}

TEST_P(CgroupRootTest, CloneIntoCgroupUsesTheOpenForCloneFd) {
  StatusOr<UniqueFd> fd = backend_->OpenForClone(name_);
  if (!IsV2()) {
    ASSERT_FALSE(fd.ok());
    EXPECT_EQ(fd.status().error_number(), EOPNOTSUPP);
    return;
  }
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  int go[2];
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  struct clone_args args;
  std::memset(&args, 0, sizeof(args));
  args.flags = CLONE_INTO_CGROUP;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<uint64_t>(fd->get());
  long pid = ::syscall(SYS_clone3, &args, sizeof(args));
  if (pid == 0) {
    // The child has its own copy of the write end: close it, or the read never sees EOF.
    ::close(go[1]);
    char byte;
    (void)!::read(go[0], &byte, 1);
    ::_exit(0);
  }
  ::close(go[0]);
  ASSERT_GT(pid, 0) << "clone3(CLONE_INTO_CGROUP): " << std::strerror(errno);
  EXPECT_EQ(CgroupsOf(static_cast<pid_t>(pid))[""], "/" + name_);
  ::close(go[1]);
  int status = -1;
  ASSERT_EQ(::waitpid(static_cast<pid_t>(pid), &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// A child moves itself with the files OpenSelfJoin opened here (root's), as a sandbox's first
// step does and a command does inside: into the cgroup, then, after a cgroup namespace rooted
// there, into its leaf, where its namespace shows it as "/init". The placement tells the same
// story: on v1 the files, on v2 the clone fd and AfterNamespace.
TEST_P(CgroupRootTest, AChildJoinsItsCgroupAndLeafByItself) {
  StatusOr<ClonePlacement> placement = backend_->PrepareClone(name_, "init");
  ASSERT_TRUE(placement.ok()) << placement.status().ToString();
  EXPECT_EQ(placement->clone_fd() >= 0, IsV2());
  EXPECT_EQ(placement->join_fds().empty(), IsV2());
  StatusOr<std::vector<UniqueFd>> join = backend_->OpenSelfJoin(name_);
  ASSERT_TRUE(join.ok()) << join.status().ToString();
  if (IsV2()) {
    ASSERT_TRUE(backend_->CreateLeaf(name_ + "/init").ok());
  }
  StatusOr<std::vector<UniqueFd>> leaf = backend_->OpenSelfJoin(name_ + "/init");
  ASSERT_TRUE(leaf.ok()) << leaf.status().ToString();
  int report[2];
  ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(report[0]);
    for (const UniqueFd& fd : *join) {
      if (::write(fd.get(), "0", 1) != 1) ::_exit(2);
    }
    if (::unshare(CLONE_NEWCGROUP) != 0) ::_exit(3);
    for (const UniqueFd& fd : *leaf) {
      if (::write(fd.get(), "0", 1) != 1) ::_exit(4);
    }
    // What the child itself sees: its cgroup, relative to its namespace's root.
    std::string self = ReadOr("/proc/self/cgroup", "");
    (void)!::write(report[1], self.data(), self.size());
    ::_exit(0);
  }
  ASSERT_GT(pid, 0);
  ::close(report[1]);
  std::string seen;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(report[0], buf, sizeof(buf))) > 0) seen.append(buf, static_cast<size_t>(n));
  ::close(report[0]);
  int status = -1;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const std::string line = IsV2() ? "0::/init\n" : ":memory:/init\n";
  EXPECT_NE(seen.find(line), std::string::npos) << seen;
  // Control: without the files, a process stays where it was (this test's own cgroup).
  EXPECT_EQ(CgroupsOf(::getpid())[IsV2() ? "" : "memory"].find(name_), std::string::npos);
}

// The commands' cgroups repeat the sandbox's limits: what SetLimits wrote reads back the same,
// and a cgroup without limits reads as none (v1's unlimited values, v2's "max").
TEST_P(CgroupRootTest, ReadLimitsGivesBackWhatSetLimitsWrote) {
  StatusOr<CgroupLimits> fresh = backend_->ReadLimits(name_);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_FALSE(fresh->memory_max_bytes.has_value());
  EXPECT_FALSE(fresh->cpu_quota_us.has_value());
  EXPECT_FALSE(fresh->pids_max.has_value());
  CgroupLimits limits;
  if (Has("memory")) limits.memory_max_bytes = 96 << 20;
  if (Has("cpu")) limits.cpu_quota_us = 150000;
  if (Has("pids")) limits.pids_max = 77;
  ASSERT_TRUE(backend_->SetLimits(name_, limits).ok());
  StatusOr<CgroupLimits> read = backend_->ReadLimits(name_);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->memory_max_bytes, limits.memory_max_bytes);
  EXPECT_EQ(read->cpu_quota_us, limits.cpu_quota_us);
  EXPECT_EQ(read->pids_max, limits.pids_max);
  if (Has("cpu")) {
    EXPECT_EQ(read->cpu_period_us, 100000u);
  }
}

// A sandbox's init is cloned into the sandbox's cgroup (its cgroup namespace is rooted there),
// then moved into a leaf: after that the cgroup may have controlled children (commands).
TEST_P(CgroupRootTest, AttachToNewLeafFreesTheCgroupForControlledChildren) {
  pid_t pid = Fork([] { return 0; });
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(backend_->Attach(name_, pid).ok());
  if (IsV2() && Has("memory")) {
    // Control: while the process is in it, v2 refuses to hand controllers to children.
    Status early = backend_->Create(name_ + "/early");
    EXPECT_EQ(early.error_number(), EBUSY) << early.ToString();
  }
  Status moved = backend_->AttachToNewLeaf(name_, "init", pid);
  ASSERT_TRUE(moved.ok()) << moved.ToString();
  std::map<std::string, std::string> cgroups = CgroupsOf(pid);
  EXPECT_EQ(cgroups[IsV2() ? "" : "memory"], "/" + name_ + "/init");
  for (const std::string& dir : Dirs(name_)) EXPECT_EQ(ReadOr(dir + "/cgroup.procs"), "") << dir;
  Status command = backend_->Create(name_ + "/cmd-1");
  ASSERT_TRUE(command.ok()) << command.ToString();
  if (IsV2() && Has("memory")) {
    EXPECT_TRUE(PathExists(root_ + "/" + name_ + "/cmd-1/memory.max"));
    EXPECT_TRUE(PathExists(root_ + "/" + name_ + "/init/memory.max"));
  }
  // A leaf that exists already is an error, not a second move.
  EXPECT_FALSE(backend_->AttachToNewLeaf(name_, "init", pid).ok());
  Go(pid);
  int status = Wait(pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

INSTANTIATE_TEST_SUITE_P(Backends, CgroupRootTest,
                         ::testing::Values(Target::kDetected, Target::kHybridUnified), TargetName);

}  // namespace
}  // namespace corral::cgroups
