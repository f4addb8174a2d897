// rootfs/scoped_path.h against the real kernel, without privileges: a tree in a temporary
// directory plays an untrusted root, with `..` paths, absolute and relative symlinks that point
// out of it, and /proc's magic links. Each refusal has its control: the same path opened with
// plain openat(2) does get out.
#include "rootfs/scoped_path.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "tests/testing/temp_dir.h"

namespace corral::rootfs {
namespace {

std::string ReadFd(int fd) {
  std::string out;
  char buffer[256];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) out.append(buffer, static_cast<size_t>(n));
  return n < 0 ? "<read failed>" : out;
}

// <tmp>/outside.txt beside <tmp>/root, and in root: etc/passwd, sub/, and symlinks
// abs -> /etc/passwd, rel -> ../../../../etc/passwd, sub/up -> ../.., escape -> ../outside.txt.
class ScopedPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string root = dir_ + "/root";
    ASSERT_TRUE(MakeDirs(root + "/etc").ok());
    ASSERT_TRUE(MakeDirs(root + "/sub").ok());
    ASSERT_TRUE(WriteNewFile(root + "/etc/passwd", "inside\n").ok());
    ASSERT_TRUE(WriteNewFile(dir_ + "/outside.txt", "outside\n").ok());
    ASSERT_EQ(symlink("/etc/passwd", (root + "/abs").c_str()), 0);
    ASSERT_EQ(symlink("../../../../etc/passwd", (root + "/rel").c_str()), 0);
    ASSERT_EQ(symlink("../..", (root + "/sub/up").c_str()), 0);
    ASSERT_EQ(symlink("../outside.txt", (root + "/escape").c_str()), 0);
    root_ = open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(root_, 0);
  }
  void TearDown() override {
    if (root_ >= 0) close(root_);
  }

  // What OpenInRoot(root, path) reads, or "errno <name>".
  std::string ReadInRoot(const std::string& path) {
    UniqueFd fd = OpenInRoot(root_, path, O_RDONLY);
    if (!fd) return "errno " + ErrnoName(errno);
    return ReadFd(fd.get());
  }

  // What plain openat(root, path) reads: the control, which does not stay inside.
  std::string ReadPlain(const std::string& path) {
    UniqueFd fd(openat(root_, path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return "errno " + ErrnoName(errno);
    return ReadFd(fd.get());
  }

  test::TempDir tmp_{"scoped"};
  const std::string dir_ = tmp_.path();
  int root_ = -1;
};

TEST_F(ScopedPathTest, DotDotStopsAtTheRoot) {
  EXPECT_EQ(ReadInRoot("/etc/passwd"), "inside\n");
  EXPECT_EQ(ReadInRoot("/../../etc/passwd"), "inside\n");
  EXPECT_EQ(ReadInRoot("../outside.txt"), "errno ENOENT");
  EXPECT_EQ(ReadInRoot("sub/../../outside.txt"), "errno ENOENT");
  // Control: without the scope, `..` leaves the root.
  EXPECT_EQ(ReadPlain("../outside.txt"), "outside\n");
}

TEST_F(ScopedPathTest, SymlinksOutLandInside) {
  EXPECT_EQ(ReadInRoot("/abs"), "inside\n");
  EXPECT_EQ(ReadInRoot("/rel"), "inside\n");
  EXPECT_EQ(ReadInRoot("/sub/up/etc/passwd"), "inside\n");
  EXPECT_EQ(ReadInRoot("/escape"), "errno ENOENT");
  // Control: followed by plain openat, each of them leads out.
  EXPECT_NE(ReadPlain("abs"), "inside\n");
  EXPECT_NE(ReadPlain("abs").rfind("errno", 0), 0u) << "the host's /etc/passwd is readable";
  EXPECT_EQ(ReadPlain("escape"), "outside\n");
  EXPECT_EQ(ReadPlain("sub/up/outside.txt"), "outside\n");
}

TEST_F(ScopedPathTest, NoFollowGivesTheLinkItself) {
  UniqueFd link = OpenInRoot(root_, "/abs", O_PATH | O_NOFOLLOW);
  ASSERT_TRUE(link) << ErrnoName(errno);
  struct stat st;
  ASSERT_EQ(fstat(link.get(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  // Control: without O_NOFOLLOW the link is followed (inside the root) to a regular file.
  UniqueFd target = OpenInRoot(root_, "/abs", O_PATH);
  ASSERT_TRUE(target);
  ASSERT_EQ(fstat(target.get(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
}

// /proc/self/root and /proc/self/fd/N are magic links: the kernel jumps to what they name rather
// than resolving text. Anchored at /proc/self, they are refused with ELOOP.
TEST_F(ScopedPathTest, MagicLinksAreRefused) {
  UniqueFd proc_self(open("/proc/self", O_PATH | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(proc_self);
  UniqueFd through_root = OpenInRoot(proc_self.get(), "root/etc", O_PATH | O_DIRECTORY);
  EXPECT_FALSE(through_root);
  EXPECT_EQ(errno, ELOOP);
  const std::string fd_link = "fd/" + std::to_string(root_) + "/etc/passwd";
  UniqueFd through_fd = OpenInRoot(proc_self.get(), fd_link, O_RDONLY);
  EXPECT_FALSE(through_fd);
  EXPECT_EQ(errno, ELOOP);
  // Controls: an ordinary file there opens, and plain openat follows both magic links.
  UniqueFd status = OpenInRoot(proc_self.get(), "status", O_RDONLY);
  EXPECT_TRUE(status) << ErrnoName(errno);
  UniqueFd plain_root(openat(proc_self.get(), "root/etc", O_PATH | O_DIRECTORY | O_CLOEXEC));
  EXPECT_TRUE(plain_root);
  UniqueFd plain_fd(openat(proc_self.get(), fd_link.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(plain_fd);
  EXPECT_EQ(ReadFd(plain_fd.get()), "inside\n");
}

TEST_F(ScopedPathTest, PseudoFileSystemsAreNamed) {
  UniqueFd proc(open("/proc/self/status", O_PATH | O_CLOEXEC));
  UniqueFd sys(open("/sys/kernel", O_PATH | O_CLOEXEC));
  ASSERT_TRUE(proc && sys);
  auto on_proc = PseudoFsOf(proc.get());
  ASSERT_TRUE(on_proc.ok()) << on_proc.status().ToString();
  ASSERT_NE(*on_proc, nullptr);
  EXPECT_STREQ(*on_proc, "procfs");
  auto on_sys = PseudoFsOf(sys.get());
  ASSERT_TRUE(on_sys.ok());
  ASSERT_NE(*on_sys, nullptr);
  EXPECT_STREQ(*on_sys, "sysfs");
  // Control: the temporary directory is on an ordinary file system.
  auto on_tmp = PseudoFsOf(root_);
  ASSERT_TRUE(on_tmp.ok());
  EXPECT_EQ(*on_tmp, nullptr);
  EXPECT_EQ(PseudoFsOf(-1).status().error_number(), EBADF);
}

// On a node whose path exists in the test's root only: were the resolution to escape, the host
// has no /sub/node to read or chmod (a broken OpenInRoot once chmod'ed the host's /etc/passwd).
TEST_F(ScopedPathTest, ReopenAndChmodActOnTheNode) {
  ASSERT_TRUE(WriteNewFile(dir_ + "/root/sub/node", "inside\n").ok());
  ASSERT_NE(access("/sub/node", F_OK), 0) << "the host has a /sub/node: this test would touch it";
  UniqueFd node = OpenInRoot(root_, "/sub/node", O_PATH);
  ASSERT_TRUE(node);
  // An O_PATH fd reads nothing; reopened, the same inode does.
  char byte;
  EXPECT_EQ(read(node.get(), &byte, 1), -1);
  EXPECT_EQ(errno, EBADF);
  UniqueFd file = ReopenNode(node.get(), O_RDONLY);
  ASSERT_TRUE(file) << ErrnoName(errno);
  EXPECT_EQ(ReadFd(file.get()), "inside\n");
  struct stat a, b;
  ASSERT_EQ(fstat(node.get(), &a), 0);
  ASSERT_EQ(fstat(file.get(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);

  EXPECT_EQ(ChmodNode(node.get(), 0640), 0);
  ASSERT_EQ(stat((dir_ + "/root/sub/node").c_str(), &a), 0);
  EXPECT_EQ(a.st_mode & 07777, 0640u);
  // Control: fchmod refuses an O_PATH fd.
  EXPECT_EQ(fchmod(node.get(), 0600), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST_F(ScopedPathTest, SameMountTellsMountsApart) {
  UniqueFd file = OpenInRoot(root_, "/etc/passwd", O_PATH);
  ASSERT_TRUE(file);
  struct statx in_root, of_file, of_proc;
  ASSERT_EQ(StatxFd(root_, &in_root), 0);
  ASSERT_EQ(StatxAt(root_, "etc/passwd", AT_SYMLINK_NOFOLLOW, &of_file), 0);
  UniqueFd proc(open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(proc);
  ASSERT_EQ(StatxFd(proc.get(), &of_proc), 0);
  EXPECT_TRUE(SameMount(in_root, of_file));
  EXPECT_FALSE(SameMount(in_root, of_proc));
  EXPECT_EQ(StatxAt(root_, "missing", 0, &of_file), ENOENT);
}

TEST(PathComponentsTest, DropsEmptyAndDotKeepsDotDot) {
  EXPECT_EQ(PathComponents("/a//./b/"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(PathComponents("../x/.."), (std::vector<std::string>{"..", "x", ".."}));
  EXPECT_EQ(PathComponents("/"), std::vector<std::string>{});
  EXPECT_EQ(PathComponents(""), std::vector<std::string>{});
}

}  // namespace
}  // namespace corral::rootfs
