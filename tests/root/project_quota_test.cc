// rootfs/project_quota.h against the real kernel, on file systems of the test's own (loop-mounted
// images, tests/root/quota_fs_util.h): XFS with prjquota and ext4 with its project and quota
// features. Every denial has its positive control beside it: the write under the cap, the same
// write outside the project, the same ioctl from the host's root.
//
// The writes that must hit a cap run in a child as the layer's owner (kUid) without capabilities,
// as a sandbox's processes do: ext4's generic quota code lets a holder of CAP_SYS_RESOURCE past
// hard limits (ignore_hardlimit), so the test's own root would never see EDQUOT there.
//
// Kernels built without quota support for these file systems (no CONFIG_XFS_QUOTA, no
// CONFIG_QFMT_V2) skip the suites that need it, with the reason; the cgroup v2 QEMU guest
// (tests/cgv2, Debian's kernel) runs them.
#include "rootfs/project_quota.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/fs.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/file_util.h"
#include "common/unique_fd.h"
#include "tests/root/quota_fs_util.h"
#include "tests/testing/temp_dir.h"

namespace corral::rootfs {
namespace {

using test::QuotaFs;
using test::QuotaFsKind;
using test::TempDir;
using ::testing::HasSubstr;

constexpr uid_t kUid = 4242;
constexpr gid_t kGid = 4343;
constexpr uint64_t kMiB = 1ull << 20;

// What a child reports through its pipe: the errno of the first failed step (0: none), and what
// it got done before that.
struct ChildReport {
  int error = 0;
  uint64_t bytes = 0;
  int files = 0;
  int errors[4] = {};  // per-step errnos, for children that try several things
};

// Writes `bytes` to a new file in 256 KiB writes and fsyncs it: with delayed allocation a cap can
// otherwise show only at writeback, after write() said yes. In the child.
ChildReport WriteNewFileOf(const std::string& path, uint64_t bytes) {
  ChildReport report;
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd) {
    report.error = errno;
    return report;
  }
  static char chunk[256 << 10];
  memset(chunk, 'q', sizeof(chunk));
  while (report.bytes < bytes) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(sizeof(chunk), bytes - report.bytes));
    const ssize_t n = write(fd.get(), chunk, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      report.error = errno;
      return report;
    }
    report.bytes += static_cast<uint64_t>(n);
  }
  if (fsync(fd.get()) != 0) report.error = errno;
  return report;
}

// Creates up to `count` empty files dir/f0, dir/f1, ... and stops at the first failure. In the child.
ChildReport CreateFiles(const std::string& dir, int count) {
  ChildReport report;
  for (int i = 0; i < count; ++i) {
    const std::string path = dir + "/f" + std::to_string(i);
    UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (!fd) {
      report.error = errno;
      return report;
    }
    ++report.files;
  }
  return report;
}

// Forks and returns what `body` returned in the child; -1 as the error when the child died
// without a report.
template <typename Body>
ChildReport InChild(Body body) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe: " << strerror(errno);
    return {.error = -1};
  }
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  const pid_t pid = fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << strerror(errno);
    return {.error = -1};
  }
  if (pid == 0) {
    read_end.reset();
    const ChildReport report = body();
    (void)!write(write_end.get(), &report, sizeof(report));
    _exit(0);
  }
  write_end.reset();
  ChildReport report;
  ssize_t n;
  while ((n = read(read_end.get(), &report, sizeof(report))) < 0 && errno == EINTR) {
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (n != static_cast<ssize_t>(sizeof(report))) {
    ADD_FAILURE() << "the child ended without a report (wait status " << status << ")";
    return {.error = -1};
  }
  return report;
}

// Runs `body` in a child as kUid:kGid, which has no capabilities then: a sandbox process's view
// of the quota.
template <typename Body>
ChildReport AsOwner(Body body) {
  return InChild([&body]() -> ChildReport {
    if (setgroups(0, nullptr) != 0 || setresgid(kGid, kGid, kGid) != 0 || setresuid(kUid, kUid, kUid) != 0) {
      return {.error = errno};
    }
    return body();
  });
}

