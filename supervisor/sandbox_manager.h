// SandboxManager: every user's sandboxes and their commands, on the daemon's event loop.
//
// Lifecycle (DESIGN.md §4): created -> starting -> running -> stopping -> stopped, and
// destroying -> (row deleted). Kernel work (formatting a layer, launching, killing, copying)
// runs on the worker pool; the store is written on the loop before a request is answered, so
// an acknowledged request is a committed row. One lifecycle operation runs per sandbox at a
// time; another one meanwhile is a conflict (EBUSY).
//
// Ownership: every call takes the caller; a sandbox or command of another user answers ENOENT,
// exactly like one that does not exist. Errors carry an errno that the API maps to its codes:
// ENOENT not_found, EINVAL bad_request, EBUSY conflict, EDQUOT limit_exceeded, ERANGE
// stream_gap, EAGAIN unavailable, EPERM forbidden, EKEYEXPIRED budget_exhausted, others internal.
//
// Compute budgets: a sandbox keeps the budget of the token that last created or started it.
// Every kMeterInterval (and when it stops) the CPU time its cgroup used since the last reading
// is debited to its user's ledger (kind "compute", milliseconds); once the user's compute for
// the window reaches the budget's compute_ms, the sandbox is frozen, then stopped, its commands
// ending `budget_exhausted`, and start and exec are refused until the next window.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include "supervisor/budget.h"
#include "supervisor/command.h"
#include "supervisor/config.h"
#include "supervisor/loopback_services.h"
#include "supervisor/sandbox_host.h"
#include "supervisor/store.h"

namespace corral::supervisor {

struct Caller {
  std::string iss;
  std::string sub;
  bool admin = false;  // the admin socket: every sandbox
  Budget budget;       // the token's (no amounts: compute not limited, no model use)
};

// What the issuer allows this user (from the token); unset: the daemon's maxima.
struct UserCaps {
  std::optional<uint64_t> sandboxes;
  std::optional<uint64_t> memory_bytes;
  std::optional<uint64_t> cpu_millicores;
  std::optional<uint64_t> pids;
  std::optional<uint64_t> disk_bytes;
  std::optional<uint64_t> idle_timeout_s;
  std::optional<uint64_t> commands;
  std::optional<uint64_t> sessions;
  std::string egress_json;  // the token's limits.egress ({"domains", "ports", "cidrs"}); "" = none
  bool full_network = false;  // the scope unsafe:full_network: it may create "network": "full" sandboxes
};

struct CreateRequest {
  std::string name;
  std::string image = "host";
  std::optional<uint64_t> memory_bytes;
  std::optional<uint64_t> cpu_millicores;
  std::optional<uint64_t> pids;
  std::optional<uint64_t> disk_bytes;
  std::optional<uint64_t> idle_timeout_s;
  bool start = true;
  std::string snapshot;  // "snap_...": start from a copy of it
  std::string egress_json;  // its egress rules ({"domains", "ports", "cidrs"}); "" = the config's defaults
  std::string network = "loopback";  // "loopback" | "full" (supervisor/full_network.h; needs caps.full_network)
};

struct ForkRequest {
  std::string name;  // "": the source's
  bool start = true;
};

struct ExecSpec {
  std::string sandbox;
  std::vector<std::string> argv;
  std::vector<std::string> env;  // KEY=VALUE
  std::string cwd;               // "" = the user's home
  std::string user = "agent";    // agent | root
  bool stdin_open = false;
  bool pty = false;
  uint16_t rows = 24;
  uint16_t cols = 80;
  // The command's stdio pipes stay the daemon's: nothing inside, the command included, can
  // open them by path. For a stream the daemon trusts, an agent session's events: its tool
  // calls run as the same user, and could otherwise write into it through /proc/<pid>/fd/1.
  // Otherwise the pipes belong to the command's user, who may reopen them (/dev/stdout).
  bool private_stdio = false;
};

// The effective limits of a sandbox, as stored (limits_json) and shown by the API.
struct SandboxLimits {
  uint64_t memory_bytes = 0;
  uint64_t cpu_millicores = 0;
  uint64_t pids = 0;
  uint64_t disk_bytes = 0;
};
StatusOr<SandboxLimits> ParseLimits(const std::string& limits_json);

// For the file API: the sandbox's root as the host sees it, and the agent's host ids.
struct FileAccess {
  UniqueFd root;
  uid_t uid = 0;
  gid_t gid = 0;
};

class EgressProxy;
class FullNetwork;

class SandboxManager {
 public:
  template <typename T>
  using Done = std::function<void(StatusOr<T>)>;

  SandboxManager(boost::asio::io_context& io, boost::asio::thread_pool& pool, const DaemonConfig& config,
                 Store& store, SandboxHost& host, CommandObserver* observer);
  ~SandboxManager();

