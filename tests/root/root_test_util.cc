#include "tests/root/root_test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "cgroups/cgroup_backend.h"
#include "common/file_util.h"

namespace corral::test {
namespace {

const char* const kCgroupRoots[] = {"/sys/fs/cgroup/pids", "/sys/fs/cgroup/memory",
                                    "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct",
                                    "/sys/fs/cgroup/freezer", "/sys/fs/cgroup"};

std::vector<std::string> ChildDirs(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (struct dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == ".." || e->d_type != DT_DIR) continue;
      out.push_back(dir + "/" + name);
    }
    closedir(d);
  }
  return out;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (struct dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") out.push_back(name);
    }
    closedir(d);
  }
  return out;
}

std::vector<std::string> TestEnv() {
  return {"CORRAL_RUN_DIR=" + TestRunDir(), "CORRAL_STATE_DIR=" + TestStateDir(),
          "CORRAL_CGROUP_PARENT=" + TestCgroupParent(),
          "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"};
}

pid_t Spawn(const std::vector<std::string>& args, int out_fd, int err_fd, int in_fd = -1) {
  std::vector<std::string> argv_s = {CorralBinary()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv, envp;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = TestEnv();
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDWR);
    dup2(in_fd >= 0 ? in_fd : devnull, 0);
    dup2(out_fd >= 0 ? out_fd : devnull, 1);
    dup2(err_fd >= 0 ? err_fd : devnull, 2);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

}  // namespace

std::string CorralBinary() { return std::string(CORRAL_BIN_DIR) + "/corral"; }
// Fixtures are bound read-only into every test sandbox at kFixtureMount.
constexpr char kFixtureMount[] = "/opt/corral-fixtures";
std::string FixturePath(const std::string& name) { return std::string(kFixtureMount) + "/" + name; }

// `run ARGS` with the fixtures bound in.
std::vector<std::string> WithFixtures(std::vector<std::string> args) {
  if (!args.empty() && args[0] == "run") {
    args.insert(args.begin() + 1, {"--bind", std::string(CORRAL_FIXTURE_DIR) + ":" + kFixtureMount + ":ro"});
  }
  return args;
}
std::string TestRunDir() { return "/run/corral-test-" + std::to_string(getpid()); }
std::string TestStateDir() { return "/var/tmp/corral-test-state-" + std::to_string(getpid()); }
std::string TestCgroupParent() { return "corral/test-" + std::to_string(getpid()); }

