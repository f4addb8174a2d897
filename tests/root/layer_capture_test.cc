// Capturing an overlayfs upper directory as an image layer, read back by UnpackLayer: files,
// hard links, symlinks, whiteouts and opaque directories come back as they were, owners moved
// from the sandbox's host range to the image's; an owner outside the range and a device node are
// refused, each beside the same tree without the fault. And COPY's tar: sources inside the
// context go in at dest with the step's owner; a source reached through a symlink out of the
// context is refused beside one through a symlink inside it.
#include "supervisor/images/layer_capture.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <string>

#include "common/file_util.h"
#include "rootfs/layer_unpack.h"
#include "supervisor/images/context_tar.h"
#include "supervisor/images/recipe.h"
#include "tests/testing/temp_dir.h"

namespace corral::supervisor {
namespace {

constexpr int64_t kBase = 0xC0000000 + 5 * 65536;  // a sandbox's range: root inside is kBase

struct stat Lstat(const std::string& path) {
  struct stat st = {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path << ": " << strerror(errno);
  return st;
}

class LayerCaptureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (chown to a sandbox's range, mknod, trusted.* xattrs)";
  }
  // An upper directory as a sandbox leaves it: a new file, a changed directory, a whiteout, an
  // opaque directory, a hard link and a symlink, owned by the sandbox's root and its uid 1000.
  void MakeUpper() {
    dir_.Put("upper/greeting", "hi\n");
    dir_.Put("upper/home/u/notes", "n");
    dir_.Put("upper/opaque/kept", "k");
    ASSERT_EQ(link(dir_.Join("upper/greeting").c_str(), dir_.Join("upper/home/u/link").c_str()), 0);
    ASSERT_EQ(symlink("/etc/os-release", dir_.Join("upper/home/u/sym").c_str()), 0);
    ASSERT_EQ(mknod(dir_.Join("upper/home/gone").c_str(), S_IFCHR | 0, makedev(0, 0)), 0);
    ASSERT_EQ(setxattr(dir_.Join("upper/opaque").c_str(), "trusted.overlay.opaque", "y", 1, 0), 0);
    // The whiteout stays host root's, as overlayfs makes it.
    for (const char* path : {"upper", "upper/greeting", "upper/home", "upper/opaque",
                             "upper/opaque/kept"}) {
      ASSERT_EQ(lchown(dir_.Join(path).c_str(), kBase, kBase), 0);
    }
    for (const char* path : {"upper/home/u", "upper/home/u/notes", "upper/home/u/sym"}) {
      ASSERT_EQ(lchown(dir_.Join(path).c_str(), kBase + 1000, kBase + 1000), 0);
    }
    ASSERT_EQ(chmod(dir_.Join("upper/greeting").c_str(), 04755), 0);
  }

  test::TempDir dir_{"layer-capture"};
};

TEST_F(LayerCaptureTest, AnUpperDirectoryComesBackAsTheSameLayerWithTheImagesIds) {
  MakeUpper();
  auto counts = WriteLayerTar(dir_.Join("upper"), dir_.Join("layer.tar"), kBase);
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  EXPECT_EQ(counts->whiteouts, 2u);  // .wh.gone and opaque/.wh..wh..opq
  auto unpacked = rootfs::UnpackLayer(dir_.Join("layer.tar"), dir_.Join("layer"), {}, {});
  ASSERT_TRUE(unpacked.ok()) << unpacked.status().ToString();

  const struct stat greeting = Lstat(dir_.Join("layer/greeting"));
  EXPECT_EQ(greeting.st_uid, 0u);
  EXPECT_EQ(greeting.st_mode & 07777, 04755u);
  EXPECT_EQ(*ReadFileToString(dir_.Join("layer/greeting")), "hi\n");
  const struct stat link = Lstat(dir_.Join("layer/home/u/link"));
  EXPECT_EQ(link.st_ino, greeting.st_ino);  // still one file
  EXPECT_EQ(Lstat(dir_.Join("layer/home/u")).st_uid, 1000u);
  EXPECT_EQ(Lstat(dir_.Join("layer/home/u/notes")).st_gid, 1000u);
  EXPECT_TRUE(S_ISLNK(Lstat(dir_.Join("layer/home/u/sym")).st_mode));
  const struct stat gone = Lstat(dir_.Join("layer/home/gone"));
  EXPECT_TRUE(S_ISCHR(gone.st_mode) && gone.st_rdev == makedev(0, 0)) << "the whiteout is a whiteout again";
  char value[4] = {};
  EXPECT_EQ(getxattr(dir_.Join("layer/opaque").c_str(), "trusted.overlay.opaque", value, sizeof(value)), 1);
  EXPECT_EQ(value[0], 'y');
  EXPECT_EQ(*ReadFileToString(dir_.Join("layer/opaque/kept")), "k");

  // The same tree captured twice is the same layer (one diff_id: the cache relies on it).
  ASSERT_TRUE(WriteLayerTar(dir_.Join("upper"), dir_.Join("again.tar"), kBase).ok());
  auto again = rootfs::UnpackLayer(dir_.Join("again.tar"), dir_.Join("again"), {}, {});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->diff_id, unpacked->diff_id);
}

TEST_F(LayerCaptureTest, SkippedTopLevelEntriesAreLeftOut) {
  MakeUpper();
  ASSERT_TRUE(WriteLayerTar(dir_.Join("upper"), dir_.Join("layer.tar"), kBase, {"home"}).ok());
  ASSERT_TRUE(rootfs::UnpackLayer(dir_.Join("layer.tar"), dir_.Join("layer"), {}, {}).ok());
  struct stat st;
  EXPECT_NE(lstat(dir_.Join("layer/home").c_str(), &st), 0);
  EXPECT_EQ(lstat(dir_.Join("layer/greeting").c_str(), &st), 0);
}

TEST_F(LayerCaptureTest, AnOwnerOutsideTheRangeIsRefusedBesideOneInside) {
  MakeUpper();
  ASSERT_TRUE(WriteLayerTar(dir_.Join("upper"), dir_.Join("ok.tar"), kBase).ok());
  ASSERT_EQ(lchown(dir_.Join("upper/home/u/notes").c_str(), 1000, 1000), 0);  // a host id
  auto refused = WriteLayerTar(dir_.Join("upper"), dir_.Join("bad.tar"), kBase);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("home/u/notes: owner 1000:1000 lies outside"), std::string::npos)
      << refused.status().ToString();
  struct stat st;
  EXPECT_NE(lstat(dir_.Join("bad.tar").c_str(), &st), 0) << "no half tar is left";
}

