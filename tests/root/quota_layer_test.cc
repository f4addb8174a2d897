// A persistent sandbox whose writable layer is a project-quota directory (writable_layer.h):
// the state dir on a loop-mounted XFS or ext4 with project quotas, the sandbox started by
// SandboxHost as corrald starts it, its cap tried from inside. Kernels without the quota support
// (no CONFIG_XFS_QUOTA, no CONFIG_QFMT_V2) skip, saying so; the cgroup v2 guest's Debian kernel
// has both, and runs these there.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>

#include "common/file_util.h"
#include "rootfs/layer_unpack.h"
#include "rootfs/project_quota.h"
#include "supervisor/images/layer_capture.h"
#include "supervisor/ids.h"
#include "supervisor/sandboxes/layer_owners.h"
#include "supervisor/sandboxes/writable_layer.h"
#include "tests/root/quota_fs_util.h"
#include "tests/root/sandbox_host_fixture.h"
#include "tests/testing/temp_dir.h"

namespace corral::supervisor {
namespace {

using ::testing::HasSubstr;

class QuotaLayerTest : public SandboxHostFixture, public ::testing::WithParamInterface<test::QuotaFsKind> {
 protected:
  void SetUp() override {
    test::SandboxTest::SetUp();
    if (IsSkipped()) return;
    fs_ = std::make_unique<test::QuotaFs>(tmp_.path(), GetParam(), 768ull << 20);
    if (fs_->unsupported()) GTEST_SKIP() << "this kernel cannot mount it with project quotas: " << fs_->error();
    ASSERT_TRUE(fs_->ok()) << fs_->error();
    ASSERT_NO_FATAL_FAILURE(MakeTestHost(config_, backend_, host_, shape_, 15600));
    config_.state_dir = fs_->Join("state");  // the host holds the config by reference
    ASSERT_TRUE(MakeDirs(config_.state_dir + "/sandboxes", 0700).ok());
    auto choice = ChooseLayerKind(DiskQuotaMode::kProject, config_.state_dir + "/sandboxes");
    ASSERT_TRUE(choice.ok()) << choice.status().ToString();
    ASSERT_EQ(choice->kind, LayerKind::kQuotaDir) << choice->why;
    host_->SetNewLayerKind(choice->kind);
  }
  void TearDown() override {
    if (host_ && !second_.id.empty()) (void)host_->Destroy(second_.id);
    SandboxHostFixture::TearDown();
    host_.reset();
    fs_.reset();  // after every sandbox that used it is gone
  }

  Finished RunAsRoot(const std::string& script) {
    ExecRequest request = Sh(script, 0);
    request.cwd = "/root";
    return Run(request);
  }

