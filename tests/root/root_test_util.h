// Helpers for tests that run real sandboxes: run the built `corral` binary, read its outcome,
// and check from the host that nothing was left behind.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace corral::test {

struct CorralResult {
  int exit_code = -1;       // -1: did not exit (timed out and was killed)
  std::string out;          // stdout
  std::string err;          // stderr
  nlohmann::json outcome;   // from --outcome-json, null if absent
};

// Where the built binaries are.
std::string CorralBinary();
std::string FixturePath(const std::string& name);

// Runs `corral ARGS...` with the test environment (a private run dir and cgroup parent), waits
// at most `timeout_s`, and returns its exit code and output. When `with_outcome` is set,
// "--outcome-json FILE" is inserted after "run" and the JSON read back. `input` is the
// command's stdin (empty: /dev/null).
CorralResult RunCorral(const std::vector<std::string>& args, double timeout_s = 60,
                       bool with_outcome = true, const std::string& input = "");

// Starts `corral ARGS...` without waiting; returns its pid (stdout/stderr go to /dev/null).
pid_t StartCorral(const std::vector<std::string>& args);

// The environment every test run uses: private run/state dirs and cgroup parent per process.
std::string TestRunDir();
std::string TestStateDir();
std::string TestCgroupParent();  // "corral/test-<pid>"

// Directories under the test cgroup parent in any hierarchy (v1 controllers or v2), i.e. live
// or leaked sandboxes of this test process.
std::vector<std::string> SandboxCgroups();
// Host pids of every process in the sandbox cgroups.
std::vector<pid_t> SandboxPids();
// Waits until `pred` holds or `timeout_s` passes.
bool WaitFor(const std::function<bool()>& pred, double timeout_s);

// Skips unless root and the kernel gives us what sandboxes need; also checks after each test
// that no cgroup or run record of this process is left.
class SandboxTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
};

// Removes the test cgroup parent and dirs at exit of the test binary.
class SandboxEnvironment : public ::testing::Environment {
 public:
  void TearDown() override;
};

// The loop devices ("/dev/loopN") whose backing file is `path` or lies under the directory
// `path`, from /sys/block/loop*/loop/backing_file ("file" or "file (deleted)").
std::vector<std::string> LoopDevicesBacking(const std::string& path);

}  // namespace corral::test