// The file's FS_IOC_FSGETXATTR (fsx_projid -1 when it cannot be read).
struct fsxattr AttrOf(const std::string& path) {
  struct fsxattr attr = {};
  attr.fsx_projid = static_cast<__u32>(-1);
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd || ioctl(fd.get(), FS_IOC_FSGETXATTR, &attr) != 0) {
    ADD_FAILURE() << "FS_IOC_FSGETXATTR " << path << ": " << strerror(errno);
  }
  return attr;
}

// 0 when FS_IOC_FSSETXATTR of `path` took `change` applied to its current attributes, else errno.
template <typename Change>
int SetAttr(const std::string& path, Change change) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  struct fsxattr attr = {};
  if (!fd || ioctl(fd.get(), FS_IOC_FSGETXATTR, &attr) != 0) return errno;
  change(attr);
  return ioctl(fd.get(), FS_IOC_FSSETXATTR, &attr) == 0 ? 0 : errno;
}

// The errno of a write past a project's cap. XFS answers ENOSPC for project quotas (they bound a
// tree as a smaller disk would; xfs_trans_dqresv), ext4's generic quota code EDQUOT for all types.
int CapErrno(QuotaFsKind kind) { return kind == QuotaFsKind::kXfs ? ENOSPC : EDQUOT; }

// What ext4 may charge past a byte cap: extent tree blocks allocated at writeback for data whose
// space was reserved within the cap (dquot_alloc_block_nofail).
constexpr uint64_t kMetadataSlack = 64 * 1024;

bool ProgramInstalled(std::string_view name) {
  return !FindExecutable(std::string(name), "/usr/sbin:/usr/bin:/sbin:/bin").empty();
}

// --- The file systems that enforce project quotas ------------------------------------------------