  // At start: adopt sandboxes whose init survived the previous daemon, clean up the rest.
  Status Recover();
  // Starts the idle-timeout sweeper.
  void StartTimers();
  // Before Recover: who serves the sandboxes' loopback (null: nobody; sandboxes get no listeners).
  void SetLoopbackServices(LoopbackServices* services) { loopback_ = services; }
  // The egress proxy (one of those services), told when a running sandbox's rules change; null
  // when egress.enabled is false.
  void SetEgressProxy(EgressProxy* proxy) { egress_ = proxy; }
  // Before Recover: full network mode (null: "network": "full" is refused as unavailable).
  void SetFullNetwork(FullNetwork* network) { network_ = network; }
  // Where compute budget refusals (a start) and stops (a running sandbox) are reported.
  void SetBudgetObserver(BudgetObserver* observer) { budget_observer_ = observer; }
  // Stops timers and lets go of every sandbox (they keep running for the next daemon).
  void Detach();

  void Create(const Caller& caller, const UserCaps& caps, CreateRequest request, Done<SandboxRow> done);
  // Changes a sandbox's egress rules (JSON as in CreateRequest; a field left out keeps its
  // current value); a running sandbox's next proxy connection is decided by them.
  StatusOr<SandboxRow> SetEgress(const Caller& caller, const UserCaps& caps, const std::string& id,
                                 const std::string& egress_json);
  StatusOr<std::vector<SandboxRow>> List(const Caller& caller);
  StatusOr<SandboxRow> Get(const Caller& caller, const std::string& id);
  void Start(const Caller& caller, const std::string& id, Done<SandboxRow> done);
  void Stop(const Caller& caller, const std::string& id, Done<SandboxRow> done);
  void Destroy(const Caller& caller, const std::string& id, Done<bool> done);

  // Snapshots: a copy of a sandbox's writable layer, kept after the sandbox is gone. A running
  // sandbox is frozen for the copy (commands pause, then go on). Fork: a new sandbox of the same
  // user from a copy of this one's layer, its files moved to the new sandbox's own uid range.
  void Snapshot(const Caller& caller, const std::string& id, Done<SnapshotRow> done);
  void Fork(const Caller& caller, const UserCaps& caps, const std::string& id, ForkRequest request,
            Done<SandboxRow> done);
  StatusOr<std::vector<SnapshotRow>> ListSnapshots(const Caller& caller);
  StatusOr<SnapshotRow> GetSnapshot(const Caller& caller, const std::string& id);
  void DeleteSnapshot(const Caller& caller, const std::string& id, Done<bool> done);

  StatusOr<std::shared_ptr<Command>> Exec(const Caller& caller, const UserCaps& caps, const ExecSpec& spec);
  // A command that is live (or recently ended and still held), for attach/stdin/signal.
  StatusOr<std::shared_ptr<Command>> FindCommand(const Caller& caller, const std::string& command_id);
  StatusOr<CommandRow> GetCommand(const Caller& caller, const std::string& sandbox_id,
                                  const std::string& command_id);
  StatusOr<std::vector<CommandRow>> ListCommands(const Caller& caller, const std::string& sandbox_id);

  StatusOr<FileAccess> OpenFiles(const Caller& caller, const std::string& sandbox_id);
  // A request touched the sandbox: push its idle deadline back.
  void Touch(const std::string& sandbox_id);

  // Debits the CPU time of every running sandbox used since the last reading, and stops those
  // whose user's compute budget is spent (also run by the timers; public for tests).
  void MeterCompute();
  // Compute the ledger does not hold yet: for each running sandbox of the user, the whole CPU
  // milliseconds its cgroup counted since its last debit (what the meter debits next). Usage
  // reports add it to the ledger's sums, so they show CPU time up to the moment asked; once the
  // meter debits it, it is here no more (no time is counted twice).
  std::map<std::string, int64_t> UnmeteredCompute(const std::string& iss, const std::string& sub);
  // CPU milliseconds this daemon debited since it started, plus every running sandbox's
  // UnmeteredCompute: the compute counter of /metrics.
  int64_t ComputeCountedMs();

  // For metrics.
  std::map<std::string, int64_t> CountByState();
  int64_t running_commands() const;
  // The commands of a sandbox that have not ended (those adopted at recovery included).
  std::vector<std::shared_ptr<Command>> LiveCommands(const std::string& sandbox_id) const;

 private:
  struct Live;

  void StoreActivity(const Live& live);
  // The row with the activity the daemon holds and has not written yet.
  void Fresh(SandboxRow& row) const;