TEST_F(LayerCaptureTest, ADeviceNodeIsRefusedBesideAWhiteout) {
  MakeUpper();
  ASSERT_EQ(mknod(dir_.Join("upper/null").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  ASSERT_EQ(lchown(dir_.Join("upper/null").c_str(), kBase, kBase), 0);
  auto refused = WriteLayerTar(dir_.Join("upper"), dir_.Join("bad.tar"), kBase);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("null: a device node"), std::string::npos);
  ASSERT_EQ(unlink(dir_.Join("upper/null").c_str()), 0);
  EXPECT_TRUE(WriteLayerTar(dir_.Join("upper"), dir_.Join("ok.tar"), kBase).ok());
}

TEST_F(LayerCaptureTest, CopyTarPutsSourcesAtDestAndStaysInTheContext) {
  dir_.Put("ctx/file.txt", "one\n");
  dir_.Put("ctx/tree/a", "a");
  dir_.Put("outside/secret", "s");
  ASSERT_EQ(symlink("tree", dir_.Join("ctx/inside").c_str()), 0);
  ASSERT_EQ(symlink(dir_.Join("outside").c_str(), dir_.Join("ctx/out").c_str()), 0);
  auto recipe = ParseRecipe("FROM x\nCOPY --chown=7:8 file.txt tree /app/\nCOPY inside/a /b\nCOPY out/secret /c\n", {});
  ASSERT_TRUE(recipe.ok()) << recipe.status().ToString();

  auto tar = WriteCopyTar(dir_.Join("ctx"), recipe->steps[0], dir_.Join("copy.tar"));
  ASSERT_TRUE(tar.ok()) << tar.status().ToString();
  ASSERT_TRUE(rootfs::UnpackLayer(dir_.Join("copy.tar"), dir_.Join("copy"), {}, {}).ok());
  EXPECT_EQ(*ReadFileToString(dir_.Join("copy/app/file.txt")), "one\n");
  EXPECT_EQ(*ReadFileToString(dir_.Join("copy/app/a")), "a");  // a directory's content
  EXPECT_EQ(Lstat(dir_.Join("copy/app/file.txt")).st_uid, 7u);
  EXPECT_EQ(Lstat(dir_.Join("copy/app/a")).st_gid, 8u);

  // The content hash ignores times: touching a file keeps it, changing it does not.
  ASSERT_EQ(utimes(dir_.Join("ctx/file.txt").c_str(), nullptr), 0);
  auto touched = WriteCopyTar(dir_.Join("ctx"), recipe->steps[0], dir_.Join("touched.tar"));
  ASSERT_TRUE(touched.ok());
  EXPECT_EQ(touched->content_hash, tar->content_hash);
  dir_.Put("ctx/file.txt", "two\n");
  auto changed = WriteCopyTar(dir_.Join("ctx"), recipe->steps[0], dir_.Join("changed.tar"));
  ASSERT_TRUE(changed.ok());
  EXPECT_NE(changed->content_hash, tar->content_hash);

  EXPECT_TRUE(WriteCopyTar(dir_.Join("ctx"), recipe->steps[1], dir_.Join("inside.tar")).ok());
  auto out = WriteCopyTar(dir_.Join("ctx"), recipe->steps[2], dir_.Join("out.tar"));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().error_number(), EINVAL);
  EXPECT_NE(out.status().message().find("leads out of the build context"), std::string::npos);
  struct stat st;
  EXPECT_NE(lstat(dir_.Join("out.tar").c_str(), &st), 0);
}

}  // namespace
}  // namespace corral::supervisor