class ProjectQuotaTest : public ::testing::TestWithParam<QuotaFsKind> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (mount, quotactl, FS_IOC_FSSETXATTR)";
    const std::string_view mkfs = test::QuotaFsMkfs(GetParam());
    if (!ProgramInstalled(mkfs)) GTEST_SKIP() << mkfs << " is not installed (xfsprogs / e2fsprogs)";
    // What this kernel cannot mount is found out once, not by every test again.
    static std::map<QuotaFsKind, std::string> unsupported;
    if (auto known = unsupported.find(GetParam()); known != unsupported.end()) GTEST_SKIP() << known->second;
    // mkdtemp made it 0700; the owner's children must reach the mount point below it.
    ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);
    fs_.emplace(dir_.path(), GetParam());
    if (fs_->unsupported()) {
      unsupported[GetParam()] = "as an earlier test found: " + fs_->error();
      GTEST_SKIP() << fs_->error();
    }
    ASSERT_TRUE(fs_->ok()) << fs_->error();
    // A place on the same file system outside every project, writable by the owner: the control
    // that shows a refusal came from the project's cap, not from a full file system.
    outside_ = fs_->Join("outside");
    ASSERT_EQ(mkdir(outside_.c_str(), 0755), 0);
    ASSERT_EQ(chown(outside_.c_str(), kUid, kGid), 0);
  }

  // Makes fs/<name> a project dir owned by kUid:kGid, mode 0755.
  std::string MakeLayer(const std::string& name, uint32_t project_id, ProjectLimits limits) {
    const std::string dir = fs_->Join(name);
    Status made = MakeProjectDir(dir, project_id, limits, kUid, kGid, 0755);
    EXPECT_TRUE(made.ok()) << made.ToString();
    return dir;
  }

  ProjectUsage UsageOf(const std::string& dir, uint32_t project_id) {
    // Delayed allocations are counted as reserved space already; the sync makes it the written.
    UniqueFd fd(open(fs_->path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (fd) syncfs(fd.get());
    StatusOr<ProjectUsage> usage = ProjectUsageOf(dir, project_id);
    EXPECT_TRUE(usage.ok()) << usage.status().ToString();
    return usage.ok() ? *usage : ProjectUsage{};
  }

  TempDir dir_{"pq"};            // declared before fs_: the image outlives the mount
  std::optional<QuotaFs> fs_;
  std::string outside_;
};

TEST_P(ProjectQuotaTest, ProbeSaysEnforced) {
  StatusOr<ProjectQuotaSupport> support = ProbeProjectQuota(fs_->path());
  ASSERT_TRUE(support.ok()) << support.status().ToString();
  EXPECT_TRUE(support->enforced) << support->reason;
  EXPECT_EQ(support->reason, "");
  EXPECT_EQ(support->fs_type, GetParam() == QuotaFsKind::kXfs ? "xfs" : "ext4");
}

TEST_P(ProjectQuotaTest, MakeProjectDirTagsTheDirAndWhatIsMadeBelowIt) {
  const std::string layer = fs_->Join("layer");
  Status made = MakeProjectDir(layer, 1001, {.bytes = 64 * kMiB, .inodes = 1000}, kUid, kGid, 0750);
  ASSERT_TRUE(made.ok()) << made.ToString();

  struct stat st {};
  ASSERT_EQ(lstat(layer.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_uid, kUid);
  EXPECT_EQ(st.st_gid, kGid);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  struct fsxattr attr = AttrOf(layer);
  EXPECT_EQ(attr.fsx_projid, 1001u);
  EXPECT_NE(attr.fsx_xflags & FS_XFLAG_PROJINHERIT, 0u);
  StatusOr<uint32_t> id = ProjectIdOf(layer);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, 1001u);

  // What the owner makes below it, at any depth, is the project's.
  ChildReport made_below = AsOwner([&] {
    ChildReport r = WriteNewFileOf(layer + "/file", 4096);
    if (r.error == 0 && mkdir((layer + "/sub").c_str(), 0755) != 0) r.error = errno;
    if (r.error == 0) r = WriteNewFileOf(layer + "/sub/deeper", 4096);
    return r;
  });
  ASSERT_EQ(made_below.error, 0) << strerror(made_below.error);
  EXPECT_EQ(AttrOf(layer + "/file").fsx_projid, 1001u);
  struct fsxattr sub = AttrOf(layer + "/sub");
  EXPECT_EQ(sub.fsx_projid, 1001u);
  EXPECT_NE(sub.fsx_xflags & FS_XFLAG_PROJINHERIT, 0u) << "a subdirectory passes the id on too";
  EXPECT_EQ(AttrOf(layer + "/sub/deeper").fsx_projid, 1001u);

  // Control: the ids came from the dir, not from the file system.
  ASSERT_TRUE(WriteNewFile(outside_ + "/file", "x").ok());
  EXPECT_EQ(AttrOf(outside_ + "/file").fsx_projid, 0u);
  EXPECT_EQ(AttrOf(outside_).fsx_xflags & FS_XFLAG_PROJINHERIT, 0u);
}

TEST_P(ProjectQuotaTest, ByteCapRefusesWritesPastIt) {
  const std::string layer = MakeLayer("layer", 1002, {.bytes = 8 * kMiB});
  ChildReport done = AsOwner([&] {
    ChildReport r;
    r.errors[0] = WriteNewFileOf(layer + "/under", 4 * kMiB).error;
    ChildReport over = WriteNewFileOf(layer + "/past", 8 * kMiB);
    r.errors[1] = over.error;
    r.bytes = over.bytes;
    return r;
  });
  ASSERT_EQ(done.error, 0) << strerror(done.error);
  EXPECT_EQ(done.errors[0], 0) << "under the cap: " << strerror(done.errors[0]);
  EXPECT_EQ(done.errors[1], CapErrno(GetParam())) << "past the cap: " << strerror(done.errors[1]);
  EXPECT_LE(done.bytes, 4 * kMiB) << "written past the cap before the refusal";

  // Control: the file system itself had room for the same write, outside the project.
  ChildReport outside = AsOwner([&] { return WriteNewFileOf(outside_ + "/big", 8 * kMiB); });
  EXPECT_EQ(outside.error, 0) << strerror(outside.error);

  ProjectUsage usage = UsageOf(layer, 1002);
  EXPECT_LE(usage.bytes, 8 * kMiB + kMetadataSlack);
  EXPECT_GE(usage.bytes, 7 * kMiB);
  EXPECT_EQ(usage.limits.bytes, 8 * kMiB);
  EXPECT_EQ(usage.limits.inodes, 0u);
}

TEST_P(ProjectQuotaTest, InodeCapRefusesFilesPastIt) {
  constexpr uint64_t kInodes = 16;
  const std::string layer = MakeLayer("layer", 1003, {.inodes = kInodes});
  ChildReport created = AsOwner([&] { return CreateFiles(layer, 64); });
  EXPECT_EQ(created.error, CapErrno(GetParam())) << strerror(created.error);
  // The dir itself is the project's first inode.
  EXPECT_EQ(static_cast<uint64_t>(created.files), kInodes - 1) << "files made before the refusal";
  ProjectUsage usage = UsageOf(layer, 1003);
  EXPECT_EQ(usage.inodes, kInodes);
  EXPECT_EQ(usage.limits.inodes, kInodes);
  EXPECT_EQ(usage.limits.bytes, 0u);

  // Control: the same number of files outside the project.
  ChildReport outside = AsOwner([&] { return CreateFiles(outside_, 64); });
  EXPECT_EQ(outside.error, 0) << strerror(outside.error);
  EXPECT_EQ(outside.files, 64);
}

TEST_P(ProjectQuotaTest, ProjectUsageOfCountsWhatWasWritten) {
  const std::string layer = MakeLayer("layer", 1004, {.bytes = 64 * kMiB, .inodes = 100});
  // A project nothing was charged to yet uses nothing and has no limits.
  ProjectUsage unused = UsageOf(layer, 1999);
  EXPECT_EQ(unused.bytes, 0u);
  EXPECT_EQ(unused.inodes, 0u);
  EXPECT_EQ(unused.limits.bytes, 0u);

  ChildReport wrote = AsOwner([&] {
    ChildReport r;
    for (int i = 0; i < 3 && r.error == 0; ++i) r.error = WriteNewFileOf(layer + "/m" + std::to_string(i), kMiB).error;
    if (r.error == 0 && mkdir((layer + "/sub").c_str(), 0755) != 0) r.error = errno;
    return r;
  });
  ASSERT_EQ(wrote.error, 0) << strerror(wrote.error);
  ProjectUsage usage = UsageOf(layer, 1004);
  EXPECT_EQ(usage.inodes, 5u) << "the dir, three files, a subdirectory";
  EXPECT_GE(usage.bytes, 3 * kMiB);
  EXPECT_LE(usage.bytes, 3 * kMiB + 256 * 1024) << "3 MiB of data and a few directory blocks";
  EXPECT_EQ(usage.limits.bytes, 64 * kMiB);
  EXPECT_EQ(usage.limits.inodes, 100u);
}

TEST_P(ProjectQuotaTest, SetProjectLimitsRaisesAndClearsTheCap) {
  const std::string layer = MakeLayer("layer", 1005, {.bytes = 4 * kMiB});
  ChildReport refused = AsOwner([&] { return WriteNewFileOf(layer + "/a", 6 * kMiB); });
  EXPECT_EQ(refused.error, CapErrno(GetParam())) << strerror(refused.error);

  Status raised = SetProjectLimits(layer, 1005, {.bytes = 32 * kMiB});
  ASSERT_TRUE(raised.ok()) << raised.ToString();
  EXPECT_EQ(UsageOf(layer, 1005).limits.bytes, 32 * kMiB);
  ChildReport after_raise = AsOwner([&] { return WriteNewFileOf(layer + "/b", 8 * kMiB); });
  EXPECT_EQ(after_raise.error, 0) << "under the raised cap: " << strerror(after_raise.error);
  ChildReport past_raise = AsOwner([&] { return WriteNewFileOf(layer + "/c", 32 * kMiB); });
  EXPECT_EQ(past_raise.error, CapErrno(GetParam())) << "the raised cap still holds: " << strerror(past_raise.error);

  Status cleared = SetProjectLimits(layer, 1005, {});
  ASSERT_TRUE(cleared.ok()) << cleared.ToString();
  ProjectUsage usage = UsageOf(layer, 1005);
  EXPECT_EQ(usage.limits.bytes, 0u);
  EXPECT_EQ(usage.limits.inodes, 0u);
  ChildReport uncapped = AsOwner([&] { return WriteNewFileOf(layer + "/d", 40 * kMiB); });
  EXPECT_EQ(uncapped.error, 0) << "no cap any more: " << strerror(uncapped.error);
  EXPECT_GT(UsageOf(layer, 1005).bytes, 32 * kMiB);
}

TEST_P(ProjectQuotaTest, TwoProjectsAreIndependent) {
  const std::string a = MakeLayer("a", 1006, {.bytes = 4 * kMiB});
  const std::string b = MakeLayer("b", 1007, {.bytes = 4 * kMiB});
  ChildReport done = AsOwner([&] {
    ChildReport r;
    r.errors[0] = WriteNewFileOf(a + "/fill", 8 * kMiB).error;
    r.errors[1] = WriteNewFileOf(b + "/some", 3 * kMiB).error;
    r.errors[2] = WriteNewFileOf(a + "/more", kMiB).error;
    return r;
  });
  ASSERT_EQ(done.error, 0) << strerror(done.error);
  EXPECT_EQ(done.errors[0], CapErrno(GetParam())) << "filling a: " << strerror(done.errors[0]);
  EXPECT_EQ(done.errors[1], 0) << "b, while a is full: " << strerror(done.errors[1]);
  EXPECT_EQ(done.errors[2], CapErrno(GetParam())) << "a, still full: " << strerror(done.errors[2]);
  ProjectUsage usage_a = UsageOf(a, 1006), usage_b = UsageOf(b, 1007);
  EXPECT_GE(usage_a.bytes, 3 * kMiB);
  EXPECT_LE(usage_a.bytes, 4 * kMiB + kMetadataSlack);
  EXPECT_GE(usage_b.bytes, 3 * kMiB);
  EXPECT_LE(usage_b.bytes, 3 * kMiB + 64 * 1024);
}

TEST_P(ProjectQuotaTest, SymlinkInPlaceOfTheDirIsRefused) {
  const std::string target = fs_->Join("target");
  Status made = MakeProjectDir(target, 1008, {.bytes = 16 * kMiB}, kUid, kGid, 0750);
  ASSERT_TRUE(made.ok()) << "the dir itself: " << made.ToString();
  const std::string link = fs_->Join("link");
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);

  Status through_link = MakeProjectDir(link, 1009, {.bytes = kMiB}, 0, 0, 0700);
  EXPECT_FALSE(through_link.ok()) << "MakeProjectDir followed the symlink";
  EXPECT_EQ(AttrOf(target).fsx_projid, 1008u);
  struct stat st {};
  ASSERT_EQ(lstat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kUid) << "the target's owner changed";
  EXPECT_EQ(st.st_mode & 07777, 0750u) << "the target's mode changed";
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(UsageOf(target, 1009).limits.bytes, 0u) << "limits were set for the refused project";
}

