// Unpacking image layers on the real file system as root: what a good layer becomes (types,
// owners, modes, times, links), the three compressions giving one diff_id, OCI whiteouts turned
// into overlayfs ones and stacked by a real overlay mount, and every bad layer refused with its
// cause and nothing left behind, each beside a control that passes.
#include "rootfs/layer_unpack.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "layer_tar_util.h"
#include "tests/testing/temp_dir.h"

namespace corral::rootfs {
namespace {

using test::Compression;
using test::Device;
using test::Dir;
using test::Fifo;
using test::File;
using test::Hardlink;
using test::Symlink;
using test::TarEntry;

struct stat Lstat(const std::string& path) {
  struct stat st = {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path << ": " << strerror(errno);
  return st;
}

std::string Readlink(const std::string& path) {
  char buf[4096];
  ssize_t n = readlink(path.c_str(), buf, sizeof(buf));
  return n < 0 ? "" : std::string(buf, static_cast<size_t>(n));
}

class LayerUnpackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (chown to other ids, mknod, trusted.* xattrs)";
    ASSERT_EQ(mkdir(layers_.c_str(), 0700), 0);
    ASSERT_EQ(mkdir(blobs_.c_str(), 0700), 0);
  }

  // Writes `entries` as a blob and unpacks it into layers/<name>.
  StatusOr<UnpackedLayer> Unpack(const std::vector<TarEntry>& entries, const std::string& name = "l",
                                 Compression compression = Compression::kNone, LayerCheck check = {},
                                 UnpackLimits limits = {}) {
    const std::string blob = Blob(name, entries, compression);
    return UnpackLayer(blob, Dest(name), check, limits);
  }
  std::string Blob(const std::string& name, const std::vector<TarEntry>& entries, Compression c) {
    const std::string blob = blobs_ + "/" + name;
    EXPECT_TRUE(test::WriteTar(blob, entries, c));
    return blob;
  }
  std::string Dest(const std::string& name) const { return layers_ + "/" + name; }

  // A refusal: the error holds `cause`, and the layers directory is empty.
  void ExpectRefused(const std::vector<TarEntry>& entries, const std::string& cause, UnpackLimits limits = {}) {
    StatusOr<UnpackedLayer> r = Unpack(entries, "bad", Compression::kNone, {}, limits);
    ASSERT_FALSE(r.ok()) << "accepted a layer that should fail with: " << cause;
    EXPECT_NE(r.status().message().find(cause), std::string::npos) << r.status().message() << " (wanted: " << cause << ")";
    EXPECT_EQ(test::ListDir(layers_), std::vector<std::string>{}) << "left behind after: " << r.status().message();
  }
  void ExpectAccepted(const std::vector<TarEntry>& entries, UnpackLimits limits = {}) {
    StatusOr<UnpackedLayer> r = Unpack(entries, "good", Compression::kNone, {}, limits);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(RemoveTree(Dest("good")).ToString(), "OK");
  }

