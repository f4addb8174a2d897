#include "isolation/sandbox_launch.h"

#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <vector>

#include "common/file_util.h"
#include "isolation/cpu_affinity.h"
#include "isolation/idmap_userns.h"
#include "isolation/seccomp_program.h"
#include "rootfs/mount_plan.h"

namespace corral::isolation {
namespace {

// What kControl's init keeps, in the sandbox's own user namespace: to start commands as other
// users and to signal them.
constexpr uint64_t kControlCapabilities = (1ull << CAP_SETUID) | (1ull << CAP_SETGID) | (1ull << CAP_KILL);

StatusOr<rootfs::MountPlan> PlanMounts(const SandboxSpec& spec, const LaunchSite& site, uid_t base,
                                       const std::string& layer_device,
                                       const std::vector<cgroups::CgroupViewDir>& cgroup_view,
                                       const std::string& cpus_online) {
  rootfs::MountPlanInput input;
  input.scratch_dir = site.run_dir + "/scratch";
  input.scratch_bytes = spec.scratch_bytes();
  input.host_image = spec.host_image();
  input.image_layers = spec.image_layers();
  if (!layer_device.empty()) {
    input.workspace_device = layer_device;
  } else if (spec.workspace()) {
    input.workspace_upper = *spec.workspace() + "/upper";
    input.workspace_work = *spec.workspace() + "/work";
  }
  input.hostname = spec.hostname();
  input.nameservers = spec.nameservers();
  input.host_uid_base = base;
  input.host_gid_base = base;
  input.agent_uid = kAgentUid;
  for (const auto& dir : cgroup_view) input.cgroup_dirs.push_back({dir.host_dir, dir.name});
  input.cpus_online = cpus_online;
  for (const auto& bind : spec.binds()) {
    struct stat st;
    if (stat(bind.source.c_str(), &st) != 0) return ErrnoError("bind " + bind.source);
    input.binds.push_back({bind.source, bind.target, bind.read_only, S_ISDIR(st.st_mode), bind.if_exists});
  }
  return rootfs::BuildMountPlan(input);
}

// The plan but its mounts, CPUs and cgroup: identity, rlimits, and corral-init's argv and
// environment for the spec's init mode.
void FillProcess(const SandboxSpec& spec, const LaunchSite& site, uid_t base, LaunchPlan& plan) {
  plan.seccomp = PrecompiledSeccompPolicy();
  plan.hostname = spec.hostname();
  plan.host_uid_base = base;
  plan.host_gid_base = base;
  plan.uid = spec.uid();
  plan.gid = spec.gid();
  plan.cwd = spec.cwd();
  plan.rlimits.push_back({RLIMIT_CORE, 0});
  if (spec.limits().nofile) plan.rlimits.push_back({RLIMIT_NOFILE, *spec.limits().nofile});
  plan.init_fd = site.init_fd;
  plan.status_fd = site.status_fd;
  plan.env = spec.env();
  if (spec.init_mode() == InitMode::kControl) {
    plan.argv = {"corral-init", "--control"};
    if (!spec.loopback_ports().empty()) {
      plan.argv.push_back("--listeners=" + std::to_string(spec.loopback_ports().size()));
      plan.loopback_ports = spec.loopback_ports();
    }
    plan.die_with_parent = false;
    plan.init_capabilities = kControlCapabilities;
  } else {
    plan.argv = {"corral-init", "--"};
    plan.argv.insert(plan.argv.end(), spec.command().begin(), spec.command().end());
  }
}

}  // namespace

cgroups::CgroupLimits CgroupLimitsOf(const ResourceLimits& limits) {
  cgroups::CgroupLimits out;
  out.memory_max_bytes = limits.memory_bytes;
  out.pids_max = limits.pids;
  if (limits.cpu_millicores) out.cpu_quota_us = *limits.cpu_millicores * out.cpu_period_us / 1000;
  return out;
}

Status MakeRunDirs(const std::string& run_dir) {
  for (const std::string& dir : {run_dir, run_dir + "/scratch"}) {
    RETURN_IF_ERROR(MakeDirs(dir, 0755));
    if (chmod(dir.c_str(), 0755) != 0) return ErrnoError("chmod " + dir);
  }
  return Status();
}

StatusOr<PreparedLaunch> PrepareLaunch(const SandboxSpec& spec, const LaunchSite& site,
                                       cgroups::CgroupBackend& backend) {
  if (!spec.host_uid_base()) return Status::Error("launch: the spec has no host uid range", EINVAL);
  const uid_t base = *spec.host_uid_base();
  PreparedLaunch prepared;
  if (spec.layer_image()) {
    ASSIGN_OR_RETURN(prepared.layer, rootfs::AttachLoopDevice(*spec.layer_image()));
  }
  ASSIGN_OR_RETURN(std::vector<cgroups::CgroupViewDir> view, backend.ViewDirs(site.cgroup));
  std::vector<int> cpus;
  if (spec.limits().cpu_millicores) {
    ASSIGN_OR_RETURN(std::vector<int> allowed, AllowedCpus());
    cpus = ChooseCpus(*spec.limits().cpu_millicores, allowed, site.cpu_slot);
  }
  LaunchPlan& plan = prepared.plan;
  plan.cpu_mask = CpuMask(cpus);
  ASSIGN_OR_RETURN(plan.mounts, PlanMounts(spec, site, base, prepared.layer.path, view, CpuListText(cpus)));
  if (!plan.mounts.layers.empty()) {
    ASSIGN_OR_RETURN(prepared.idmap_userns, MakeIdmapUserns(base, base, kIdRangeSize));
    plan.mounts.idmap_userns_fd = prepared.idmap_userns.get();
  }
  FillProcess(spec, site, base, plan);

  RETURN_IF_ERROR(backend.Create(site.cgroup));
  Status placed = backend.SetLimits(site.cgroup, CgroupLimitsOf(spec.limits()));
  if (placed.ok()) {
    auto placement = backend.PrepareClone(site.cgroup, site.leaf);
    if (placement.ok()) prepared.placement = std::move(*placement);
    else placed = placement.status();
  }
  if (!placed.ok()) {
    (void)backend.Destroy(site.cgroup);
    return placed;
  }
  plan.cgroup_fd = prepared.placement.clone_fd();
  plan.cgroup_join_fds = prepared.placement.join_fds();
  plan.cgroup_leaf_fds = prepared.placement.leaf_fds();
  return prepared;
}

StatusOr<LaunchedSandbox> LaunchPrepared(PreparedLaunch& prepared) {
  const cgroups::ClonePlacement& placement = prepared.placement;
  auto launched = Launch(prepared.plan, [&](pid_t pid) { return placement.AfterNamespace(pid); });
  // The sandbox's mount holds the loop device now (autoclear); it detaches when that goes.
  prepared.layer.fd.reset();
  // The image layers' binds hold the mapping now.
  prepared.idmap_userns.reset();
  prepared.plan.mounts.idmap_userns_fd = -1;
  return launched;
}

}  // namespace corral::isolation
