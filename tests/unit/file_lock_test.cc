// LockFileForProcess: the lock is the process's. Another process is refused while the holder
// lives; a child the holder forked (and that never exec'd, like a sandbox's launcher child in
// its setup) does not keep it once the holder is gone, as a flock would.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "common/file_util.h"
#include "tests/testing/temp_dir.h"

namespace corral {
namespace {

// Forks a holder that takes the lock and forks a child that only waits; returns the holder's pid
// and the child's (through `child`), once the lock is taken.
pid_t StartHolder(const std::string& path, pid_t* child) {
  int ready[2];
  EXPECT_EQ(pipe(ready), 0);
  const pid_t holder = fork();
  if (holder == 0) {
    auto lock = LockFileForProcess(path);
    const pid_t waiter = fork();
    if (waiter == 0) {
      for (;;) pause();
    }
    const int32_t message[2] = {lock.ok() ? 1 : 0, waiter};
    (void)!write(ready[1], message, sizeof(message));
    for (;;) pause();
  }
  close(ready[1]);
  int32_t message[2] = {0, 0};
  EXPECT_EQ(read(ready[0], message, sizeof(message)), static_cast<ssize_t>(sizeof(message)));
  close(ready[0]);
  EXPECT_EQ(message[0], 1) << "the holder could not take the lock";
  *child = message[1];
  return holder;
}

TEST(FileLockTest, TheLockIsTheProcesssNotItsForkedChilds) {
  test::TempDir dir("file-lock");
  const std::string path = dir.path() + "/daemon.lock";
  pid_t child = 0;
  const pid_t holder = StartHolder(path, &child);
  auto refused = LockFileForProcess(path);
  ASSERT_FALSE(refused.ok()) << "taken while its holder lives";
  EXPECT_EQ(refused.status().error_number(), EWOULDBLOCK);
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  // The holder's child still runs, with its copy of the holder's fds.
  EXPECT_EQ(kill(child, 0), 0);
  auto taken = LockFileForProcess(path);
  EXPECT_TRUE(taken.ok()) << "the holder's forked child kept the lock: " << taken.status().ToString();
  kill(child, SIGKILL);
}

}  // namespace
}  // namespace corral
