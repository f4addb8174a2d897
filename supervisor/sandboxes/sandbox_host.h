// SandboxHost: the kernel side of a persistent sandbox's life, in blocking calls (the daemon
// runs them on its worker pool, never on the event loop).
//
// On the host a sandbox `sb_x` is:
//   <state_dir>/sandboxes/sb_x/disk.img   its writable layer (the user's files: survives stop
//                          or layer/      and start): a sparse ext4 image of the disk cap, or
//                                         directories capped by a project quota (writable_layer.h)
//   <run_dir>/sandboxes/sb_x/ctl          corral-init's control socket (only while running)
//   <cgroup>/<parent>/sb_x/               limits for the whole sandbox; the root of its cgroup
//                                         namespace, shown read-only at /sys/fs/cgroup inside
//            <parent>/sb_x/init           corral-init
//            <parent>/sb_x/cmd-<seq>      one per command (its own CPU and memory figures, and a
//                                         copy of the sandbox's limits for programs to read)
//   where <parent> is the CgroupPlacement's (cgroup_placement.h): daemon.cgroup_parent, else under
//   systemd its scope system.slice/corrald-sandboxes.scope, else corral. A sandbox that an older
//   corrald started elsewhere (corral/sb_x) is managed where it is until it stops.
// and, while it runs, its processes and (an image's) a loop device (autoclear: it goes when the
// sandbox's mounts go). Everything else (mounts, namespaces) lives and dies with its processes.
//
// Host uids: root inside is kUidFirst + k * 65536 (the store hands out k), a range disjoint
// from `corral run`'s ephemeral and workspace ranges.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cgroups/cgroup_backend.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "isolation/sandbox_spec.h"
#include "supervisor/config.h"
#include "supervisor/sandboxes/writable_layer.h"

namespace corral::supervisor {

inline constexpr int64_t kUidFirst = 0xC0000000;
inline constexpr int64_t kUidStep = 65536;
inline constexpr int64_t kUidSlots = 16382;  // the last range would reach uid -1
inline constexpr uint64_t kSandboxOpenFiles = 65536;  // RLIMIT_NOFILE in a sandbox (at most corrald's)

// RLIMIT_NOFILE for a sandbox: not the daemon's own (raised) limit but kSandboxOpenFiles, plenty
// for compilers and package managers, unless the daemon's hard limit is lower (raising it needs
// CAP_SYS_RESOURCE on the host).
uint64_t SandboxOpenFiles();

// A running sandbox as the host sees it.
struct SandboxProcess {
  pid_t pid = -1;              // corral-init, host pid
  uint64_t start_time = 0;     // /proc/PID/stat field 22, to tell a reused pid apart
  UniqueFd pidfd;              // readable when init exits
  UniqueFd control;            // connected to corral-init's control socket
  bool child = false;          // our child (reap with waitid) or adopted after a restart
  uint32_t init_version = 0;   // the init protocol it speaks (its hello says; 0 until then)
};

class SandboxHost {
 public:
  // The sandboxes' cgroup parent is daemon.cgroup_parent, or corral when that is unset, until
  // SetCgroupPlacement says otherwise.
  SandboxHost(const DaemonConfig& config, cgroups::CgroupBackend& backend, std::string init_path);

  // Where new sandboxes' cgroups go (<parent>/<id>), and the parents older corralds used, where
  // Stop() and Start() also remove what a sandbox left. `remove_empty_parent`: Stop() removes the
  // parent once it is empty (not systemd's scope). Call before the first sandbox.
  void SetCgroupPlacement(std::string parent, std::vector<std::string> legacy_parents, bool remove_empty_parent);
  // Called before each start: makes sure the parent can take a sandbox (the systemd scope runs).
  void SetParentKeeper(std::function<Status()> keep) { keep_parent_ = std::move(keep); }
  const std::string& cgroup_parent() const { return cgroup_parent_; }
  const std::vector<std::string>& legacy_cgroup_parents() const { return legacy_cgroup_parents_; }

  // The kind of writable layer new sandboxes get (an existing one keeps its own). kImage until
  // corrald has looked at the state dir's file system (daemon start: [sandbox] disk_quota).
  void SetNewLayerKind(LayerKind kind) { new_layer_kind_ = kind; }
  LayerKind new_layer_kind() const { return new_layer_kind_; }

  // Makes the writable layer the spec names (spec.layer_image(): an ext4 image formatted to the
  // spec's disk limit; spec.workspace(): a project-quota directory, whose cap is set again) with
  // its root owned by root inside, if it does not exist yet.
  Status Prepare(const isolation::SandboxSpec& spec);
  // Starts corral-init in a new sandbox `id` (its cgroup, control socket and run directory are
  // named by it) and connects to it. `spec`: kControl, with the host uid base and the
  // layer (SandboxLayer(id)) set; PrepareLaunch (isolation/sandbox_launch.h) does the assembly.
  StatusOr<SandboxProcess> Start(const std::string& id, const isolation::SandboxSpec& spec);
  // Finds a sandbox that a previous daemon started: init alive with the same start time.
  // Returns nullopt when it is gone (then call Cleanup). Its cgroup is where its init is (from
  // /proc/PID/cgroup: <somewhere>/<id>/init), which an older corrald may have chosen differently
  // (corral/<id>): SandboxCgroup() answers that place until the sandbox stops.
  StatusOr<std::optional<SandboxProcess>> Adopt(const std::string& id, pid_t pid, uint64_t start_time);
  // Kills everything in the sandbox, waits for init to exit, and removes its cgroups and
  // control socket. The writable layer stays. Safe on a sandbox that is already gone.
  Status Stop(const std::string& id, SandboxProcess* process);
  // Stop, then removes the writable layer too.
  Status Destroy(const std::string& id);
  // Copies the layer of sandbox `id` to `to` (writable_layer.h's CopyLayer). When it runs
  // (init_pid > 0) its cgroup is frozen and its file systems synced first, so the copy is what
  // the sandbox last wrote, then thawed: a consistent copy, not a torn one.
  Status CopySandboxLayer(const std::string& id, pid_t init_pid, const WritableLayer& to);
  // Thaws a sandbox that a snapshot left frozen (the daemon died during the copy).
  Status Thaw(const std::string& id);
  // A running sandbox's memory, CPU and pids limits, now (a claimed pooled sandbox's), and a
  // project-quota layer's disk cap (an image's size stays).
  Status SetLimits(const std::string& id, int64_t uid_base, const isolation::ResourceLimits& limits);
  // The CPU time its cgroup counted so far.
  StatusOr<uint64_t> CpuUsageUsec(const std::string& id);

