// Re-owning a writable layer for a fork: a real directory tree on the host's file system, then a
// real ext4 image mounted in a private mount namespace. Checked from outside with lstat,
// getxattr, debugfs and /proc/self/mountinfo.
#include "supervisor/sandboxes/layer_owners.h"

#include <endian.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "common/file_util.h"
#include "rootfs/disk_image.h"
#include "root_test_util.h"
#include "tests/testing/temp_dir.h"

namespace corral::supervisor {
namespace {

constexpr int64_t kFrom = 0xC0000000 + 5 * 65536;
constexpr int64_t kTo = 0xC0000000 + 9 * 65536;
constexpr int64_t kRange = 65536;

class LayerOwnersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (chown to other uids, mounts)";
  }

  std::string Make(const std::string& rel, uid_t uid, gid_t gid, mode_t mode = 0644) {
    const std::string path = dir_ + "/tree/" + rel;
    EXPECT_TRUE(WriteNewFile(path, "x", mode).ok()) << path;
    EXPECT_EQ(lchown(path.c_str(), uid, gid), 0) << path;
    EXPECT_EQ(chmod(path.c_str(), mode), 0) << path;
    return path;
  }

  test::TempDir tmp_{"layer"};
  const std::string dir_ = tmp_.path();
};

struct stat Lstat(const std::string& path) {
  struct stat st = {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path << ": " << strerror(errno);
  return st;
}

std::string CapV3(uint32_t rootid) {
  std::string value(24, '\0');
  uint32_t words[6] = {htole32(0x03000000), htole32(1u << 10), 0, 0, 0, htole32(rootid)};  // cap_net_bind_service
  memcpy(value.data(), words, sizeof(words));
  return value;
}

std::string AclWithUser(uint32_t uid) {
  // user::rw-, user:UID:r--, group::r--, mask::r--, other::---
  struct Entry {
    uint16_t tag, perm;
    uint32_t id;
  };
  const Entry entries[] = {{0x01, 6, 0xFFFFFFFF}, {0x02, 4, uid}, {0x04, 4, 0xFFFFFFFF}, {0x10, 4, 0xFFFFFFFF},
                           {0x20, 0, 0xFFFFFFFF}};
  std::string value(4, '\0');
  uint32_t version = htole32(2);
  memcpy(value.data(), &version, 4);
  for (const Entry& e : entries) {
    char raw[8];
    uint16_t tag = htole16(e.tag), perm = htole16(e.perm);
    uint32_t id = htole32(e.id);
    memcpy(raw, &tag, 2);
    memcpy(raw + 2, &perm, 2);
    memcpy(raw + 4, &id, 4);
    value.append(raw, 8);
  }
  return value;
}

std::string Xattr(const std::string& path, const char* name) {
  char buf[256];
  ssize_t n = lgetxattr(path.c_str(), name, buf, sizeof(buf));
  if (n < 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

uint32_t Le32At(const std::string& value, size_t at) {
  uint32_t v = 0;
  memcpy(&v, value.data() + at, 4);
  return le32toh(v);
}

TEST_F(LayerOwnersTest, ShiftsOwnersInTheRangeAndLeavesOthersAlone) {
  ASSERT_TRUE(MakeDirs(dir_ + "/tree/sub/deeper", 0755).ok());
  ASSERT_EQ(chown((dir_ + "/tree").c_str(), kFrom, kFrom), 0);
  ASSERT_EQ(chown((dir_ + "/tree/sub").c_str(), kFrom + 1000, kFrom + 1000), 0);
  ASSERT_EQ(chown((dir_ + "/tree/sub/deeper").c_str(), kFrom + 1000, kFrom + 1000), 0);
  const std::string agent = Make("sub/deeper/agent.txt", kFrom + 1000, kFrom + 1000);
  const std::string mixed = Make("mixed", kFrom + 1000, 4242);
  const std::string outside = Make("outside", 4242, 4243);  // not in the range: stays
  const std::string top = Make("last-of-range", kFrom + kRange - 1, kFrom);
  const std::string beyond = Make("first-past-range", kFrom + kRange, kFrom + kRange);
  // A symlink in the range whose target is outside the tree: the link moves, the target not.
  const std::string target = dir_ + "/target";
  ASSERT_TRUE(WriteNewFile(target, "t", 0644).ok());
  ASSERT_EQ(chown(target.c_str(), kFrom, kFrom), 0);
  const std::string link = dir_ + "/tree/link";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  ASSERT_EQ(lchown(link.c_str(), kFrom + 1000, kFrom + 1000), 0);

  auto counts = ShiftTreeOwners(dir_ + "/tree", kFrom, kTo, kRange);
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  EXPECT_EQ(counts->inodes, 9u);  // tree, sub, deeper, agent.txt, mixed, outside, last, first-past, link
  EXPECT_EQ(counts->shifted, 7u);  // all but outside and first-past-range

  EXPECT_EQ(Lstat(dir_ + "/tree").st_uid, kTo);
  EXPECT_EQ(Lstat(dir_ + "/tree/sub").st_gid, kTo + 1000);
  EXPECT_EQ(Lstat(agent).st_uid, kTo + 1000);
  EXPECT_EQ(Lstat(agent).st_gid, kTo + 1000);
  EXPECT_EQ(Lstat(mixed).st_uid, kTo + 1000);
  EXPECT_EQ(Lstat(mixed).st_gid, 4242u);
  EXPECT_EQ(Lstat(top).st_uid, kTo + kRange - 1);
  EXPECT_EQ(Lstat(link).st_uid, kTo + 1000);
  // Controls: what lies outside the range, or outside the tree, is untouched.
  EXPECT_EQ(Lstat(outside).st_uid, 4242u);
  EXPECT_EQ(Lstat(outside).st_gid, 4243u);
  EXPECT_EQ(Lstat(beyond).st_uid, kFrom + kRange);
  EXPECT_EQ(Lstat(target).st_uid, kFrom);
}

TEST_F(LayerOwnersTest, KeepsSetuidBitsCapabilitiesAndAcls) {
  ASSERT_TRUE(MakeDirs(dir_ + "/tree", 0755).ok());
  const std::string setuid = Make("setuid", kFrom, kFrom, 04755);
  const std::string setgid = Make("setgid", kFrom + 1000, kFrom + 1000, 02755);
  const std::string capped = Make("capped", kFrom, kFrom, 0755);
  ASSERT_EQ(lsetxattr(capped.c_str(), "security.capability", CapV3(kFrom).data(), 24, 0), 0) << strerror(errno);
  const std::string acl = Make("acl", kFrom, kFrom, 0640);
  const std::string acl_value = AclWithUser(kFrom + 1000);
  ASSERT_EQ(lsetxattr(acl.c_str(), "system.posix_acl_access", acl_value.data(), acl_value.size(), 0), 0)
      << strerror(errno);
  // The positive control that chown alone loses them (so the test sees what it guards).
  const std::string plain = dir_ + "/plain";
  ASSERT_TRUE(WriteNewFile(plain, "x", 04755).ok());
  ASSERT_EQ(chmod(plain.c_str(), 04755), 0);
  ASSERT_EQ(lsetxattr(plain.c_str(), "security.capability", CapV3(0).data(), 24, 0), 0) << strerror(errno);
  ASSERT_EQ(chown(plain.c_str(), 1, 1), 0);
  EXPECT_EQ(Lstat(plain).st_mode & 07777, 0755u);
  EXPECT_EQ(Xattr(plain, "security.capability"), "");

  auto counts = ShiftTreeOwners(dir_ + "/tree", kFrom, kTo, kRange);
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();

  EXPECT_EQ(Lstat(setuid).st_mode & 07777, 04755u);
  EXPECT_EQ(Lstat(setuid).st_uid, kTo);
  EXPECT_EQ(Lstat(setgid).st_mode & 07777, 02755u);
  const std::string cap = Xattr(capped, "security.capability");
  ASSERT_EQ(cap.size(), 24u);
  EXPECT_EQ(Le32At(cap, 0) & 0xFF000000, 0x03000000u);
  EXPECT_EQ(Le32At(cap, 4), 1u << 10);
  EXPECT_EQ(Le32At(cap, 20), kTo);
  const std::string shifted_acl = Xattr(acl, "system.posix_acl_access");
  ASSERT_EQ(shifted_acl.size(), acl_value.size());
  EXPECT_EQ(Le32At(shifted_acl, 4 + 8 + 4), kTo + 1000);  // the named user entry
}

TEST_F(LayerOwnersTest, WalksTreesDeeperThanPathMax) {
  // 300 levels of 20-character names: about 6,300 bytes of path, past PATH_MAX.
  std::string path = dir_ + "/tree";
  ASSERT_EQ(mkdir(path.c_str(), 0755), 0);
  ASSERT_EQ(chown(path.c_str(), kFrom, kFrom), 0);
  ASSERT_EQ(chdir(path.c_str()), 0);
  for (int i = 0; i < 300; ++i) {
    ASSERT_EQ(mkdir("dddddddddddddddddddd", 0755), 0);
    ASSERT_EQ(chown("dddddddddddddddddddd", kFrom + 1, kFrom + 1), 0);
    ASSERT_EQ(chdir("dddddddddddddddddddd"), 0);
  }
  ASSERT_TRUE(WriteNewFile("bottom", "x", 0644).ok());
  ASSERT_EQ(chown("bottom", kFrom + 2, kFrom + 2), 0);
  ASSERT_EQ(chdir("/"), 0);

  auto counts = ShiftTreeOwners(dir_ + "/tree", kFrom, kTo, kRange);
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  EXPECT_EQ(counts->inodes, 302u);
  EXPECT_EQ(counts->shifted, 302u);
  // The bottom file, reached again relative to the deepest directory.
  ASSERT_EQ(chdir(path.c_str()), 0);
  for (int i = 0; i < 300; ++i) ASSERT_EQ(chdir("dddddddddddddddddddd"), 0);
  struct stat st;
  ASSERT_EQ(lstat("bottom", &st), 0);
  EXPECT_EQ(st.st_uid, kTo + 2);
  ASSERT_EQ(chdir("/"), 0);
}

std::string Debugfs(const std::string& image, const std::string& request) {
  const std::string command = "/sbin/debugfs -R '" + request + "' " + image + " 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  pclose(pipe);
  return out;
}

// debugfs prints uids as signed 32-bit numbers.
std::string DebugfsUser(int64_t uid) { return "User: " + std::to_string(static_cast<int32_t>(uid)) + " "; }

bool MountedAt(const std::string& dir) {
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::string line;
  while (std::getline(mountinfo, line)) {
    std::istringstream fields(line);
    std::string id, parent, devno, root, point;
    fields >> id >> parent >> devno >> root >> point;
    if (point == dir) return true;
  }
  return false;
}

TEST_F(LayerOwnersTest, ShiftsARealLayerImageInAPrivateMountNamespace) {
  if (access("/sbin/debugfs", X_OK) != 0) GTEST_SKIP() << "needs debugfs (e2fsprogs) to look inside the image";
  const std::string image = dir_ + "/disk.img";
  ASSERT_TRUE(rootfs::EnsureDiskImage(image, 64ull << 20, kFrom, kFrom).ok());
  // Put a file of the agent (uid 1000 inside) in it, the way a sandbox would have.
  const std::string mount_dir = dir_ + "/mnt";
  ASSERT_TRUE(MakeDirs(mount_dir, 0700).ok());
  Status populated;
  std::thread([&] {
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      populated = ErrnoError("private mount namespace");
      return;
    }
    auto loop = rootfs::AttachLoopDevice(image);
    if (!loop.ok()) {
      populated = loop.status();
      return;
    }
    if (mount(loop->path.c_str(), mount_dir.c_str(), "ext4", 0, nullptr) != 0) {
      populated = ErrnoError("mount");
      return;
    }
    populated = WriteNewFile(mount_dir + "/work.txt", "hello", 0644);
    if (populated.ok() && chown((mount_dir + "/work.txt").c_str(), kFrom + 1000, kFrom + 1000) != 0) {
      populated = ErrnoError("chown");
    }
    umount2(mount_dir.c_str(), 0);
  }).join();
  ASSERT_TRUE(populated.ok()) << populated.ToString();
  EXPECT_NE(Debugfs(image, "stat /work.txt").find(DebugfsUser(kFrom + 1000)), std::string::npos);

  auto counts = ShiftLayerOwners({LayerKind::kImage, image}, mount_dir, kFrom, kTo, kRange);
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  EXPECT_GE(counts->shifted, 2u);  // the root and work.txt (lost+found is mkfs's own root's)

  const std::string stat_file = Debugfs(image, "stat /work.txt");
  EXPECT_NE(stat_file.find(DebugfsUser(kTo + 1000)), std::string::npos) << stat_file;
  EXPECT_EQ(stat_file.find(DebugfsUser(kFrom + 1000)), std::string::npos) << stat_file;
  EXPECT_NE(Debugfs(image, "stat /").find(DebugfsUser(kTo)), std::string::npos);
  // The mount never reached the daemon's (here: the test's) mount namespace.
  EXPECT_FALSE(MountedAt(mount_dir));
  // The image is whole: e2fsck finds nothing to fix.
  EXPECT_EQ(system(("/sbin/e2fsck -fn " + image + " >/dev/null 2>&1").c_str()), 0);
}

TEST_F(LayerOwnersTest, AnImageThatIsNotExt4IsAnErrorAndLeavesNothingMounted) {
  const std::string image = dir_ + "/garbage.img";
  ASSERT_TRUE(WriteNewFile(image, std::string(1 << 20, 'x'), 0600).ok());
  auto counts = ShiftLayerOwners({LayerKind::kImage, image}, dir_ + "/mnt", kFrom, kTo, kRange);
  EXPECT_FALSE(counts.ok());
  EXPECT_FALSE(MountedAt(dir_ + "/mnt"));
}

}  // namespace
}  // namespace corral::supervisor