TEST_P(ProjectQuotaTest, UserNamespaceRootCannotMoveFilesOutOfTheProject) {
  const std::string layer = MakeLayer("layer", 1010, {.bytes = 16 * kMiB});
  const std::string file = layer + "/file";
  ASSERT_TRUE(WriteNewFile(file, "data").ok());
  ASSERT_EQ(chown(file.c_str(), kUid, kGid), 0);

  // The child enters a new user namespace whose root the parent maps to kUid:kGid, the file's
  // owner: the owner check of FS_IOC_FSSETXATTR passes, so what refuses is the namespace rule.
  int ready[2], go[2];
  ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(go, O_CLOEXEC), 0);
  UniqueFd ready_read(ready[0]), ready_write(ready[1]), go_read(go[0]), go_write(go[1]);
  int report_pipe[2];
  ASSERT_EQ(pipe2(report_pipe, O_CLOEXEC), 0);
  UniqueFd report_read(report_pipe[0]), report_write(report_pipe[1]);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ChildReport r;
    char byte = 0;
    if (setgroups(0, nullptr) != 0 || unshare(CLONE_NEWUSER) != 0) {
      r.error = errno;
    } else if (write(ready_write.get(), "r", 1) != 1 || read(go_read.get(), &byte, 1) != 1) {
      r.error = EPIPE;
    } else if (setresgid(0, 0, 0) != 0 || setresuid(0, 0, 0) != 0) {
      r.error = errno;
    } else {
      // Control: the same ioctl changing nothing is allowed (the child owns the file).
      r.errors[0] = SetAttr(file, [](struct fsxattr&) {});
      r.errors[1] = SetAttr(file, [](struct fsxattr& a) { a.fsx_projid = 0; });
      r.errors[2] = SetAttr(layer, [](struct fsxattr& a) { a.fsx_projid = 1011; });
      r.errors[3] = SetAttr(layer, [](struct fsxattr& a) { a.fsx_xflags &= ~FS_XFLAG_PROJINHERIT; });
    }
    (void)!write(report_write.get(), &r, sizeof(r));
    _exit(0);
  }
  ready_write.reset();
  go_read.reset();
  report_write.reset();
  char byte = 0;
  if (read(ready_read.get(), &byte, 1) == 1) {
    const std::string proc = "/proc/" + std::to_string(pid);
    Status uid_map = WriteExistingFile(proc + "/uid_map", "0 " + std::to_string(kUid) + " 1\n");
    Status gid_map = WriteExistingFile(proc + "/gid_map", "0 " + std::to_string(kGid) + " 1\n");
    EXPECT_TRUE(uid_map.ok()) << uid_map.ToString();
    EXPECT_TRUE(gid_map.ok()) << gid_map.ToString();
    EXPECT_EQ(write(go_write.get(), "g", 1), 1);
  }
  go_write.reset();
  ChildReport r;
  const ssize_t n = read(report_read.get(), &r, sizeof(r));
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_EQ(n, static_cast<ssize_t>(sizeof(r))) << "the child ended without a report";
  ASSERT_EQ(r.error, 0) << "entering the user namespace: " << strerror(r.error);
  EXPECT_EQ(r.errors[0], 0) << "the unchanged attributes: " << strerror(r.errors[0]);
  EXPECT_EQ(r.errors[1], EINVAL) << "the file's project id to 0: " << strerror(r.errors[1]);
  EXPECT_EQ(r.errors[2], EINVAL) << "the dir's project id to another: " << strerror(r.errors[2]);
  EXPECT_EQ(r.errors[3], EINVAL) << "clearing the inherit flag: " << strerror(r.errors[3]);
  EXPECT_EQ(AttrOf(file).fsx_projid, 1010u);
  EXPECT_EQ(AttrOf(layer).fsx_projid, 1010u);
  EXPECT_NE(AttrOf(layer).fsx_xflags & FS_XFLAG_PROJINHERIT, 0u);

  // Control: the host's root may do both.
  EXPECT_EQ(SetAttr(file, [](struct fsxattr& a) { a.fsx_projid = 1011; }), 0);
  EXPECT_EQ(AttrOf(file).fsx_projid, 1011u);
  EXPECT_EQ(SetAttr(layer, [](struct fsxattr& a) { a.fsx_xflags &= ~FS_XFLAG_PROJINHERIT; }), 0);
  EXPECT_EQ(AttrOf(layer).fsx_xflags & FS_XFLAG_PROJINHERIT, 0u);
}