  // Where a new sandbox's layer comes from: a snapshot's image, or another sandbox's layer.
  struct LayerSource {
    std::string snapshot_id;       // copy this snapshot's image, or
    std::string sandbox_id;        // this sandbox's layer (frozen while it runs)
    SandboxShape sandbox_shape;    // (to make its layer if it never ran)
    pid_t sandbox_init_pid = 0;    // > 0 while it runs
    int64_t uid_base = 0;          // the range the files belong to
  };

  StatusOr<SandboxRow> Owned(const Caller& caller, const std::string& id);
  // The rules a sandbox gets (as stored): `requested` ("" = the config's defaults, narrowed to
  // the token's caps) held against the config's and the token's caps.
  // `current` (stored JSON) gives the fields `requested` leaves out, when set.
  StatusOr<std::string> EgressRulesFor(const UserCaps& caps, const std::string& requested,
                                       const std::string& current = "");
  // Whether this caller may have a sandbox with this network mode (EINVAL: no such mode; EPERM:
  // not with this token; EAGAIN: not on this daemon).
  Status CheckNetwork(const Caller& caller, const UserCaps& caps, const std::string& network) const;
  StatusOr<SnapshotRow> OwnedSnapshot(const Caller& caller, const std::string& id);
  StatusOr<SandboxRow> InsertSandbox(const Caller& caller, const UserCaps& caps, const SandboxRow& row);
  void FillLayer(SandboxRow row, LayerSource source, bool start, Done<SandboxRow> done);
  void RemoveOrphanSnapshots();
  StatusOr<SandboxLimits> Resolve(const UserCaps& caps, const CreateRequest& request) const;
  SandboxShape ShapeOf(const SandboxRow& row) const;
  void DoStart(SandboxRow row, Done<SandboxRow> done);
  // immediate: no SIGTERM and grace period (the sandbox is already frozen or dead).
  void DoStop(const std::string& id, bool by_request, std::function<void(Status)> done, bool immediate = false);
  // The ledger's compute for the caller's current window against the budget; EKEYEXPIRED when
  // it is spent.
  Status CheckCompute(const std::string& iss, const std::string& sub, const Budget& budget);
  void Meter(Live& live);
  // Debits what `stats` counted above the sandbox's last debit.
  void Meter(Live& live, const cgroups::CgroupStats& stats);
  // Whole CPU milliseconds of a running sandbox not debited yet.
  int64_t UnmeteredMs(const Live& live);
  // What a stop reads from the kernel before the cgroups go (on the worker pool): everything in
  // the sandbox is killed first, so the figures are final.
  struct StopFigures {
    StatusOr<cgroups::CgroupStats> sandbox = Status::Error("not read", ENOENT);
    std::vector<StatusOr<cgroups::CgroupStats>> commands;  // one per seq asked for
    uint64_t killed_us = 0;                                // MonotonicMicros() after the kill
  };
  StopFigures KillAndRead(const std::string& id, const std::vector<uint64_t>& seqs);
  // Stores a command's outcome `lost` (the daemon could not learn its end), with the figures its
  // cgroup still held when they could be read.
  void StoreLost(CommandRow& row, const StatusOr<cgroups::CgroupStats>& figures);
  void ComputeExhausted(const std::string& id, int64_t spent_ms, int64_t budget_ms);
  void OnStarted(SandboxRow row, SandboxProcess process, std::vector<UniqueFd> listeners);
  void WatchControl(const std::shared_ptr<Live>& live);
  void WatchInit(const std::shared_ptr<Live>& live);
  void OnControlMessage(const std::shared_ptr<Live>& live, InitMessage message);
  void OnInitGone(const std::string& id);
  void AdoptCommands(const std::shared_ptr<Live>& live, std::map<uint64_t, HeldCommand> held);
  void OnCommandFinished(const std::string& sandbox_id, uint64_t seq, Command& finished);
  void SweepIdle();
  void SetState(SandboxRow& row, const std::string& state);
  Command::Context CommandContext();

  boost::asio::io_context& io_;
  boost::asio::thread_pool& pool_;
  const DaemonConfig& config_;
  Store& store_;
  SandboxHost& host_;
  CommandObserver* observer_;
  LoopbackServices* loopback_ = nullptr;
  EgressProxy* egress_ = nullptr;
  BudgetObserver* budget_observer_ = nullptr;
  FullNetwork* network_ = nullptr;
  std::map<std::string, std::shared_ptr<Live>> live_;  // running sandboxes by id
  std::map<std::string, bool> busy_;                   // a lifecycle operation is under way
  std::map<std::string, std::shared_ptr<Command>> commands_;  // by command id, until they end
  std::map<std::string, std::shared_ptr<Command>> recent_;    // ended, kept for late attaches
  std::deque<std::string> recent_order_;
  boost::asio::steady_timer idle_timer_;
  int64_t compute_debited_ms_ = 0;  // since this daemon started (ComputeCountedMs)
  bool detached_ = false;
};

}  // namespace corral::supervisor
