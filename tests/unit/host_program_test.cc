// RunHostProgram (supervisor/images/host_program.h): a host program's output and status, and a
// program cut short (its timeout, the daemon's stop) killed with its whole process group.
#include "supervisor/images/host_program.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "tests/testing/temp_dir.h"

namespace corral::supervisor {
namespace {

const std::vector<std::string> kEnv = {"PATH=/usr/bin:/bin"};

// Whether process `pid` is gone (or a zombie of someone else's), within a few seconds.
bool GoneSoon(pid_t pid) {
  for (int i = 0; i < 300; ++i) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return true;
    const size_t paren = line.rfind(')');
    if (paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z') return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

pid_t ReadPid(const std::string& path) {
  std::ifstream in(path);
  pid_t pid = 0;
  in >> pid;
  return pid;
}

TEST(HostProgram, OutputAndExitStatus) {
  std::string out;
  auto code = RunHostProgram({{"/bin/sh", "-c", "echo to-out; echo to-err >&2; exit 3"}, kEnv},
                             [&](std::string_view text) { out += text; });
  ASSERT_TRUE(code.ok()) << code.status().ToString();
  EXPECT_EQ(*code, 3);
  EXPECT_EQ(out, "to-out\nto-err\n");
  // Only the environment given.
  out.clear();
  code = RunHostProgram({{"sh", "-c", "echo ${HOME:-none} $PATH"}, kEnv}, [&](std::string_view text) { out += text; });
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(out, "none /usr/bin:/bin\n");
  EXPECT_EQ(RunHostProgram({{"/nonexistent/program"}, kEnv}, [](std::string_view) {}).status().error_number(), ENOENT);
}

TEST(HostProgram, ATimeoutKillsTheWholeProcessGroup) {
  test::TempDir tmp("host-program");
  const std::string pidfile = tmp.Join("pid");
  const auto started = std::chrono::steady_clock::now();
  // A grandchild that would outlive a kill of the child alone, and that holds the output pipe.
  auto code = RunHostProgram({{"/bin/sh", "-c", "sleep 60 & echo $! > " + pidfile + "; wait"}, kEnv,
                              std::chrono::milliseconds(300)},
                             [](std::string_view) {});
  ASSERT_FALSE(code.ok());
  EXPECT_EQ(code.status().error_number(), ETIMEDOUT) << code.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
  const pid_t grandchild = ReadPid(pidfile);
  ASSERT_GT(grandchild, 0);
  EXPECT_TRUE(GoneSoon(grandchild)) << "the group's other process survived";
  // The control: within its time, the same shape ends by itself.
  code = RunHostProgram({{"/bin/sh", "-c", "sleep 0.1 & wait"}, kEnv, std::chrono::seconds(30)},
                        [](std::string_view) {});
  ASSERT_TRUE(code.ok()) << code.status().ToString();
  EXPECT_EQ(*code, 0);
}

TEST(HostProgram, StopEndsItWithinASecond) {
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stop = true;
  });
  const auto started = std::chrono::steady_clock::now();
  auto code = RunHostProgram({{"/bin/sleep", "60"}, kEnv, std::chrono::milliseconds(0), &stop}, [](std::string_view) {});
  stopper.join();
  ASSERT_FALSE(code.ok());
  EXPECT_EQ(code.status().error_number(), ECANCELED) << code.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  // The control: a stop flag never set changes nothing.
  std::atomic<bool> never{false};
  auto done = RunHostProgram({{"/bin/true"}, kEnv, std::chrono::milliseconds(0), &never}, [](std::string_view) {});
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(*done, 0);
}

}  // namespace
}  // namespace corral::supervisor