TEST_P(ProjectQuotaTest, ProjectIdZeroIsRefused) {
  const std::string zero = fs_->Join("zero");
  Status refused = MakeProjectDir(zero, 0, {.bytes = kMiB}, kUid, kGid, 0755);
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(refused.error_number(), EINVAL) << refused.ToString();
  EXPECT_NE(access(zero.c_str(), F_OK), 0) << "the refused dir was made anyway";
  // Control: the smallest id that is a project's.
  const std::string one = MakeLayer("one", 1, {.bytes = kMiB});
  StatusOr<uint32_t> id = ProjectIdOf(one);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, 1u);
}

INSTANTIATE_TEST_SUITE_P(, ProjectQuotaTest, ::testing::Values(QuotaFsKind::kXfs, QuotaFsKind::kExt4Project),
                         [](const auto& kind) { return std::string(test::QuotaFsKindName(kind.param)); });

// --- Where project quotas are not enforced ------------------------------------------------------

// A tmpfs of the test's own, unmounted at the end.
class ScopedTmpfs {
 public:
  explicit ScopedTmpfs(std::string path) : path_(std::move(path)) {
    if (mkdir(path_.c_str(), 0755) != 0 || mount("corral-pq-tmpfs", path_.c_str(), "tmpfs", 0, "size=1m") != 0) {
      ADD_FAILURE() << "mount a tmpfs on " << path_ << ": " << strerror(errno);
      return;
    }
    mounted_ = true;
  }
  ~ScopedTmpfs() {
    if (mounted_ && umount2(path_.c_str(), UMOUNT_NOFOLLOW) != 0 && umount2(path_.c_str(), MNT_DETACH) != 0) {
      ADD_FAILURE() << "umount " << path_ << ": " << strerror(errno);
    }
  }
  bool ok() const { return mounted_; }