  test::TempDir tmp_{"layer-unpack"};
  const std::string layers_ = tmp_.Join("layers");
  const std::string blobs_ = tmp_.Join("blobs");
};

std::vector<TarEntry> GoodLayer() {
  TarEntry root = Dir("./", 0700, 1000, 1000);  // not applied: the top level stays 0755 root
  return {root,
          Dir("etc", 0755),
          File("etc/passwd", "root:x:0:0::/root:/bin/sh\n"),
          Dir("home/agent", 0750, 1000, 1000),  // "home" made as a parent
          File("home/agent/.profile", "PS1=$\n", 0600, 1000, 1000),
          File("usr/bin/su", "\x7f" "ELF", 04755),
          File("usr/bin/wall", "\x7f" "ELF", 02755, 0, 5),
          Hardlink("usr/bin/su2", "usr/bin/su"),
          Symlink("bin", "usr/bin"),
          Symlink("etc/mtab", "/proc/self/mounts"),
          Symlink("usr/lib/up", "../../etc"),
          Fifo("run/initctl"),
          File("./opt/./x//y", "y")};
}

TEST_F(LayerUnpackTest, GoodLayerKeepsTypesOwnersModesAndLinks) {
  StatusOr<UnpackedLayer> r = Unpack(GoodLayer());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::string d = Dest("l");
  EXPECT_EQ(r->entries, 13u);
  EXPECT_EQ(r->unpacked_bytes, 26u + 6 + 4 + 4 + 1);
  EXPECT_EQ(r->blob_digest, test::FileDigest(blobs_ + "/l"));
  EXPECT_EQ(r->diff_id, r->blob_digest);  // plain tar: the blob is the stream
  EXPECT_EQ(test::ReadAll(d + "/etc/passwd"), "root:x:0:0::/root:/bin/sh\n");

  struct stat top = Lstat(d);
  EXPECT_EQ(top.st_mode & 07777, 0755u);
  EXPECT_EQ(top.st_uid, 0u);
  struct stat home = Lstat(d + "/home");
  EXPECT_TRUE(S_ISDIR(home.st_mode));
  EXPECT_EQ(home.st_mode & 07777, 0755u);
  struct stat agent = Lstat(d + "/home/agent");
  EXPECT_EQ(agent.st_mode & 07777, 0750u);
  EXPECT_EQ(agent.st_uid, 1000u);
  EXPECT_EQ(agent.st_gid, 1000u);
  EXPECT_EQ(agent.st_mtime, 1'700'000'000);  // set after its content was written
  struct stat profile = Lstat(d + "/home/agent/.profile");
  EXPECT_EQ(profile.st_uid, 1000u);
  EXPECT_EQ(profile.st_mode & 07777, 0600u);
  EXPECT_EQ(profile.st_mtime, 1'700'000'000);
  struct stat su = Lstat(d + "/usr/bin/su");
  EXPECT_EQ(su.st_mode & 07777, 04755u);  // setuid kept (chmod after chown)
  EXPECT_EQ(su.st_uid, 0u);
  EXPECT_EQ(su.st_nlink, 2u);
  EXPECT_EQ(Lstat(d + "/usr/bin/su2").st_ino, su.st_ino);
  struct stat wall = Lstat(d + "/usr/bin/wall");
  EXPECT_EQ(wall.st_mode & 07777, 02755u);
  EXPECT_EQ(wall.st_gid, 5u);
  EXPECT_EQ(Readlink(d + "/bin"), "usr/bin");
  EXPECT_EQ(Readlink(d + "/etc/mtab"), "/proc/self/mounts");
  EXPECT_EQ(Readlink(d + "/usr/lib/up"), "../../etc");
  EXPECT_TRUE(S_ISFIFO(Lstat(d + "/run/initctl").st_mode));
  EXPECT_EQ(test::ReadAll(d + "/opt/x/y"), "y");
  // The partial directory was renamed, not left beside.
  EXPECT_EQ(test::ListDir(layers_), std::vector<std::string>{"l"});
}

TEST_F(LayerUnpackTest, PlainGzipAndZstdGiveTheSameDiffId) {
  StatusOr<UnpackedLayer> plain = Unpack(GoodLayer(), "plain", Compression::kNone);
  StatusOr<UnpackedLayer> gz = Unpack(GoodLayer(), "gz", Compression::kGzip);
  StatusOr<UnpackedLayer> zst = Unpack(GoodLayer(), "zst", Compression::kZstd);
  ASSERT_TRUE(plain.ok() && gz.ok() && zst.ok()) << plain.status().ToString() << gz.status().ToString()
                                                 << zst.status().ToString();
  EXPECT_EQ(gz->diff_id, plain->diff_id);
  EXPECT_EQ(zst->diff_id, plain->diff_id);
  EXPECT_EQ(plain->diff_id, test::FileDigest(blobs_ + "/plain"));
  EXPECT_NE(gz->blob_digest, plain->blob_digest);
  EXPECT_NE(zst->blob_digest, gz->blob_digest);
  EXPECT_EQ(gz->blob_digest, test::FileDigest(blobs_ + "/gz"));
  EXPECT_EQ(test::ReadAll(Dest("zst") + "/etc/passwd"), test::ReadAll(Dest("plain") + "/etc/passwd"));
  // The digests given as checks pass.
  LayerCheck check{gz->blob_digest, gz->diff_id};
  EXPECT_TRUE(UnpackLayer(blobs_ + "/gz", Dest("gz2"), check, {}).ok());
}

TEST_F(LayerUnpackTest, NonAsciiNamesKeepTheirBytes) {
  const std::string name = "caf\xc3\xa9-\xe6\x97\xa5\xe6\x9c\xac";  // UTF-8, as image builders write it
  StatusOr<UnpackedLayer> r = Unpack({File(name, "x"), Symlink("l", name)});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(test::ListDir(Dest("l")), (std::vector<std::string>{name, "l"}));
  EXPECT_EQ(Readlink(Dest("l") + "/l"), name);
}

TEST_F(LayerUnpackTest, LaterEntriesReplaceEarlierOnes) {
  StatusOr<UnpackedLayer> r = Unpack({File("a", "1"), File("a", "2"), Dir("d"), File("d/x", "x"), File("d", "file"),
                                      File("e", "x"), Dir("e", 0711), File("e/y", "y"), Dir("e", 0750, 7, 7)});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(test::ReadAll(Dest("l") + "/a"), "2");
  EXPECT_EQ(test::ReadAll(Dest("l") + "/d"), "file");
  struct stat e = Lstat(Dest("l") + "/e");
  EXPECT_TRUE(S_ISDIR(e.st_mode));
  EXPECT_EQ(e.st_mode & 07777, 0750u);
  EXPECT_EQ(e.st_uid, 7u);
  EXPECT_EQ(test::ReadAll(Dest("l") + "/e/y"), "y");  // a directory over a directory keeps its content
}

TEST_F(LayerUnpackTest, WhiteoutsBecomeOverlayWhiteouts) {
  StatusOr<UnpackedLayer> r = Unpack({Dir("a"), File("a/.wh.gone", ""), File("a/.wh..wh..opq", ""),
                                      File("b/keep", "k"), File("b/.wh.keep", ""), File(".wh.top", ""),
                                      File("c/.wh..wh.plnk", "")});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::string d = Dest("l");
  struct stat gone = Lstat(d + "/a/gone");
  EXPECT_TRUE(S_ISCHR(gone.st_mode));
  EXPECT_EQ(gone.st_rdev, makedev(0, 0));
  EXPECT_TRUE(S_ISCHR(Lstat(d + "/top").st_mode));
  char value[8] = {};
  EXPECT_EQ(getxattr((d + "/a").c_str(), "trusted.overlay.opaque", value, sizeof(value)), 1);
  EXPECT_EQ(std::string(value), "y");
  EXPECT_LT(getxattr((d + "/b").c_str(), "trusted.overlay.opaque", value, sizeof(value)), 0);  // control
  EXPECT_EQ(test::ReadAll(d + "/b/keep"), "k");  // this layer's own file is not whited out
  EXPECT_EQ(test::ListDir(d + "/a"), std::vector<std::string>{"gone"});
  EXPECT_EQ(test::ListDir(d + "/c"), std::vector<std::string>{});  // aufs bookkeeping skipped
}

TEST_F(LayerUnpackTest, AWhiteoutGivesWayToAPathThroughIt) {
  StatusOr<UnpackedLayer> r = Unpack({File(".wh.d", ""), File("d/x", "x"), File("a/.wh.e", ""), Dir("a/e")});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(test::ReadAll(Dest("l") + "/d/x"), "x");
  EXPECT_TRUE(S_ISDIR(Lstat(Dest("l") + "/a/e").st_mode));
  ASSERT_TRUE(RemoveTree(Dest("l")).ok());
  // Control: a regular file does not give way.
  ExpectRefused({File("f", "f"), File("f/x", "x")}, "entry f/x: f is not a directory");
}

// Mounts overlay(upper over lower) in a child's own mount namespace and lists `dirs` there.
std::string ListMerged(const std::string& tmp, const std::string& upper, const std::string& lower) {
  const std::string merged = tmp + "/merged";
  mkdir(merged.c_str(), 0700);
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(2);
    const std::string opts = "lowerdir=" + upper + ":" + lower;
    if (mount("overlay", merged.c_str(), "overlay", MS_RDONLY, opts.c_str()) != 0) {
      std::string err = std::string("mount: ") + strerror(errno);
      (void)!write(fds[1], err.data(), err.size());
      _exit(3);
    }
    std::string out;
    for (const char* sub : {"", "/a", "/b"}) {
      out += std::string(*sub == 0 ? "/" : sub) + ":";
      for (const std::string& n : test::ListDir(merged + sub)) out += " " + n;
      out += "\n";
    }
    (void)!write(fds[1], out.data(), out.size());
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return out;
}

TEST_F(LayerUnpackTest, UnpackedLayersStackAsOverlayLowers) {
  ASSERT_TRUE(Unpack({File("a/x", "x"), File("a/y", "y"), File("b/p", "p"), File("b/q", "q"), File("c", "c")}, "lower").ok());
  StatusOr<UnpackedLayer> upper =
      Unpack({File(".wh.c", ""), File("a/.wh..wh..opq", ""), File("a/z", "z"), File("b/.wh.p", "")}, "upper");
  ASSERT_TRUE(upper.ok()) << upper.status().ToString();
  const std::string listing = ListMerged(tmp_.path(), Dest("upper"), Dest("lower"));
  // c whited out; a opaque (only the upper's z); b keeps q, loses p.
  EXPECT_EQ(listing, "/: a b\n/a: z\n/b: q\n");
}

TEST_F(LayerUnpackTest, PathsThatLeaveTheLayerAreRefused) {
  ExpectRefused({File("../x", "x")}, "entry ../x: path leaves the layer");
  ExpectRefused({File("a/../../x", "x")}, "path leaves the layer");
  ExpectRefused({File("a/..", "x")}, "path leaves the layer");
  ExpectRefused({File("/etc/x", "x")}, "entry /etc/x: absolute path");
  std::string long_path;
  for (int i = 0; i < 2050; ++i) long_path += "a/";
  ExpectRefused({File(long_path + "x", "x")}, "path longer than 4096 bytes");
  ExpectRefused({File(std::string(256, 'n'), "x")}, "path component longer than 255 bytes");
  const std::string deep = std::string(50, 'p') + "/" + std::string(50, 'q') + "/" + std::string(50, 'r') + "/" +
                           std::string(255, 's');  // long, but within both limits (pax headers)
  ExpectAccepted({File("x", "x"), File("a/..x", "x"), File("etc/x", "x"), File(deep, "d")});
}

TEST_F(LayerUnpackTest, WritingThroughASymlinkIsRefused) {
  const std::string canary = tmp_.Join("canary");
  ASSERT_EQ(mkdir(canary.c_str(), 0700), 0);
  ExpectRefused({Symlink("a", canary), File("a/passwd", "owned")}, "entry a/passwd: a is a symlink");
  ExpectRefused({Symlink("a", "/etc"), Dir("a/sub")}, "a is a symlink");
  ExpectRefused({Dir("d"), Symlink("d/a", ".."), File("d/a/x", "x")}, "d/a is a symlink");
  ExpectRefused({Symlink("a", ".."), File("a/x", "x")}, "symlink target .. leaves the layer");
  EXPECT_EQ(test::ListDir(canary), std::vector<std::string>{});
  ExpectAccepted({Dir("a"), File("a/passwd", "x"), Symlink("b", canary)});
}

TEST_F(LayerUnpackTest, RelativeSymlinksClimbingOutAreRefused) {
  ExpectRefused({Symlink("a/b", "../../etc")}, "entry a/b: symlink target ../../etc leaves the layer");
  ExpectRefused({Symlink("l", "x/../../y")}, "leaves the layer");
  ExpectRefused({Symlink("l", "")}, "empty symlink target");
  ExpectAccepted({Symlink("a/b", "../etc"), Symlink("a/c", "/../../etc"), Symlink("l", "x/../y")});
}

TEST_F(LayerUnpackTest, HardLinksOutsideOrToNothingAreRefused) {
  ExpectRefused({File("x", "x"), Hardlink("l", "../x")}, "entry l: hard link target ../x: path leaves the layer");
  ExpectRefused({Hardlink("l", "/etc/passwd")}, "absolute path");
  ExpectRefused({Hardlink("l", "missing")}, "hard link to missing, which is not a regular file of this layer");
  ExpectRefused({Dir("d"), Hardlink("l", "d")}, "not a regular file of this layer");
  ExpectRefused({Symlink("s", "/etc/passwd"), Hardlink("l", "s")}, "not a regular file of this layer");
  ExpectRefused({File("x", "x"), Dir("x"), Hardlink("l", "x")},
                "not a regular file of this layer");  // x replaced by a directory
  ExpectAccepted({File("x", "x"), Hardlink("d/l", "x")});
}

TEST_F(LayerUnpackTest, DeviceNodesAreRefused) {
  ExpectRefused({Device("dev/null", false, 1, 3)}, "entry dev/null: device node");
  ExpectRefused({Device("dev/sda", true, 8, 0)}, "entry dev/sda: device node");
  ExpectRefused({Device("dev/wh", false, 0, 0)}, "device node");  // a whiteout only from .wh.
  ExpectAccepted({Fifo("dev/fifo"), File("dev/.wh.null", "")});
}

TEST_F(LayerUnpackTest, BadWhiteoutsAreRefused) {
  ExpectRefused({File("../.wh.x", "")}, "path leaves the layer");
  ExpectRefused({File("a/.wh.", "")}, "whiteout of an empty or dot name");
  ExpectRefused({File("a/.wh...", "")}, "whiteout of an empty or dot name");
  ExpectRefused({Symlink("a", "/etc"), File("a/.wh.passwd", "")}, "a is a symlink");
  ExpectRefused({Symlink("a", "/etc"), File("a/.wh..wh..opq", "")}, "a is a symlink");
  ExpectAccepted({File("a/.wh.x", ""), File("a/.wh..wh..opq", "")});
}

TEST_F(LayerUnpackTest, IdsAbove65535AreRefused) {
  ExpectRefused({File("x", "x", 0644, 65536, 0)}, "entry x: owner 65536:0 is outside 0-65535");
  ExpectRefused({Dir("d", 0755, 0, 100000)}, "owner 0:100000 is outside 0-65535");
  ExpectAccepted({File("x", "x", 0644, 65535, 65535)});
}

TEST_F(LayerUnpackTest, TooManyEntriesAreRefused) {
  UnpackLimits limits;
  limits.max_entries = 3;
  ExpectRefused({File("a", ""), File("b", ""), File("c", ""), File("d", "")}, "more than 3 entries", limits);
  ExpectAccepted({File("a", ""), File("b", ""), File("c", "")}, limits);
}

TEST_F(LayerUnpackTest, DigestMismatchesAreRefusedNamingBoth) {
  const std::string blob = Blob("gz", GoodLayer(), Compression::kGzip);
  const std::string wrong = test::BytesDigest("not this");
  StatusOr<UnpackedLayer> good = UnpackLayer(blob, Dest("first"), {}, {});
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  StatusOr<UnpackedLayer> bad_blob = UnpackLayer(blob, Dest("x"), {wrong, ""}, {});
  ASSERT_FALSE(bad_blob.ok());
  EXPECT_NE(bad_blob.status().message().find("blob digest mismatch: expected " + wrong + ", got " + good->blob_digest),
            std::string::npos) << bad_blob.status().message();
  StatusOr<UnpackedLayer> bad_diff = UnpackLayer(blob, Dest("x"), {good->blob_digest, wrong}, {});
  ASSERT_FALSE(bad_diff.ok());
  EXPECT_NE(bad_diff.status().message().find("diff_id mismatch: expected " + wrong + ", got " + good->diff_id),
            std::string::npos) << bad_diff.status().message();
  EXPECT_EQ(test::ListDir(layers_), std::vector<std::string>{"first"});
  EXPECT_TRUE(UnpackLayer(blob, Dest("x"), {good->blob_digest, good->diff_id}, {}).ok());  // control
}

TEST_F(LayerUnpackTest, TruncatedAndCorruptBlobsAreRefused) {
  const std::string bytes = test::ReadAll(Blob("gz", GoodLayer(), Compression::kGzip));
  for (size_t keep : {bytes.size() / 2, bytes.size() - 4, size_t{10}, size_t{0}}) {
    test::WriteBytes(blobs_ + "/cut", bytes.substr(0, keep));
    StatusOr<UnpackedLayer> r = UnpackLayer(blobs_ + "/cut", Dest("cut"), {}, {});
    EXPECT_FALSE(r.ok()) << "accepted a gzip cut to " << keep << " of " << bytes.size() << " bytes";
    EXPECT_EQ(test::ListDir(layers_), std::vector<std::string>{}) << r.status().ToString();
  }
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x55;
  test::WriteBytes(blobs_ + "/flipped", flipped);
  EXPECT_FALSE(UnpackLayer(blobs_ + "/flipped", Dest("f"), {}, {}).ok());
  test::WriteBytes(blobs_ + "/text", "this is not a tar archive, nor compressed\n");
  EXPECT_FALSE(UnpackLayer(blobs_ + "/text", Dest("t"), {}, {}).ok());
  EXPECT_EQ(test::ListDir(layers_), std::vector<std::string>{});
  test::WriteBytes(blobs_ + "/whole", bytes);
  EXPECT_TRUE(UnpackLayer(blobs_ + "/whole", Dest("whole"), {}, {}).ok());  // control
}

TEST_F(LayerUnpackTest, GzipBombIsRefusedWithoutWritingItAll) {
  TarEntry zeros = File("zeros", "");
  // 256 MiB of zeros, about 1.2 MB of gzip, against a cap of 16 MiB: a bomb 16 times its cap and
  // 200 times its own size. (Sizes kept small: the cgroup v2 suite runs this in an emulated
  // guest, where compressing 1 GiB took three minutes.)
  zeros.zeros = uint64_t{256} << 20;
  const std::string blob = Blob("bomb", {zeros}, Compression::kGzip);
  struct stat st = Lstat(blob);
  EXPECT_LT(st.st_size, 2 << 20);
  UnpackLimits limits;
  limits.max_bytes = 16 << 20;
  auto start = std::chrono::steady_clock::now();
  StatusOr<UnpackedLayer> r = UnpackLayer(blob, Dest("bomb"), {}, limits);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("size exceeds 16777216 bytes"), std::string::npos) << r.status().message();
  EXPECT_EQ(test::ListDir(layers_), std::vector<std::string>{});
  RecordProperty("refused_after_seconds", std::to_string(seconds));
  // A stream that passes the cap after the end of the archive (zeros appended, then gzip) is
  // refused by the stream's own count, not the files' sizes.
  const std::string tar = blobs_ + "/small.tar";
  ASSERT_TRUE(test::WriteTar(tar, {File("a", "a")}));
  ASSERT_EQ(std::system(("head -c 24M /dev/zero >> " + tar + " && gzip -1 -n " + tar).c_str()), 0);
  StatusOr<UnpackedLayer> trailing = UnpackLayer(tar + ".gz", Dest("trailing"), {}, limits);
  ASSERT_FALSE(trailing.ok());
  EXPECT_NE(trailing.status().message().find("uncompressed size exceeds 16777216 bytes"), std::string::npos)
      << trailing.status().message();
  EXPECT_EQ(test::ListDir(layers_), std::vector<std::string>{});
  limits.max_bytes = 32 << 20;  // control: under the cap, the same blob passes
  EXPECT_TRUE(UnpackLayer(tar + ".gz", Dest("trailing"), {}, limits).ok());
}

TEST_F(LayerUnpackTest, AnExistingDestIsRefusedAndKept) {
  ASSERT_TRUE(Unpack({File("a", "first")}, "l").ok());
  const std::string blob = Blob("other", {File("a", "second")}, Compression::kNone);
  StatusOr<UnpackedLayer> again = UnpackLayer(blob, Dest("l"), {}, {});
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("exists"), std::string::npos) << again.status().message();
  EXPECT_EQ(test::ReadAll(Dest("l") + "/a"), "first");
  EXPECT_EQ(test::ListDir(layers_), std::vector<std::string>{"l"});
}

}  // namespace
}  // namespace corral::rootfs
