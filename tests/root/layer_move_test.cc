// A writable layer packed on one node and unpacked on another (supervisor/sandboxes/layer_move.h),
// with real files on the host's file system and GNU tar: what a layer holds comes through (owners,
// setuid bits, the overlay's xattrs and whiteouts, file capabilities, hard links, symlinks, holes),
// and a tar holding anything but the layer's one member is refused without writing it.
#include "supervisor/sandboxes/layer_move.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "common/file_util.h"
#include "common/run_program.h"
#include "common/sha256.h"
#include "common/unique_fd.h"
#include "tests/testing/temp_dir.h"

namespace corral::supervisor {
namespace {

constexpr uid_t kBase = 0xC0000000 + 7 * 65536;

class LayerMoveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (files of other uids, device nodes, trusted xattrs)";
  }

  std::string File(const std::string& path, const std::string& content, uid_t uid, mode_t mode) {
    EXPECT_TRUE(WriteNewFile(path, content, 0600).ok()) << path;
    EXPECT_EQ(lchown(path.c_str(), uid, uid), 0) << path;
    EXPECT_EQ(chmod(path.c_str(), mode), 0) << path;
    return path;
  }

  test::TempDir tmp_{"layer-move"};
  const std::string dir_ = tmp_.path();
};

struct stat Lstat(const std::string& path) {
  struct stat st = {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path << ": " << strerror(errno);
  return st;
}

std::string Xattr(const std::string& path, const char* name) {
  char buf[256];
  ssize_t n = lgetxattr(path.c_str(), name, buf, sizeof(buf));
  return n < 0 ? "" : std::string(buf, static_cast<size_t>(n));
}

TEST_F(LayerMoveTest, AnUpperDirectoryComesThroughWhole) {
  const WritableLayer from{LayerKind::kQuotaDir, dir_ + "/a/layer"};
  const std::string upper = from.path + "/upper";
  ASSERT_TRUE(MakeDirs(upper + "/home/agent/opaque", 0755).ok());
  ASSERT_EQ(chown(upper.c_str(), kBase, kBase), 0);
  ASSERT_EQ(chown((upper + "/home/agent").c_str(), kBase + 1000, kBase + 1000), 0);
  File(upper + "/home/agent/notes", "mine", kBase + 1000, 0640);
  File(upper + "/suid", "#!/bin/sh\n", kBase, 04755);
  ASSERT_EQ(link((upper + "/home/agent/notes").c_str(), (upper + "/home/agent/hard").c_str()), 0);
  ASSERT_EQ(symlink("notes", (upper + "/home/agent/soft").c_str()), 0);
  ASSERT_EQ(lchown((upper + "/home/agent/soft").c_str(), kBase + 1000, kBase + 1000), 0);
  // The overlay's: a whiteout (a file of the image deleted) and an opaque directory.
  ASSERT_EQ(mknod((upper + "/deleted").c_str(), S_IFCHR | 0, makedev(0, 0)), 0);
  ASSERT_EQ(setxattr((upper + "/home/agent/opaque").c_str(), "trusted.overlay.opaque", "y", 1, 0), 0);
  const std::string cap("\x01\x00\x00\x02\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", 20);
  ASSERT_EQ(setxattr((upper + "/suid").c_str(), "security.capability", cap.data(), cap.size(), 0), 0);
  // A sparse file in the tree too.
  {
    const std::string sparse = upper + "/home/agent/sparse";
    File(sparse, "", kBase + 1000, 0600);
    ASSERT_EQ(truncate(sparse.c_str(), 64 << 20), 0);
  }
  auto packed = PackLayer(from, dir_ + "/moves/sb_x.out.tar");
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  EXPECT_EQ(packed->sha256, *Sha256File(dir_ + "/moves/sb_x.out.tar"));
  EXPECT_LT(packed->bytes, 1u << 20);  // the 64 MiB hole is not in it

  const WritableLayer to{LayerKind::kQuotaDir, dir_ + "/b/layer"};
  ASSERT_TRUE(MakeDirs(to.path, 0700).ok());
  ASSERT_TRUE(UnpackLayer(dir_ + "/moves/sb_x.out.tar", to).ok());
  const std::string got = to.path + "/upper";
  EXPECT_EQ(Lstat(got).st_uid, kBase);
  EXPECT_TRUE(S_ISDIR(Lstat(to.path + "/work").st_mode));
  const struct stat notes = Lstat(got + "/home/agent/notes");
  EXPECT_EQ(notes.st_uid, kBase + 1000);
  EXPECT_EQ(notes.st_mode & 07777, 0640u);
  EXPECT_EQ(notes.st_nlink, 2u);
  EXPECT_EQ(Lstat(got + "/home/agent/hard").st_ino, notes.st_ino);
  EXPECT_EQ(*ReadFileToString(got + "/home/agent/notes"), "mine");
  const struct stat soft = Lstat(got + "/home/agent/soft");
  EXPECT_TRUE(S_ISLNK(soft.st_mode));
  EXPECT_EQ(soft.st_uid, kBase + 1000);
  const struct stat suid = Lstat(got + "/suid");
  EXPECT_EQ(suid.st_mode & 07777, 04755u);
  EXPECT_EQ(Xattr(got + "/suid", "security.capability"), cap);
  const struct stat whiteout = Lstat(got + "/deleted");
  EXPECT_TRUE(S_ISCHR(whiteout.st_mode));
  EXPECT_EQ(whiteout.st_rdev, makedev(0, 0));
  EXPECT_EQ(Xattr(got + "/home/agent/opaque", "trusted.overlay.opaque"), "y");
  const struct stat sparse = Lstat(got + "/home/agent/sparse");
  EXPECT_EQ(sparse.st_size, 64 << 20);
  EXPECT_LT(sparse.st_blocks * 512, 1 << 20);
}

TEST_F(LayerMoveTest, AnImageMovesAsItsDataNotItsHoles) {
  const WritableLayer from{LayerKind::kImage, dir_ + "/a/disk.img"};
  ASSERT_TRUE(MakeDirs(dir_ + "/a", 0700).ok());
  File(from.path, "", 0, 0600);
  ASSERT_EQ(truncate(from.path.c_str(), off_t{1} << 30), 0);
  {
    // Data at three places of a 1 GiB file.
    UniqueFd fd(open(from.path.c_str(), O_WRONLY | O_CLOEXEC));
    ASSERT_TRUE(fd);
    const std::string block(1 << 20, 'd');
    for (off_t at : {off_t{0}, off_t{300} << 20, (off_t{1} << 30) - (1 << 20)}) {
      ASSERT_EQ(pwrite(fd.get(), block.data(), block.size(), at), static_cast<ssize_t>(block.size()));
    }
  }
  auto packed = PackLayer(from, dir_ + "/image.tar");
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  EXPECT_LT(packed->bytes, 4u << 20);
  EXPECT_GT(packed->bytes, 3u << 20);

  const WritableLayer to{LayerKind::kImage, dir_ + "/b/sandbox/disk.img"};
  ASSERT_TRUE(UnpackLayer(dir_ + "/image.tar", to).ok());
  EXPECT_EQ(Lstat(to.path).st_size, off_t{1} << 30);
  EXPECT_LT(Lstat(to.path).st_blocks * 512, 8 << 20);
  // The data where it was, zeros between (hashing the whole GiB would take seconds).
  UniqueFd fd(open(to.path.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd);
  std::string block(1 << 20, '\0');
  for (off_t at : {off_t{0}, off_t{300} << 20, (off_t{1} << 30) - (1 << 20), off_t{500} << 20}) {
    ASSERT_EQ(pread(fd.get(), block.data(), block.size(), at), static_cast<ssize_t>(block.size()));
    EXPECT_EQ(block, std::string(1 << 20, at == off_t{500} << 20 ? '\0' : 'd')) << at;
  }
}

TEST_F(LayerMoveTest, ALayerNeverMadeMovesAsNothing) {
  const WritableLayer from{LayerKind::kImage, dir_ + "/a/disk.img"};
  auto packed = PackLayer(from, dir_ + "/empty.tar");
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  const WritableLayer to{LayerKind::kImage, dir_ + "/b/disk.img"};
  ASSERT_TRUE(UnpackLayer(dir_ + "/empty.tar", to).ok());
  struct stat st;
  EXPECT_NE(lstat(to.path.c_str(), &st), 0);
}

TEST_F(LayerMoveTest, ATarWithAnythingButTheLayerIsRefusedUnwritten) {
  // Made by hand, as a node that is not corral's (or a corrupted transfer) could send.
  ASSERT_TRUE(MakeDirs(dir_ + "/src/upper", 0755).ok());
  File(dir_ + "/src/upper/fine", "ok", 0, 0644);
  File(dir_ + "/src/elsewhere", "no", 0, 0644);
  ASSERT_TRUE(RunProgram({"/bin/tar", "--create", "--file=" + dir_ + "/bad.tar", "--directory=" + dir_ + "/src", "--",
                          "upper", "elsewhere"})
                  .ok());
  ASSERT_TRUE(RunProgram({"/bin/tar", "--create", "--file=" + dir_ + "/good.tar", "--directory=" + dir_ + "/src",
                          "--", "upper"})
                  .ok());
  const WritableLayer to{LayerKind::kQuotaDir, dir_ + "/dst/layer"};
  ASSERT_TRUE(MakeDirs(to.path, 0700).ok());
  Status refused = UnpackLayer(dir_ + "/bad.tar", to);
  EXPECT_EQ(refused.error_number(), EINVAL) << refused.ToString();
  struct stat st;
  EXPECT_NE(lstat((to.path + "/upper/fine").c_str(), &st), 0);
  EXPECT_NE(lstat((to.path + "/elsewhere").c_str(), &st), 0);
  // An image's tar is no directory's, and the other way round.
  EXPECT_EQ(UnpackLayer(dir_ + "/good.tar", WritableLayer{LayerKind::kImage, dir_ + "/dst/disk.img"}).error_number(),
            EINVAL);
  // Control: the same tar without the stray member unpacks.
  ASSERT_TRUE(UnpackLayer(dir_ + "/good.tar", to).ok());
  EXPECT_EQ(*ReadFileToString(to.path + "/upper/fine"), "ok");
}

}  // namespace
}  // namespace corral::supervisor