 private:
  std::string path_;
  bool mounted_ = false;
};

class ProbeProjectQuotaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (mount)";
  }
  // The probe of a file system that must not enforce; fails the test when it says it does.
  ProjectQuotaSupport ProbeNotEnforced(const std::string& path, const std::string& fs_type) {
    StatusOr<ProjectQuotaSupport> support = ProbeProjectQuota(path);
    EXPECT_TRUE(support.ok()) << support.status().ToString();
    if (!support.ok()) return {};
    EXPECT_FALSE(support->enforced);
    EXPECT_EQ(support->fs_type, fs_type);
    EXPECT_THAT(support->reason, HasSubstr(fs_type)) << "the reason should name the file system";
    return *support;
  }
  TempDir dir_{"pq-probe"};
};

TEST_F(ProbeProjectQuotaTest, NotEnforcedOnPlainExt4) {
  if (!ProgramInstalled("mkfs.ext4")) GTEST_SKIP() << "mkfs.ext4 is not installed (e2fsprogs)";
  QuotaFs fs(dir_.path(), QuotaFsKind::kExt4Plain);
  ASSERT_TRUE(fs.ok()) << fs.error();
  ProbeNotEnforced(fs.path(), "ext4");
}

TEST_F(ProbeProjectQuotaTest, NotEnforcedOnXfsWithoutPrjquota) {
  if (!ProgramInstalled("mkfs.xfs")) GTEST_SKIP() << "mkfs.xfs is not installed (xfsprogs)";
  QuotaFs fs(dir_.path(), QuotaFsKind::kXfsPlain);
  ASSERT_TRUE(fs.ok()) << fs.error();
  ProbeNotEnforced(fs.path(), "xfs");
}

TEST_F(ProbeProjectQuotaTest, NotEnforcedOnTmpfs) {
  ScopedTmpfs tmpfs(dir_.Join("tmpfs"));
  ASSERT_TRUE(tmpfs.ok());
  ProbeNotEnforced(dir_.Join("tmpfs"), "tmpfs");
}

TEST_F(ProbeProjectQuotaTest, MissingDirIsAnError) {
  StatusOr<ProjectQuotaSupport> missing = ProbeProjectQuota(dir_.Join("missing"));
  EXPECT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().error_number(), ENOENT) << missing.status().ToString();
  // Control: the dir that is there is probed.
  EXPECT_TRUE(ProbeProjectQuota(dir_.path()).ok());
}

}  // namespace
}  // namespace corral::rootfs