CorralResult RunCorral(const std::vector<std::string>& args_in, double timeout_s, bool with_outcome,
                       const std::string& input) {
  std::vector<std::string> args = args_in;
  char outcome_path[] = "/tmp/corral-outcome-XXXXXX";
  int outcome_fd = -1;
  if (with_outcome && !args.empty() && args[0] == "run") {
    outcome_fd = mkstemp(outcome_path);
    args.insert(args.begin() + 1, {"--outcome-json", outcome_path});
  }
  args = WithFixtures(args);
  int out_pipe[2], err_pipe[2];
  EXPECT_EQ(pipe2(out_pipe, O_CLOEXEC), 0);
  EXPECT_EQ(pipe2(err_pipe, O_CLOEXEC), 0);
  // Input comes from an unlinked temporary file, so it needs no writer thread.
  int in_fd = -1;
  if (!input.empty()) {
    char in_path[] = "/tmp/corral-input-XXXXXX";
    in_fd = mkstemp(in_path);
    unlink(in_path);
    EXPECT_EQ(write(in_fd, input.data(), input.size()), static_cast<ssize_t>(input.size()));
    lseek(in_fd, 0, SEEK_SET);
  }
  pid_t pid = Spawn(args, out_pipe[1], err_pipe[1], in_fd);
  if (in_fd >= 0) close(in_fd);
  close(out_pipe[1]);
  close(err_pipe[1]);
  CorralResult result;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool out_open = true, err_open = true, killed = false;
  while (out_open || err_open) {
    struct pollfd fds[2] = {{out_open ? out_pipe[0] : -1, POLLIN, 0}, {err_open ? err_pipe[0] : -1, POLLIN, 0}};
    int left_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       deadline - std::chrono::steady_clock::now()).count());
    if (left_ms <= 0) {
      kill(pid, SIGKILL);
      killed = true;
      break;
    }
    if (poll(fds, 2, left_ms) < 0 && errno != EINTR) break;
    char buf[4096];
    for (int i = 0; i < 2; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n <= 0) {
        (i == 0 ? out_open : err_open) = false;
      } else {
        (i == 0 ? result.out : result.err).append(buf, static_cast<size_t>(n));
      }
    }
  }
  close(out_pipe[0]);
  close(err_pipe[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!killed && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (outcome_fd >= 0) {
    close(outcome_fd);
    auto text = ReadFileToString(outcome_path);
    if (text.ok() && !text->empty()) {
      result.outcome = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    }
    unlink(outcome_path);
  }
  return result;
}

pid_t StartCorral(const std::vector<std::string>& args) { return Spawn(WithFixtures(args), -1, -1); }

std::vector<std::string> SandboxCgroups() {
  std::vector<std::string> out;
  for (const char* root : kCgroupRoots) {
    for (auto& dir : ChildDirs(std::string(root) + "/" + TestCgroupParent())) out.push_back(dir);
  }
  return out;
}

std::vector<pid_t> SandboxPids() {
  std::set<pid_t> pids;  // a v1 host lists each pid once per hierarchy
  for (const std::string& dir : SandboxCgroups()) {
    std::ifstream procs(dir + "/cgroup.procs");
    pid_t pid;
    while (procs >> pid) pids.insert(pid);
  }
  return std::vector<pid_t>(pids.begin(), pids.end());
}

bool WaitFor(const std::function<bool()>& pred, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

void SandboxTest::SetUp() {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: sandboxes create namespaces and cgroups";
  if (access(CorralBinary().c_str(), X_OK) != 0) GTEST_SKIP() << "corral binary not built";
  auto backend = cgroups::DetectBackend();
  if (!backend.ok()) GTEST_SKIP() << "no usable cgroup hierarchy: " << backend.status().ToString();
  if (const char* expect = getenv("CORRAL_EXPECT_CGROUP_VERSION")) {
    bool v2 = (*backend)->version() == cgroups::CgroupVersion::kV2;
    ASSERT_EQ(std::string(expect), v2 ? "2" : "1") << "the suite did not get the cgroup version it was run for";
  }
}

void SandboxTest::TearDown() {
  if (IsSkipped()) return;
  // A finished run leaves no cgroup and no run record.
  EXPECT_TRUE(WaitFor([] { return SandboxCgroups().empty(); }, 5))
      << "leaked cgroup: " << SandboxCgroups().front();
  std::vector<std::string> records = Entries(TestRunDir() + "/runs");
  EXPECT_TRUE(records.empty()) << "leaked run record: " << records.front();
}

[[maybe_unused]] ::testing::Environment* const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new SandboxEnvironment);

void SandboxEnvironment::TearDown() {
  if (geteuid() != 0) return;
  auto backend = cgroups::DetectBackend();
  if (backend.ok()) {
    for (const std::string& dir : SandboxCgroups()) {
      (void)(*backend)->Destroy(dir.substr(dir.find(TestCgroupParent())));
    }
    (void)(*backend)->RemoveIfEmpty(TestCgroupParent());
    (void)(*backend)->RemoveIfEmpty("corral");
  }
  (void)RemoveTree(TestRunDir());
  (void)RemoveTree(TestStateDir());
}

std::vector<std::string> LoopDevicesBacking(const std::string& path) {
  std::vector<std::string> devices;
  DIR* dir = opendir("/sys/block");
  if (dir == nullptr) return devices;
  while (struct dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind("loop", 0) != 0) continue;
    // Only an attached device has loop/backing_file.
    StatusOr<std::string> backing = ReadFileToString("/sys/block/" + name + "/loop/backing_file");
    if (!backing.ok()) continue;
    std::string file = *backing;
    while (!file.empty() && file.back() == '\n') file.pop_back();
    const std::string deleted = " (deleted)";
    if (file.size() > deleted.size() && file.compare(file.size() - deleted.size(), deleted.size(), deleted) == 0) {
      file.resize(file.size() - deleted.size());
    }
    if (file == path || file.rfind(path + "/", 0) == 0) devices.push_back("/dev/" + name);
  }
  closedir(dir);
  return devices;
}

}  // namespace corral::test
