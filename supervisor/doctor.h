// `corral doctor`: does this host have what corrald needs? Each check says OK, WARN (it works,
// degraded: what is lost) or FAIL (corrald cannot run: what to do). The CLI prints them (or JSON)
// and exits 1 on any FAIL; corrald runs the same checks when it starts, logs each WARN and FAIL,
// and refuses to start on a FAIL with the same message.
//
// Checks that need a kernel feature try it (in a forked child, so nothing of it stays), rather
// than trusting version numbers: a kernel whose seccomp, sysctls or LSM switched a feature off
// fails the check as it would fail corrald. They fork: call RunDoctor before the process starts
// threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "supervisor/sandboxes/layer_kind.h"

namespace corral::supervisor {

enum class CheckLevel { kOk, kWarn, kFail };

struct CheckResult {
  std::string name;    // "kernel", "user_namespaces", ...
  CheckLevel level = CheckLevel::kOk;
  std::string detail;  // what was found; for WARN what is lost; for FAIL what to do
};

// Whether this process's effective capabilities hold CAP_SYS_RESOURCE (/proc/self/status).
bool HasCapSysResource();

struct DoctorOptions {
  std::string proc_root = "/proc";          // sysctls are read under <proc_root>/sys
  std::string kernel_release;               // "" = uname's
  std::string cgroup_mount = "/sys/fs/cgroup";
  // daemon.cgroup_parent; "" (unset) probes "corral", corrald's parent outside systemd. (corrald
  // itself passes the parent it placed sandboxes under: cgroup_placement.h.)
  std::string cgroup_parent;
  std::string state_dir = "/var/lib/corral";  // free space and inodes (its nearest existing parent)
  std::string claude = "claude";            // the agent's binary: a path, or a name to find in PATH
  std::string claude_version;               // the version the session runner is tested with
  std::string skopeo = "skopeo";            // images.skopeo: what pulls run
  bool probe_namespaces = true;             // false: skip the checks that fork (unit tests)
  uint64_t max_sandboxes = 1000;            // sandbox.max_sandboxes: the density the host must hold
  DiskQuotaMode disk_quota = DiskQuotaMode::kAuto;  // sandbox.disk_quota: how layers are capped
  std::string sys_root = "/sys";            // /sys/block/loop*: the loop devices attached
  // Whether this process may raise its hard limits (CAP_SYS_RESOURCE): as corrald would, since
  // they run as the same user with the same capabilities. (HasCapSysResource() by default.)
  bool may_raise_limits = HasCapSysResource();
};

// What corrald holds per running sandbox: its descriptors (init's control connection and pidfd,
// the loopback listeners and their connections, a command's pipes), and the kernel objects one
// sandbox takes (namespaces: a second user namespace for an image's idmapped layers).
constexpr uint64_t kDescriptorsPerSandbox = 16;
// The open files corrald raises its limits to at start (hard and soft; at most fs.nr_open).
constexpr uint64_t kDaemonOpenFiles = 1048576;
constexpr uint64_t kUserNamespacesPerSandbox = 2;

// Below these, the state directory check fails; below the WARN ones, it warns.
constexpr uint64_t kDoctorFailFreeBytes = 256ull << 20;
constexpr uint64_t kDoctorWarnFreeBytes = 2ull << 30;
constexpr uint64_t kDoctorFailFreeInodes = 1000;
constexpr uint64_t kDoctorWarnFreeInodes = 50000;

std::vector<CheckResult> RunDoctor(const DoctorOptions& options);

// The individual checks (for tests; RunDoctor runs them all, in this order).
CheckResult CheckKernel(const std::string& release);
CheckResult CheckUserNamespaces(const DoctorOptions& options);
CheckResult CheckOverlayfs(const DoctorOptions& options);
CheckResult CheckCgroups(const DoctorOptions& options);
CheckResult CheckSeccomp();
CheckResult CheckOpenat2();
CheckResult CheckLandlock();
CheckResult CheckPidfdAndClone3();
CheckResult CheckNetworkNamespaces(const DoctorOptions& options);
CheckResult CheckStateDir(const std::string& state_dir);
CheckResult CheckClaudeCode(const std::string& claude, const std::string& expected_version);
// Images: an idmapped bind of the state dir's file system as an overlay's lower layer (WARN, not
// FAIL, when it does not work: the host image still does), and skopeo for pulls.
CheckResult CheckImages(const DoctorOptions& options);
// Density (doctor_density.cc): room for max_sandboxes running at once. open_files: corrald's
// descriptors (it raises its limits to kDaemonOpenFiles, or fs.nr_open when lower);
// namespace_limits: the user.max_*_namespaces sysctls and kernel.pid_max; layers: how a new
// writable layer is capped (a project quota or an ext4 image, by sandbox.disk_quota and the state
// dir's file system: FAIL when "project" cannot be had) and the loop devices attached;
// cgroup_join: see below.
CheckResult CheckOpenFiles(const DoctorOptions& options);
CheckResult CheckNamespaceLimits(const DoctorOptions& options);
CheckResult CheckLayers(const DoctorOptions& options);
// How processes join their cgroups, and whether that waits for an RCU grace period (v2 without
// the favordynmods mount option: each command's start). Never a warning: a speed note.
CheckResult CheckCgroupJoin(const DoctorOptions& options);

// The Claude Code version the session runner is tested with (dist/claude-code-version).
const char* TestedClaudeCodeVersion();

// `path`, or its nearest parent that exists (the state dir before the first start).
std::string NearestExistingDir(const std::string& path);

const char* CheckLevelName(CheckLevel level);  // "OK", "WARN", "FAIL"
bool AnyFailed(const std::vector<CheckResult>& results);
// One line per check: "OK    kernel          6.1.0-27-amd64".
std::string FormatDoctor(const std::vector<CheckResult>& results);
// {"ok": bool, "checks": [{"name", "level": "ok|warn|fail", "detail"}]}
std::string DoctorJson(const std::vector<CheckResult>& results);

}  // namespace corral::supervisor
