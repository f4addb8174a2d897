// isolation/fs_identity.h against the real kernel: a thread that takes another user's file
// identity creates files owned by that user and is refused what that user may not open, while
// the other threads of the process (and the thread itself, afterwards) keep root's. Ownership and
// access are read back with stat(2) and open(2).
#include "isolation/fs_identity.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/capability.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "common/unique_fd.h"

namespace corral::isolation {
namespace {

constexpr uid_t kUid = 4242;
constexpr gid_t kGid = 4343;

struct Owner {
  uid_t uid;
  gid_t gid;
  bool operator==(const Owner&) const = default;
};

// Creates `path` on the calling thread and returns who owns it ({-1, -1} when it failed).
Owner CreateAndOwner(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  struct stat st {};
  if (!fd || fstat(fd.get(), &st) != 0) return {static_cast<uid_t>(-1), static_cast<gid_t>(-1)};
  return {st.st_uid, st.st_gid};
}

// 0 when `path` opens for reading on the calling thread, else the errno.
int OpenError(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  return fd ? 0 : errno;
}

class FsIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (setfsuid to another user)";
    std::string pattern = "/tmp/corral-fsid-XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    ASSERT_EQ(chmod(dir_.c_str(), 01777), 0);  // anyone may create files here
    secret_ = dir_ + "/secret";
    ASSERT_TRUE(WriteNewFile(secret_, "root only\n", 0600).ok());
  }
  void TearDown() override {
    if (!dir_.empty()) (void)RemoveTree(dir_);
  }
  std::string dir_, secret_;
};

TEST_F(FsIdentityTest, TheThreadActsAsTheUserWhileItLasts) {
  {
    ScopedFsIdentity as_user(kUid, kGid);
    ASSERT_TRUE(as_user.status().ok()) << as_user.status().ToString();
    EXPECT_EQ(CreateAndOwner(dir_ + "/made-as-user"), (Owner{kUid, kGid}));
    EXPECT_EQ(OpenError(secret_), EACCES);
    EXPECT_EQ(getgroups(0, nullptr), 0);
  }
  // Control, afterwards: root again, on the same thread.
  EXPECT_EQ(CreateAndOwner(dir_ + "/made-after"), (Owner{0, 0}));
  EXPECT_EQ(OpenError(secret_), 0);
  EXPECT_EQ(setfsuid(static_cast<uid_t>(-1)), 0);
  EXPECT_EQ(setfsgid(static_cast<gid_t>(-1)), 0);
}

// A thread's credentials are copied to the threads it creates, so the other thread is started
// before this one takes the identity, and works while this one holds it.
TEST_F(FsIdentityTest, OtherThreadsKeepTheirIdentity) {
  std::vector<gid_t> groups(static_cast<size_t>(getgroups(0, nullptr)));
  ASSERT_EQ(getgroups(static_cast<int>(groups.size()), groups.data()), static_cast<int>(groups.size()));
  std::promise<void> switched;
  Owner other{};
  int other_open = -1;
  int other_groups = -1;
  std::thread thread([&, ready = switched.get_future()]() mutable {
    ready.wait();
    other = CreateAndOwner(dir_ + "/made-by-other-thread");
    other_open = OpenError(secret_);
    other_groups = getgroups(0, nullptr);
  });
  {
    ScopedFsIdentity as_user(kUid, kGid);
    switched.set_value();
    thread.join();
    ASSERT_TRUE(as_user.status().ok()) << as_user.status().ToString();
    // Control: this thread is the user meanwhile.
    EXPECT_EQ(CreateAndOwner(dir_ + "/made-by-this-thread"), (Owner{kUid, kGid}));
  }
  EXPECT_EQ(other, (Owner{0, 0}));
  EXPECT_EQ(other_open, 0);
  EXPECT_EQ(other_groups, static_cast<int>(groups.size()));
}

TEST_F(FsIdentityTest, SupplementaryGroupsComeBack) {
  std::vector<gid_t> original(static_cast<size_t>(getgroups(0, nullptr)));
  ASSERT_EQ(getgroups(static_cast<int>(original.size()), original.data()), static_cast<int>(original.size()));
  const gid_t extra[] = {0, 4444};
  // This thread only (the raw syscall, as the class does; glibc's setgroups would change all).
  ASSERT_EQ(syscall(SYS_setgroups, 2, extra), 0);
  {
    ScopedFsIdentity as_user(kUid, kGid);
    ASSERT_TRUE(as_user.status().ok());
    EXPECT_EQ(getgroups(0, nullptr), 0);
  }
  gid_t after[4] = {};
  ASSERT_EQ(getgroups(4, after), 2);
  EXPECT_EQ(after[0], 0u);
  EXPECT_EQ(after[1], 4444u);
  ASSERT_EQ(syscall(SYS_setgroups, original.size(), original.data()), 0);
}

// Without CAP_SETGID and CAP_SETUID the kernel gives no other identity: status() says so and the
// thread keeps its own. A child process drops its capabilities to try.
TEST_F(FsIdentityTest, WithoutCapabilitiesTheStatusIsAnError) {
  const std::string path = dir_ + "/made-without-caps";
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    cap_t none = cap_init();
    if (none == nullptr || cap_set_proc(none) != 0) _exit(10);
    ScopedFsIdentity as_user(kUid, kGid);
    if (as_user.status().ok()) _exit(11);
    if (as_user.status().error_number() != EPERM) _exit(12);
    if (setfsuid(static_cast<uid_t>(-1)) != 0) _exit(13);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: capset, 11: no error, 12: not EPERM, 13: fsuid moved";
}

}  // namespace
}  // namespace corral::isolation