  // The sandbox's cgroup: where its running init is, else <cgroup_parent>/<id>.
  std::string SandboxCgroup(const std::string& id) const;
  // Per-command cgroups.
  std::string CommandCgroup(const std::string& id, uint64_t seq) const;
  // Makes <sandbox>/cmd-<seq> with the sandbox's memory and pids limits repeated in it (the
  // sandbox's own still bound the whole; the copy is what a program reading its own cgroup's
  // files finds; not the CPU quota, see the .cc), and
  // returns the files the command's process writes "0" to, to join it (OpenSelfJoin).
  StatusOr<std::vector<UniqueFd>> CreateCommandCgroup(const std::string& id, uint64_t seq);
  // Kills what is left of the command's tree, returns its figures, removes the cgroup (a cgroup
  // that cannot be removed is logged and left for the sandbox's stop: the figures still count).
  StatusOr<cgroups::CgroupStats> FinishCommandCgroup(const std::string& id, uint64_t seq);
  // The two halves of the usual case, where nothing is left: its figures (quick reads), and the
  // removal of the empty cgroup, which can wait until the outcome is out.
  StatusOr<cgroups::CgroupStats> CommandCgroupStats(const std::string& id, uint64_t seq);
  Status RemoveCommandCgroup(const std::string& id, uint64_t seq);

  // Sandbox `id`'s layer: the one on disk (.../sandboxes/<id>/disk.img or layer/), else where a
  // new one of `kind` (default: new_layer_kind()) goes.
  WritableLayer SandboxLayer(const std::string& id, std::optional<LayerKind> kind = std::nullopt) const;
  // A snapshot's copy: the one on disk (<state_dir>/snapshots/<id>.img or <id>.layer/), else
  // where a new one of `kind` goes.
  WritableLayer SnapshotLayer(const std::string& snapshot_id, LayerKind kind) const;
  std::string ControlPath(const std::string& id) const;

  cgroups::CgroupBackend& backend() { return backend_; }
  // A host file for the specs of the sandboxes started from now on to bind read-only at
  // /run/corral/bin/corral-mcp ("" = none; SandboxManager::SpecOf adds McpBind()). It and its directories must be
  // reachable by the sandboxes' uids. Kept as its real path (binds go through no symlink).
  void SetMcpBinary(const std::string& path);
  // Its read-only bind at /run/corral/bin/corral-mcp, or nullopt when there is none.
  std::optional<isolation::BindMount> McpBind() const;
  // Claude Code for image sandboxes (claude_runtime.h): the staged runtime directory and the
  // binary's real path ("" = none: sessions in image sandboxes are refused).
  void SetClaudeRuntime(std::string runtime_dir, std::string binary);
  bool HasClaudeRuntime() const { return !claude_runtime_.empty(); }
  // Their read-only binds at kClaudeRuntimeInSandbox and kClaudeBinaryInSandbox (none without a
  // runtime). Host sandboxes need none: they have the host's /usr.
  std::vector<isolation::BindMount> ClaudeBinds() const;

 private:
  // Destroys <legacy parent>/<id> for every legacy parent but `except`, and the parents once
  // they are empty.
  Status RemoveLegacyCgroups(const std::string& id, const std::string& except);

  const DaemonConfig& config_;
  cgroups::CgroupBackend& backend_;
  std::string cgroup_parent_;
  std::vector<std::string> legacy_cgroup_parents_;
  bool remove_empty_parent_ = true;
  std::function<Status()> keep_parent_;
  // Running sandboxes whose cgroup is not <cgroup_parent_>/<id> (adopted at an older place).
  mutable std::mutex placed_mu_;
  std::map<std::string, std::string> placed_;
  // corral-init in one sealed memfd that every sandbox executes, so its pages are in memory once
  // (InitProgram): read at the first start and kept for the daemon's life, so a package upgrade
  // reaches new sandboxes when corrald restarts, as its own code does.
  StatusOr<int> InitProgram();
  std::mutex init_mu_;
  UniqueFd init_fd_;
  std::string init_path_;
  LayerKind new_layer_kind_ = LayerKind::kImage;
  std::string mcp_binary_;
  std::string claude_runtime_;
  std::string claude_binary_;
};

// /proc/PID/stat field 22 (start time in clock ticks since boot); 0 when the process is gone.
uint64_t ProcessStartTime(pid_t pid);
// /proc/PID/stat field 3 (R, S, D, Z, ...); '?' when the process is gone.
char ProcessState(pid_t pid);

// Connects to a control socket (SOCK_SEQPACKET), close-on-exec.
StatusOr<UniqueFd> ConnectControl(const std::string& path);

}  // namespace corral::supervisor