  test::TempDir tmp_{"quota-layer"};
  std::unique_ptr<test::QuotaFs> fs_;
  HostSandboxShape second_;
};

TEST_P(QuotaLayerTest, TheDiskCapIsTheProjectsQuotaAndHolds) {
  shape_.disk_bytes = 256ull << 20;
  ASSERT_NO_FATAL_FAILURE(StartSandbox());
  const WritableLayer layer = host_->SandboxLayer(shape_.id);
  EXPECT_EQ(layer.kind, LayerKind::kQuotaDir);
  EXPECT_EQ(layer.path, config_.state_dir + "/sandboxes/" + shape_.id + "/layer");
  auto project = rootfs::ProjectIdOf(layer.path + "/upper");
  ASSERT_TRUE(project.ok()) << project.status().ToString();
  EXPECT_EQ(*project, LayerProjectId(shape_.uid_base));
  EXPECT_TRUE(test::LoopDevicesBacking(config_.state_dir).empty()) << "an image layer on a loop device";

  // df inside shows the cap (the overlay's statfs is its upper's: the project's limits).
  Finished df = Run(Sh("df -k / | tail -1 | awk '{print $2}'"));
  ASSERT_EQ(df.wait_status, 0) << df.err;
  const uint64_t total_kib = std::stoull(df.out);
  EXPECT_GE(total_kib, 200u * 1024) << df.out;
  EXPECT_LE(total_kib, 260u * 1024) << df.out;

  // Under the cap: written (the positive control); past it: the kernel refuses.
  Finished fits = Run(Sh("dd if=/dev/zero of=$HOME/a bs=1M count=100 conv=fsync 2>&1"));
  EXPECT_EQ(fits.wait_status, 0) << fits.out;
  auto used = rootfs::ProjectUsageOf(layer.path, LayerProjectId(shape_.uid_base));
  ASSERT_TRUE(used.ok()) << used.status().ToString();
  EXPECT_GE(used->bytes, 100ull << 20);
  EXPECT_EQ(used->limits.bytes, 256ull << 20);
  Finished over = Run(Sh("dd if=/dev/zero of=$HOME/b bs=1M count=200 conv=fsync 2>&1"));
  EXPECT_NE(over.wait_status, 0) << over.out;
  // ext4 says EDQUOT; XFS says ENOSPC for a project quota (the project is the "device").
  EXPECT_THAT(over.out, ::testing::AnyOf(HasSubstr("Disk quota exceeded"), HasSubstr("No space left on device")));
  // Full, stopped and started: the overlay still mounts read-write (its work dir is made anew at
  // each mount, under a cap raised for the launch only), and the cap is the cap again after.
  ASSERT_TRUE(host_->Stop(shape_.id, &*running_).ok());
  running_.reset();
  ASSERT_NO_FATAL_FAILURE(StartSandbox());
  auto restarted = rootfs::ProjectUsageOf(layer.path, LayerProjectId(shape_.uid_base));
  ASSERT_TRUE(restarted.ok()) << restarted.status().ToString();
  EXPECT_EQ(restarted->limits.bytes, 256ull << 20);
  // Room again once the file goes.
  Finished freed = Run(Sh("rm -f $HOME/a $HOME/b && dd if=/dev/zero of=$HOME/c bs=1M count=150 conv=fsync 2>&1"));
  EXPECT_EQ(freed.wait_status, 0) << freed.out;
}

TEST_P(QuotaLayerTest, TheInodeCapHolds) {
  shape_.disk_bytes = 64ull << 20;  // 4,096 inodes (one per 16 KiB, at least 4,096)
  ASSERT_NO_FATAL_FAILURE(StartSandbox());
  Finished made = Run(Sh("mkdir $HOME/many && cd $HOME/many && i=0; while [ $i -lt 6000 ]; do "
                         "true > f$i 2>/dev/null || { echo $i; exit 3; }; i=$((i+1)); done; echo all"));
  ASSERT_TRUE(WIFEXITED(made.wait_status)) << made.out;
  EXPECT_EQ(WEXITSTATUS(made.wait_status), 3) << made.out;
  const int stopped_at = std::stoi(made.out);
  EXPECT_GT(stopped_at, 3000) << "far fewer files than the cap allows";
  EXPECT_LE(stopped_at, 4096);
}

TEST_P(QuotaLayerTest, RootInsideCannotMoveItsFilesOutOfTheProject) {
  ASSERT_NO_FATAL_FAILURE(StartSandbox());
  // FS_IOC_FSGETXATTR (_IOR('X', 31, struct fsxattr)) reads the project id: the ioctl reaches
  // the file system (the positive control); FS_IOC_FSSETXATTR to project 0, and clearing the
  // inherit flag of a directory, are refused to a user namespace that is not the host's.
  Finished tried = RunAsRoot(R"(python3 - <<'EOF'
import fcntl, os, struct
f = os.open("/root/x", os.O_CREAT | os.O_RDWR, 0o644)
d = os.open("/root", os.O_RDONLY | os.O_DIRECTORY)
for name, fd, edit in (("file", f, lambda b: struct.pack_into("I", b, 12, 0)),
                       ("dir", d, lambda b: struct.pack_into("I", b, 0, struct.unpack_from("I", b, 0)[0] & ~0x200))):
    buf = bytearray(28)
    fcntl.ioctl(fd, 0x801c581f, buf)
    print(name, "project", struct.unpack_from("I", buf, 12)[0])
    edit(buf)
    try:
        fcntl.ioctl(fd, 0x401c5820, buf)
        print(name, "changed")
    except OSError as e:
        print(name, "refused", e.errno)
EOF
)");
  EXPECT_EQ(tried.wait_status, 0) << tried.out << tried.err;
  const std::string project = std::to_string(LayerProjectId(shape_.uid_base));
  EXPECT_THAT(tried.out, HasSubstr("file project " + project)) << tried.err;
  EXPECT_THAT(tried.out, HasSubstr("file refused"));
  EXPECT_THAT(tried.out, HasSubstr("dir refused"));
  EXPECT_THAT(tried.out, ::testing::Not(HasSubstr("changed")));
  auto after = rootfs::ProjectIdOf(host_->SandboxLayer(shape_.id).path + "/upper/root");
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(*after, LayerProjectId(shape_.uid_base));
}

TEST_P(QuotaLayerTest, FilesSurviveARestartAndACopyMovesToTheNewProjectAndRange) {
  ASSERT_NO_FATAL_FAILURE(StartSandbox());
  ASSERT_EQ(Run(Sh("mkdir -p ~/proj && echo v1 > ~/proj/main.c && ln ~/proj/main.c ~/proj/hard")).wait_status, 0);
  // /etc/hosts is the skeleton's (a lower layer): removing it leaves a whiteout in the upper.
  ASSERT_EQ(RunAsRoot("echo secret > /root/r.txt && chmod 600 /root/r.txt && rm /etc/hosts").wait_status, 0);
  ASSERT_TRUE(host_->Stop(shape_.id, &*running_).ok());
  running_.reset();
  ASSERT_NO_FATAL_FAILURE(StartSandbox());
  EXPECT_EQ(Run(Sh("cat ~/proj/main.c")).out, "v1\n");

  // A snapshot of the running sandbox (frozen for the copy): a plain directory, not in a project.
  const WritableLayer snapshot = host_->SnapshotLayer("snap_" + shape_.id.substr(3), LayerKind::kQuotaDir);
  EXPECT_EQ(snapshot.kind, LayerKind::kQuotaDir);
  ASSERT_TRUE(host_->CopySandboxLayer(shape_.id, running_->pid, snapshot).ok());
  auto bytes = LayerDiskBytes(snapshot);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_GT(*bytes, 0u);
  auto snapshot_project = rootfs::ProjectIdOf(snapshot.path + "/upper/home/agent/proj");
  ASSERT_TRUE(snapshot_project.ok());
  EXPECT_EQ(*snapshot_project, 0u);

  // A sandbox made from it, as corrald does: its layer made first (its project and cap), the
  // copy charged to it, then moved to its uid range.
  ASSERT_TRUE(host_->Stop(shape_.id, &*running_).ok());
  running_.reset();
  second_ = shape_;
  second_.id = NewId("sb");
  second_.uid_base = shape_.uid_base + 400 * kUidStep;
  const WritableLayer copy = host_->SandboxLayer(second_.id, snapshot.kind);
  ASSERT_TRUE(MakeLayer(copy, second_.uid_base, second_.disk_bytes).ok());
  Status copied = CopyLayer(snapshot, copy);
  ASSERT_TRUE(copied.ok()) << copied.ToString();
  auto shifted = ShiftLayerOwners(copy, config_.run_dir + "/layers", shape_.uid_base, second_.uid_base, kUidStep);
  ASSERT_TRUE(shifted.ok()) << shifted.status().ToString();
  auto copy_project = rootfs::ProjectIdOf(copy.path + "/upper/home/agent/proj");
  ASSERT_TRUE(copy_project.ok());
  EXPECT_EQ(*copy_project, LayerProjectId(second_.uid_base));
  auto charged = rootfs::ProjectUsageOf(copy.path, LayerProjectId(second_.uid_base));
  ASSERT_TRUE(charged.ok());
  EXPECT_GE(charged->inodes, 5u);

  std::swap(shape_, second_);  // the fixture runs commands in shape_
  ASSERT_NO_FATAL_FAILURE(StartSandbox());
  EXPECT_EQ(Run(Sh("cat ~/proj/hard")).out, "v1\n");
  Finished owners = RunAsRoot("stat -c '%n %U %a %h' /home/agent/proj/main.c /root/r.txt; ls /etc/hosts 2>&1");
  EXPECT_EQ(owners.out,
            "/home/agent/proj/main.c agent 644 2\n/root/r.txt root 600 1\n"
            "ls: cannot access '/etc/hosts': No such file or directory\n")
      << owners.err;
  struct stat whiteout;
  ASSERT_EQ(lstat((copy.path + "/upper/etc/hosts").c_str(), &whiteout), 0);
  EXPECT_TRUE(S_ISCHR(whiteout.st_mode) && whiteout.st_rdev == 0) << "the overlay's whiteout came along";
  EXPECT_TRUE(RemoveLayer(snapshot).ok());
  struct stat st;
  EXPECT_NE(lstat(snapshot.path.c_str(), &st), 0);
}

TEST_P(QuotaLayerTest, AnExistingImageLayerKeepsItsKind) {
  // Made before the host's kind changed: still an image, and started as one.
  const std::string dir = config_.state_dir + "/sandboxes/" + shape_.id;
  ASSERT_TRUE(MakeLayer({LayerKind::kImage, dir + "/disk.img"}, shape_.uid_base, shape_.disk_bytes).ok());
  EXPECT_EQ(host_->SandboxLayer(shape_.id).kind, LayerKind::kImage);
  ASSERT_NO_FATAL_FAILURE(StartSandbox());
  EXPECT_EQ(Run(Sh("echo hi > ~/f && cat ~/f")).out, "hi\n");
  EXPECT_FALSE(test::LoopDevicesBacking(config_.state_dir).empty()) << "the image layer is on a loop device";
  // And a new one gets the host's kind.
  EXPECT_EQ(host_->SandboxLayer(NewId("sb")).kind, LayerKind::kQuotaDir);
}

TEST_P(QuotaLayerTest, DestroyTakesTheLayerAndItsUseAway) {
  ASSERT_NO_FATAL_FAILURE(StartSandbox());
  ASSERT_EQ(Run(Sh("dd if=/dev/zero of=$HOME/a bs=1M count=20 conv=fsync 2>&1")).wait_status, 0);
  const WritableLayer layer = host_->SandboxLayer(shape_.id);
  const uint32_t project = LayerProjectId(shape_.uid_base);
  auto before = rootfs::ProjectUsageOf(fs_->path(), project);
  ASSERT_TRUE(before.ok());
  EXPECT_GE(before->bytes, 20ull << 20);
  ASSERT_TRUE(host_->Stop(shape_.id, &*running_).ok());
  running_.reset();
  ASSERT_TRUE(host_->Destroy(shape_.id).ok());
  struct stat st;
  EXPECT_NE(lstat(layer.path.c_str(), &st), 0);
  // XFS frees unlinked inodes in the background (inodegc): their use goes within moments.
  rootfs::ProjectUsage after;
  for (int i = 0; i < 100; ++i) {
    auto now = rootfs::ProjectUsageOf(fs_->path(), project);
    ASSERT_TRUE(now.ok());
    after = *now;
    if (after.bytes == 0 && after.inodes == 0) break;
    usleep(100 * 1000);
  }
  EXPECT_EQ(after.bytes, 0u);
  EXPECT_EQ(after.inodes, 0u);
}

TEST_P(QuotaLayerTest, AnImageBuildCapturesWhatTheSandboxWrote) {
  ASSERT_NO_FATAL_FAILURE(StartSandbox());
  ASSERT_EQ(Run(Sh("mkdir -p ~/proj && echo v1 > ~/proj/main.c")).wait_status, 0);
  ASSERT_EQ(RunAsRoot("rm /etc/hosts").wait_status, 0);
  ASSERT_TRUE(host_->Stop(shape_.id, &*running_).ok());
  running_.reset();
  const std::string tar = tmp_.path() + "/layer.tar";
  auto counts = CaptureLayer(host_->SandboxLayer(shape_.id), tmp_.path() + "/mnt", tar, shape_.uid_base,
                             {"proc", "dev", "sys"});
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  EXPECT_EQ(counts->whiteouts, 1u);  // /etc/hosts
  auto unpacked = rootfs::UnpackLayer(tar, tmp_.path() + "/unpacked", {}, {});
  ASSERT_TRUE(unpacked.ok()) << unpacked.status().ToString();
  EXPECT_EQ(*ReadFileToString(tmp_.path() + "/unpacked/home/agent/proj/main.c"), "v1\n");
  struct stat st;
  ASSERT_EQ(lstat((tmp_.path() + "/unpacked/home/agent/proj/main.c").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);  // the image's ids, not the sandbox's host range
  ASSERT_EQ(lstat((tmp_.path() + "/unpacked/etc/hosts").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode) && st.st_rdev == 0);
}

INSTANTIATE_TEST_SUITE_P(FileSystems, QuotaLayerTest,
                         ::testing::Values(test::QuotaFsKind::kXfs, test::QuotaFsKind::kExt4Project),
                         [](const auto& param_info) { return std::string(test::QuotaFsKindName(param_info.param)); });

}  // namespace
}  // namespace corral::supervisor
