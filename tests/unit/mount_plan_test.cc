#include "rootfs/mount_plan.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <string>

namespace corral::rootfs {
namespace {

MountPlanInput HostInput() {
  MountPlanInput in;
  in.scratch_dir = "/run/corral/scratch";
  in.scratch_bytes = 64ull << 20;
  in.host_uid_base = 0x40000000;
  in.host_gid_base = 0x40000000;
  in.hostname = "box";
  return in;
}

const MountOp* FindMount(const MountPlan& plan, const std::string& target) {
  for (const auto& op : plan.mounts) {
    if (op.target == target) return &op;
  }
  return nullptr;
}

const FileOp* FindFile(const MountPlan& plan, const std::string& path) {
  for (const auto& op : plan.skeleton) {
    if (op.path == path) return &op;
  }
  return nullptr;
}

TEST(MountPlanTest, HostImageBindsUsrReadOnlyAndGeneratesEtc) {
  auto plan = BuildMountPlan(HostInput());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const MountOp* usr = FindMount(*plan, "usr");
  ASSERT_NE(usr, nullptr);
  EXPECT_EQ(usr->kind, MountOp::Kind::kBind);
  EXPECT_EQ(usr->source, "/usr");
  EXPECT_TRUE(usr->attr_set & MOUNT_ATTR_RDONLY);
  EXPECT_TRUE(usr->attr_set & MOUNT_ATTR_NOSUID);
  EXPECT_TRUE(usr->attr_set & MOUNT_ATTR_NODEV);
  EXPECT_TRUE(usr->recursive);
  const FileOp* passwd = FindFile(*plan, "/run/corral/scratch/lower/etc/passwd");
  ASSERT_NE(passwd, nullptr);
  EXPECT_NE(passwd->content.find("agent:x:1000:1000"), std::string::npos);
  EXPECT_EQ(passwd->uid, 0x40000000u);
  const FileOp* hosts = FindFile(*plan, "/run/corral/scratch/lower/etc/hosts");
  ASSERT_NE(hosts, nullptr);
  EXPECT_NE(hosts->content.find("box"), std::string::npos);
  const FileOp* home = FindFile(*plan, "/run/corral/scratch/lower/home/agent");
  ASSERT_NE(home, nullptr);
  EXPECT_EQ(home->uid, 0x40000000u + 1000);
}

TEST(MountPlanTest, HostEtcSecretsAreNeverInThePlan) {
  auto plan = BuildMountPlan(HostInput());
  ASSERT_TRUE(plan.ok());
  for (const auto& op : plan->mounts) {
    EXPECT_NE(op.source, "/etc") << op.description;
    EXPECT_EQ(op.source.find("shadow"), std::string::npos) << op.description;
    EXPECT_EQ(op.source.find("ssh"), std::string::npos) << op.description;
  }
  for (const auto& op : plan->skeleton) {
    EXPECT_EQ(op.path.find("shadow"), std::string::npos) << op.path;
    EXPECT_EQ(op.path.find("sudoers"), std::string::npos) << op.path;
  }
  // Positive control: an allowlisted file is carried, copied by the child from the host.
  const FileOp* cache = FindFile(*plan, "/run/corral/scratch/lower/etc/ld.so.cache");
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->kind, FileOp::Kind::kCopy);
  EXPECT_EQ(cache->content, "/etc/ld.so.cache");
}

TEST(MountPlanTest, MergedUsrSymlinksAreRecreated) {
  auto plan = BuildMountPlan(HostInput());
  ASSERT_TRUE(plan.ok());
  // Debian 12 has /bin -> usr/bin.
  const FileOp* bin = FindFile(*plan, "/run/corral/scratch/lower/bin");
  ASSERT_NE(bin, nullptr);
  EXPECT_EQ(bin->kind, FileOp::Kind::kSymlink);
  EXPECT_EQ(bin->content, "usr/bin");
}

TEST(MountPlanTest, ProcHasRuncMasksAndReadOnlyPaths) {
  auto plan = BuildMountPlan(HostInput());
  ASSERT_TRUE(plan.ok());
  const MountOp* proc = FindMount(*plan, "proc");
  ASSERT_NE(proc, nullptr);
  EXPECT_EQ(proc->fstype, "proc");
  EXPECT_TRUE(proc->flags & MS_NOSUID);
  EXPECT_TRUE(proc->flags & MS_NODEV);
  for (const char* masked : {"proc/kcore", "proc/keys", "proc/timer_list", "proc/sched_debug"}) {
    const MountOp* op = FindMount(*plan, masked);
    ASSERT_NE(op, nullptr) << masked;
    EXPECT_EQ(op->kind, MountOp::Kind::kMaskFile) << masked;
  }
  const MountOp* firmware = FindMount(*plan, "sys/firmware");
  ASSERT_NE(firmware, nullptr);
  EXPECT_EQ(firmware->kind, MountOp::Kind::kMaskDir);
  // Masked by the scratch's empty directory, and /dev/shm is the scratch's too: no superblock
  // of their own (each registers a shrinker every memory cgroup on the host makes room for).
  EXPECT_EQ(firmware->source, HostInput().scratch_dir + "/empty");
  const MountOp* shm = FindMount(*plan, "dev/shm");
  ASSERT_NE(shm, nullptr);
  EXPECT_EQ(shm->kind, MountOp::Kind::kBind);
  EXPECT_EQ(shm->source, HostInput().scratch_dir + "/shm");
  EXPECT_EQ(shm->attr_set & (MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC | MOUNT_ATTR_RDONLY),
            MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
  size_t fresh_tmpfs = 0;
  for (const MountOp& op : plan->mounts) fresh_tmpfs += op.kind == MountOp::Kind::kFs && op.fstype == "tmpfs";
  EXPECT_EQ(fresh_tmpfs, 1u);  // /dev (its device nodes need a file system without nodev)
  for (const char* read_only : {"proc/sys", "proc/sysrq-trigger", "proc/irq", "proc/bus"}) {
    const MountOp* op = FindMount(*plan, read_only);
    ASSERT_NE(op, nullptr) << read_only;
    EXPECT_EQ(op->kind, MountOp::Kind::kReadOnly) << read_only;
  }
  // Masks come after the mount they mask.
  auto index = [&](const std::string& target) {
    return std::find_if(plan->mounts.begin(), plan->mounts.end(),
                        [&](const MountOp& op) { return op.target == target; }) - plan->mounts.begin();
  };
  EXPECT_LT(index("proc"), index("proc/kcore"));
  EXPECT_LT(index("sys"), index("sys/firmware"));
}

TEST(MountPlanTest, DevIsMinimal) {
  auto plan = BuildMountPlan(HostInput());
  ASSERT_TRUE(plan.ok());
  std::vector<std::string> devices;
  for (const auto& op : plan->mounts) {
    if (op.kind == MountOp::Kind::kDevice) devices.push_back(op.target);
    // No host device tree is ever bound in.
    if (op.kind == MountOp::Kind::kBind) {
      EXPECT_NE(op.source.rfind("/dev", 0), 0u) << op.source;
    }
  }
  std::sort(devices.begin(), devices.end());
  EXPECT_EQ(devices, (std::vector<std::string>{"dev/full", "dev/null", "dev/random", "dev/tty",
                                               "dev/urandom", "dev/zero"}));
  EXPECT_EQ(FindMount(*plan, "dev/null")->device, makedev(1, 3));
  const MountOp* pts = FindMount(*plan, "dev/pts");
  ASSERT_NE(pts, nullptr);
  EXPECT_NE(pts->data.find("newinstance"), std::string::npos);
  // /dev itself must allow its device nodes (not nodev) but nothing set-uid or executable.
  const MountOp* dev = FindMount(*plan, "dev");
  ASSERT_NE(dev, nullptr);
  EXPECT_FALSE(dev->flags & MS_NODEV);
  EXPECT_TRUE(dev->flags & MS_NOSUID);
  EXPECT_TRUE(dev->flags & MS_NOEXEC);
}

TEST(MountPlanTest, EveryMountIsNosuid) {
  auto plan = BuildMountPlan(HostInput());
  ASSERT_TRUE(plan.ok());
  for (const auto& op : plan->mounts) {
    if (op.kind == MountOp::Kind::kBind) {
      EXPECT_TRUE(op.attr_set & MOUNT_ATTR_NOSUID) << op.description;
    } else if (op.kind == MountOp::Kind::kFs) {
      EXPECT_TRUE(op.flags & MS_NOSUID) << op.description;
      if (op.target != "dev" && op.target != "dev/pts") {  // these hold the device nodes
        EXPECT_TRUE(op.flags & MS_NODEV) << op.description;
      }
    }
  }
}

TEST(MountPlanTest, TargetsAreRelativeAndNormalized) {
  MountPlanInput in = HostInput();
  in.binds.push_back({"/srv/data", "/data/in", true, true});
  auto plan = BuildMountPlan(in);
  ASSERT_TRUE(plan.ok());
  for (const auto& op : plan->mounts) {
    ASSERT_FALSE(op.target.empty());
    EXPECT_NE(op.target[0], '/') << op.target;
    EXPECT_EQ(op.target.find(".."), std::string::npos) << op.target;
    EXPECT_EQ(op.target.find("//"), std::string::npos) << op.target;
  }
  const MountOp* data = FindMount(*plan, "data/in");
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(data->create, MountOp::Create::kDir);
  EXPECT_TRUE(data->attr_set & MOUNT_ATTR_RDONLY);
}

TEST(MountPlanTest, EphemeralLayerLivesInSizedScratch) {
  auto plan = BuildMountPlan(HostInput());
  ASSERT_TRUE(plan.ok());
  EXPECT_NE(plan->scratch_options.find("size=67108864"), std::string::npos);
  EXPECT_NE(plan->scratch_options.find("nr_inodes="), std::string::npos);
  EXPECT_EQ(plan->overlay_options,
            "lowerdir=lower,upperdir=/run/corral/scratch/upper,"
            "workdir=/run/corral/scratch/work");
  const MountOp* tmp = FindMount(*plan, "tmp");
  ASSERT_NE(tmp, nullptr);
  EXPECT_EQ(tmp->source, "/run/corral/scratch/tmp");
}

TEST(MountPlanTest, WorkspaceIsTheUpperLayer) {
  MountPlanInput in = HostInput();
  in.workspace_upper = "/srv/ws/upper";
  in.workspace_work = "/srv/ws/work";
  auto plan = BuildMountPlan(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->overlay_options,
            "lowerdir=lower,upperdir=/srv/ws/upper,workdir=/srv/ws/work");
  EXPECT_EQ(FindFile(*plan, "/run/corral/scratch/upper"), nullptr);
}

TEST(MountPlanTest, DiskCappedWorkspaceMountsItsDeviceUnderTheOverlay) {
  MountPlanInput in = HostInput();
  in.workspace_device = "/dev/loop7";
  auto plan = BuildMountPlan(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->layer_device, "/dev/loop7");
  EXPECT_EQ(plan->layer_dir, "/run/corral/scratch/layer");
  EXPECT_EQ(plan->layer_uid, 0x40000000u);
  EXPECT_EQ(plan->overlay_options,
            "lowerdir=lower,upperdir=/run/corral/scratch/layer/upper,"
            "workdir=/run/corral/scratch/layer/work");
  // A device and a directory at once is a contradiction.
  in.workspace_upper = "/srv/ws/upper";
  in.workspace_work = "/srv/ws/work";
  EXPECT_FALSE(BuildMountPlan(in).ok());
}

TEST(MountPlanTest, ImageLayersAreLowerThanTheSkeletonTopFirst) {
  MountPlanInput in = HostInput();
  in.host_image = false;
  in.image_layers = {"/srv/layers/top", "/srv/layers/base"};
  auto plan = BuildMountPlan(in);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  // Relative to the scratch dir, where the child mounts the overlay from.
  EXPECT_EQ(plan->overlay_options.rfind("lowerdir=lower:l/0:l/1,", 0), 0u) << plan->overlay_options;
  ASSERT_EQ(plan->layers.size(), 2u);
  EXPECT_EQ(plan->layers[0].source, "/srv/layers/top");
  EXPECT_EQ(plan->layers[0].target, "/run/corral/scratch/l/0");
  EXPECT_EQ(plan->layers[1].source, "/srv/layers/base");
  EXPECT_EQ(plan->layers[1].target, "/run/corral/scratch/l/1");
  // Their mountpoints are made in the scratch, before the binds.
  EXPECT_NE(FindFile(*plan, "/run/corral/scratch/l/1"), nullptr);
  // No host tree and no generated passwd: the image brings its own.
  EXPECT_EQ(FindMount(*plan, "usr"), nullptr);
  EXPECT_EQ(FindFile(*plan, "/run/corral/scratch/lower/etc/passwd"), nullptr);
  EXPECT_NE(FindFile(*plan, "/run/corral/scratch/lower/etc/hosts"), nullptr);
}

TEST(MountPlanTest, RejectsImagesWithoutLayersOrWithTooMany) {
  MountPlanInput in = HostInput();
  in.host_image = false;
  EXPECT_FALSE(BuildMountPlan(in).ok());  // an image needs layers
  in.image_layers.assign(kMaxImageLayers + 1, "/srv/layer");
  EXPECT_FALSE(BuildMountPlan(in).ok());
  in.image_layers.assign(kMaxImageLayers, "/srv/layer");  // control: the most it takes
  auto plan = BuildMountPlan(in);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_LT(plan->overlay_options.size(), 4096u) << "overlay options must fit in a page";
  in.image_layers = {"srv/relative"};
  EXPECT_FALSE(BuildMountPlan(in).ok());
  in = HostInput();  // the host image has no layers
  in.image_layers = {"/srv/layer"};
  EXPECT_FALSE(BuildMountPlan(in).ok());
}

TEST(MountPlanTest, RejectsPathsThatBreakOverlayOptions) {
  MountPlanInput in = HostInput();
  in.workspace_upper = "/srv/a,b/upper";
  in.workspace_work = "/srv/a,b/work";
  EXPECT_FALSE(BuildMountPlan(in).ok());
  // Positive control.
  in.workspace_upper = "/srv/ab/upper";
  in.workspace_work = "/srv/ab/work";
  EXPECT_TRUE(BuildMountPlan(in).ok());
}

TEST(MountPlanTest, RejectsRelativeScratch) {
  MountPlanInput in = HostInput();
  in.scratch_dir = "run/corral";
  EXPECT_FALSE(BuildMountPlan(in).ok());
}

// The sandbox's own cgroup at /sys/fs/cgroup, read-only, after /sys (which it covers).
TEST(MountPlanTest, AV2CgroupIsBoundReadOnlyOnSysFsCgroup) {
  MountPlanInput in = HostInput();
  in.cgroup_dirs = {{"/sys/fs/cgroup/corral/sb_x", ""}};
  auto plan = BuildMountPlan(in);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const MountOp* cgroup = FindMount(*plan, "sys/fs/cgroup");
  ASSERT_NE(cgroup, nullptr);
  EXPECT_EQ(cgroup->kind, MountOp::Kind::kBind);
  EXPECT_EQ(cgroup->source, "/sys/fs/cgroup/corral/sb_x");
  for (uint64_t attr : {MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC}) {
    EXPECT_TRUE(cgroup->attr_set & attr) << attr;
  }
  EXPECT_EQ(cgroup->create, MountOp::Create::kNone);  // sysfs has the directory; /sys is read-only
  EXPECT_GT(cgroup - plan->mounts.data(), FindMount(*plan, "sys") - plan->mounts.data());
}

TEST(MountPlanTest, V1ControllersSitInAReadOnlyRoomOnSysFsCgroup) {
  MountPlanInput in = HostInput();
  in.cgroup_dirs = {{"/sys/fs/cgroup/memory/corral/sb_x", "memory"}, {"/sys/fs/cgroup/cpu/corral/sb_x", "cpu"}};
  auto plan = BuildMountPlan(in);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  std::vector<const MountOp*> ops;
  for (const auto& op : plan->mounts) {
    if (op.target.rfind("sys/fs/cgroup", 0) == 0) ops.push_back(&op);
  }
  ASSERT_EQ(ops.size(), 4u);
  // The room is a directory of the scratch (no tmpfs of its own), with a mountpoint per
  // controller made in the skeleton.
  EXPECT_EQ(ops[0]->kind, MountOp::Kind::kBind);
  EXPECT_EQ(ops[0]->source, in.scratch_dir + "/cgroup");
  EXPECT_EQ(ops[0]->target, "sys/fs/cgroup");
  for (const char* dir : {"/cgroup", "/cgroup/memory", "/cgroup/cpu"}) {
    EXPECT_TRUE(std::any_of(plan->skeleton.begin(), plan->skeleton.end(), [&](const FileOp& op) {
      return op.kind == FileOp::Kind::kDir && op.path == in.scratch_dir + dir;
    })) << dir;
  }
  EXPECT_EQ(ops[1]->target, "sys/fs/cgroup/memory");
  EXPECT_EQ(ops[1]->source, "/sys/fs/cgroup/memory/corral/sb_x");
  EXPECT_EQ(ops[1]->create, MountOp::Create::kDir);
  EXPECT_TRUE(ops[1]->attr_set & MOUNT_ATTR_RDONLY);
  EXPECT_EQ(ops[2]->target, "sys/fs/cgroup/cpu");
  // The tmpfs turns read-only once the controllers' mountpoints are made in it.
  EXPECT_EQ(ops[3]->kind, MountOp::Kind::kSetAttr);
  EXPECT_EQ(ops[3]->target, "sys/fs/cgroup");
  EXPECT_EQ(ops[3]->attr_set, MOUNT_ATTR_RDONLY);
}

TEST(MountPlanTest, WithoutACgroupSysFsCgroupIsLeftAlone) {
  auto plan = BuildMountPlan(HostInput());
  ASSERT_TRUE(plan.ok());
  for (const auto& op : plan->mounts) EXPECT_NE(op.target.rfind("sys/fs/cgroup", 0), 0u) << op.target;
  EXPECT_EQ(FindMount(*plan, "sys/devices/system/cpu/online"), nullptr);
}

TEST(MountPlanTest, BadCgroupDirectoriesAreRejected) {
  for (std::vector<MountPlanCgroupDir> dirs : std::vector<std::vector<MountPlanCgroupDir>>{
           {{"/a", ""}, {"/b", "memory"}},  // v2 is one unnamed directory
           {{"/a", "memory"}, {"/b", ".."}},
           {{"/a", "memory/x"}},
           {{"relative", ""}}}) {
    MountPlanInput in = HostInput();
    in.cgroup_dirs = dirs;
    EXPECT_FALSE(BuildMountPlan(in).ok()) << dirs.back().source << " " << dirs.back().name;
  }
}

TEST(MountPlanTest, PinnedCpusAreWhatSysDevicesSystemCpuOnlineReads) {
  MountPlanInput in = HostInput();
  in.cpus_online = "1\n";
  auto plan = BuildMountPlan(in);
  ASSERT_TRUE(plan.ok());
  const FileOp* file = FindFile(*plan, "/run/corral/scratch/cpus-online");
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->content, "1\n");
  const MountOp* online = FindMount(*plan, "sys/devices/system/cpu/online");
  ASSERT_NE(online, nullptr);
  EXPECT_EQ(online->kind, MountOp::Kind::kBind);
  EXPECT_EQ(online->source, "/run/corral/scratch/cpus-online");
  EXPECT_TRUE(online->attr_set & MOUNT_ATTR_RDONLY);
}

}  // namespace
}  // namespace corral::rootfs
