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
//
// The manager's methods live in one file per concept: sandbox_manager.cc (ownership, activity,
// egress rules, timers, metering rounds, metrics), lifecycle.cc (create, start, stop, destroy,
// init's control connection), snapshots.cc (snapshots and forks), exec.cc (commands),
// recovery.cc (adopting and cleaning up at start). What a user may have is admission.h; the CPU
// time debited to the ledger is compute_meter.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include "supervisor/sandboxes/admission.h"
#include "supervisor/relay/budget.h"
#include "supervisor/commands/command.h"
#include "supervisor/sandboxes/compute_meter.h"
#include "supervisor/config.h"
#include "supervisor/loopback_services.h"
#include "supervisor/sandboxes/sandbox_host.h"
#include "supervisor/sandboxes/sandbox_types.h"
#include "supervisor/sandboxes/warm_pool.h"
#include "supervisor/store/store.h"
#include "supervisor/webhooks/webhook_outbox.h"

namespace corral::supervisor {

// For the file API: the sandbox's root as the host sees it, and the agent's host ids.
struct FileAccess {
  UniqueFd root;
  uid_t uid = 0;
  gid_t gid = 0;
};

class EgressProxy;
class SecretVault;
class TrustBundles;
class FullNetwork;
class ImageService;

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
  // The egress proxy (one of those services): handed a sandbox's rules when it starts or is
  // adopted, and again when they change; null when egress.enabled is false.
  void SetEgressProxy(EgressProxy* proxy) { egress_ = proxy; }
  // Before Recover: secrets (issue 21; sandbox_secrets.cc): the vault that knows them and the
  // trust bundles of the sandboxes that name some (both null when secrets.key_file is unset: a
  // sandbox naming secrets is then refused).
  void SetSecrets(SecretVault* vault, const TrustBundles* trust) {
    vault_ = vault;
    trust_ = trust;
  }
  SecretVault* secret_vault() const { return vault_; }
  // Before Recover: full network mode (null: "network": "full" is refused as unavailable).
  void SetFullNetwork(FullNetwork* network) { network_ = network; }
  // Before Recover: the images sandboxes may be made of (null: only "host").
  void SetImages(ImageService* images) { images_ = images; }
  // Whether this node is drained (supervisor/fleet/node_registry.h): a drained node makes no new
  // sandboxes (creates and forks are unavailable); unset: never.
  void SetDrained(std::function<bool()> drained) { drained_ = std::move(drained); }
  // Where compute budget refusals (a start) and stops (a running sandbox) are reported.
  void SetBudgetObserver(BudgetObserver* observer) { meter_.SetObserver(observer); }
  // Before Recover: the webhook outbox its lifecycle events (and compute budgets spent) are
  // recorded in, with the event log's rows (null: none).
  void SetWebhooks(WebhookOutbox* webhooks) { webhooks_ = webhooks; }
  // Stops timers and lets go of every sandbox (they keep running for the next daemon; its
  // recovery destroys the pooled ones).
  void Detach();
  // [pool]: resolves pool.sizes to shapes, destroys pooled sandboxes no longer wanted and makes
  // the missing ones in the background (after Recover, and after a config reload).
  void ReconcilePool();
  // Pooled sandboxes ready to be claimed, and those being made.
  size_t pool_ready() const { return warm_pool_.ready(); }
  size_t pool_filling() const { return warm_pool_.filling(); }

  void Create(const Caller& caller, const UserCaps& caps, CreateRequest request, Done<SandboxRow> done);
  // Changes a sandbox's egress rules (a list the change leaves out keeps its current value); a
  // running sandbox's next proxy connection is decided by them.
  StatusOr<SandboxRow> SetEgress(const Caller& caller, const UserCaps& caps, const std::string& id,
                                 const EgressRulesChange& change);
  // Sets the secrets a sandbox may use, by name (none: []); a running sandbox's next proxy
  // connection and next command see them. Its trust store holds corral's CA only if it named
  // secrets when it started: `ca_trusted` says whether TLS to the bound hosts verifies now
  // (true for a stopped sandbox, whose next start sees to it).
  StatusOr<SandboxRow> SetSecretNames(const Caller& caller, const std::string& id, std::vector<std::string> names,
                                      bool& ca_trusted);
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
  // Replaces the files of a stopped (or created) sandbox with a snapshot's of the same user and
  // image (restore.cc): EBUSY while it runs or an operation holds it, EINVAL for another image;
  // the event sandbox.restored. A copy that fails leaves the sandbox an empty layer (EIO).
  void Restore(const Caller& caller, const std::string& id, const std::string& snapshot_id, Done<SandboxRow> done);
  StatusOr<std::vector<SnapshotRow>> ListSnapshots(const Caller& caller);
  StatusOr<SnapshotRow> GetSnapshot(const Caller& caller, const std::string& id);
  void DeleteSnapshot(const Caller& caller, const std::string& id, Done<bool> done);

  StatusOr<std::shared_ptr<Command>> Exec(const Caller& caller, const UserCaps& caps, const ExecSpec& spec);
  // A command that is live (or recently ended and still held), for attach/stdin/signal.
  StatusOr<std::shared_ptr<Command>> FindCommand(const Caller& caller, const std::string& command_id);
  StatusOr<CommandRow> GetCommand(const Caller& caller, const std::string& sandbox_id,
                                  const std::string& command_id);
  StatusOr<std::vector<CommandRow>> ListCommands(const Caller& caller, const std::string& sandbox_id);

  // Moving stopped sandboxes, and snapshots, between the nodes of a fleet (moves.cc; a drain that
  // moves them: api/sandbox_mover.h). On the node that has them: Movable, the ids of its stopped
  // sandboxes no operation holds and of its snapshots no sandbox is being made of; PackForMove
  // packs one's layer into a file (layer_move.h), the sandbox or snapshot busy (409) until
  // EndMoveOut, which asks the catalog: moved (true), its files here go; not (false), it is this
  // node's as before; the store unreadable, an error: ask again. On the node it moves to:
  // ReceiveMoveData writes a part of the file at `offset` (0 begins it anew; any other must be
  // the file's size: ERANGE) if it matches its `sha256` (EINVAL), the new size; AdoptMove checks the whole against the manifest
  // (EINVAL), unpacks it, moves a sandbox's owners to a free uid range here and takes the row
  // (store.h TakeSandbox, TakeSnapshot; EBUSY when it is no longer stopped where it was); EAGAIN
  // when this node is drained or lacks the image.
  StatusOr<std::vector<std::string>> Movable();
  void PackForMove(const std::string& id, Done<MovePack> done);
  StatusOr<bool> EndMoveOut(const MovePack& pack);
  void ReceiveMoveData(const std::string& id, uint64_t offset, const std::string& sha256, std::string data,
                       Done<uint64_t> done);
  void AdoptMove(const std::string& id, const MoveManifest& manifest, Done<Moved> done);

  StatusOr<FileAccess> OpenFiles(const Caller& caller, const std::string& sandbox_id);
  // Ports a running sandbox shows (preview URLs; sandbox_ports.cc; api/port_proxy.h). OpenPort:
  // EBUSY when the sandbox is not running, EINVAL for a port out of range or one of corral's own
  // loopback services; a new port is the event port.opened. ClosePort (ENOENT when not shown)
  // and a stop of the sandbox (every port) are port.closed. SignPort: the signature of a URL for
  // a shown port until `exp` (port_urls.h).
  StatusOr<PortRow> OpenPort(const Caller& caller, const std::string& id, int64_t port, bool is_public);
  StatusOr<std::vector<PortRow>> ListPorts(const Caller& caller, const std::string& id);
  Status ClosePort(const Caller& caller, const std::string& id, int64_t port);
  StatusOr<std::string> SignPort(const Caller& caller, const std::string& id, int64_t port, int64_t exp);
  // The port proxy's view, which takes no caller (it decides itself who may: a token of the
  // owner, a signature, or a public port): the sandbox and its shown port. ENOENT when there is
  // no such sandbox on this node or it does not show that port; EAGAIN when it is not running.
  struct PortTarget {
    SandboxRow sandbox;
    PortRow port;
  };
  StatusOr<PortTarget> FindPort(const std::string& id, int64_t port);
  // Whether `signature` signs (target's sandbox, port, exp, owner), and exp has not passed.
  bool VerifyPortSignature(const PortTarget& target, int64_t exp, std::string_view signature) const;
  // A TCP socket (IPv4, non-blocking) made in the running sandbox's network namespace by a thread
  // of its own that enters it and ends (isolation/netns.h): connected by the caller to
  // 127.0.0.1:port, it reaches what listens on the sandbox's loopback. No code runs in the
  // sandbox. EAGAIN when it is not running.
  StatusOr<UniqueFd> PortSocket(const std::string& id);
  // Before serving: reads the key signed port URLs are made with (Store::PortUrlKey; 32 random
  // bytes stored by the first corrald that asks).
  Status LoadPortUrlKey();
  // Called (on the event loop) when a port closes or stops being public, so the connections
  // open to it end: `port` 0 for every port of the sandbox (a stop).
  void SetPortsClosed(std::function<void(const std::string& id, int64_t port)> closed) {
    ports_closed_ = std::move(closed);
  }
  // A request touched the sandbox: push its idle deadline back.
  void Touch(const std::string& sandbox_id);

  // Debits the CPU time of every running sandbox used since the last reading, and stops those
  // whose user's compute budget is spent (run by the timers: the readings on the worker pool,
  // the debits back on the loop).
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
  // A running sandbox: its init, the control connection, its live commands by seq.
  struct Live {
    std::string id;
    SandboxProcess process;
    std::unique_ptr<boost::asio::posix::stream_descriptor> control;
    std::unique_ptr<boost::asio::posix::stream_descriptor> init_exit;
    std::map<uint64_t, std::shared_ptr<Command>> commands;
    // Activity is kept here and written to the store at most every kActivityWrite: every exec
    // would otherwise cost a write. Readers of last_active_at take the newer of the two (Fresh).
    int64_t active_at = 0;
    int64_t active_stored = 0;
    int64_t idle_timeout_s = 0;  // the row's (fixed for its life): the idle sweep reads no rows
    ComputeAccount compute;
    int control_fd() const { return control ? control->native_handle() : -1; }
  };

  // Where a new sandbox's layer comes from: a snapshot's image, or another sandbox's layer.
  struct LayerSource {
    std::string snapshot_id;       // copy this snapshot's image, or
    std::string sandbox_id;        // this sandbox's layer (frozen while it runs)
    std::optional<isolation::SandboxSpec> sandbox_spec;  // (to make its layer if it never ran)
    pid_t sandbox_init_pid = 0;    // > 0 while it runs
    int64_t uid_base = 0;          // the range the files belong to
  };

  // What a stop reads from the kernel before the cgroups go (on the worker pool): everything in
  // the sandbox is killed first, so the figures are final.
  struct StopFigures {
    StatusOr<cgroups::CgroupStats> sandbox = Status::Error("not read", ENOENT);
    std::vector<StatusOr<cgroups::CgroupStats>> commands;  // one per seq asked for
    uint64_t killed_us = 0;                                // MonotonicMicros() after the kill
  };

  // How long a started or adopted sandbox's init has to answer hello: long enough for a host
  // whose CPUs are all busy (a CI run saw a new init runnable but unscheduled for 5 s on two
  // cores beside a QEMU guest); an init that does not answer is found out either way.
  static constexpr std::chrono::milliseconds kHelloTimeout{15000};

  // sandbox_manager.cc
  static int64_t Now();  // seconds since the epoch
  static Status NotFound(const std::string& what);
  StatusOr<SandboxRow> Owned(const Caller& caller, const std::string& id);
  Status OnThisNode(const std::string& what, const std::string& node_id) const;
  Status TakesNewSandboxes() const;  // EAGAIN when this node is drained
  // The row with the activity the daemon holds and has not written yet.
  void Fresh(SandboxRow& row) const;
  void StoreActivity(const Live& live);
  void SetState(SandboxRow& row, const std::string& state);
  // What the host starts for a stored sandbox: the one place a row becomes a SandboxSpec.
  // `starting`: for a start now (its trust bundle, if it names secrets, is written for it).
  StatusOr<isolation::SandboxSpec> SpecOf(const SandboxRow& row, bool starting = false) const;
  // sandbox_secrets.cc: `names` for a sandbox of (iss, sub), checked and sorted (none is fine);
  // ENOTSUP without a vault, EINVAL without the egress proxy, ENOENT for an unknown name.
  StatusOr<std::vector<std::string>> CheckSecretNames(const std::string& iss, const std::string& sub,
                                                      std::vector<std::string> names) const;
  // A command's variables for the sandbox's secrets: each one's placeholder, and the trust
  // store's when its bundle is bound.
  std::vector<std::string> SecretEnvironment(const SandboxRow& row) const;
  // The image a new sandbox gets (sandbox_images.cc): "host", or an image by name or digest
  // that the caller's limits.images allow (EPERM otherwise; ENOENT: no such image).
  struct ChosenImage {
    std::string digest;  // "host" or "sha256:..."
    std::string name;    // what it was asked by; "" for host or a digest
  };
  StatusOr<ChosenImage> ResolveImage(const UserCaps& caps, const std::string& image) const;
  // The layer directories of a stored sandbox's image (none: the host image).
  StatusOr<std::vector<std::string>> ImageLayersOf(const SandboxRow& row) const;
  // The environment and working directory its image's config gives commands.
  void ApplyImageConfig(const SandboxRow& row, ExecRequest& request, bool cwd_given) const;
  // The user a command runs as when it names none: "root" when the image's USER is root (or 0),
  // else "agent" (the host image, no USER, or any other user: the sandbox has only these two).
  std::string DefaultUserOf(const SandboxRow& row) const;
  Command::Context CommandContext();
  void SweepIdle();
  // A round of MeterCompute: one sandbox's CPU time as read on the worker pool.
  struct MeterReading {
    std::shared_ptr<Live> live;
    uint64_t cpu_usage_usec = 0;
  };
  void OnMeterRead(const std::vector<MeterReading>& readings);
  void ComputeExhausted(const std::string& id, const ComputeSpent& spent);

  // lifecycle.cc
  void DoStart(SandboxRow row, Done<SandboxRow> done);
  // On the worker pool: launches the sandbox, and attaches its full network if its spec has it.
  struct Launched;
  Launched Launch(const SandboxRow& row, const isolation::SandboxSpec& spec);
  void OnStarted(SandboxRow row, SandboxProcess process, std::vector<UniqueFd> listeners);
  // immediate: no SIGTERM and grace period (the sandbox is already frozen or dead).
  void DoStop(const std::string& id, bool by_request, std::function<void(Status)> done, bool immediate = false);
  // A lifecycle event in the event log, and for the webhooks (sandbox_events.cc).
  void AppendLifecycle(const SandboxRow& row, WebhookEventType type, const std::string& data_json = "{}",
                       StopReason reason = StopReason::kRequest);
  // The stop proper, once the commands ended or the grace period is over.
  void FinishStop(const std::string& id, bool by_request, bool full_network, std::shared_ptr<Live> live,
                  std::function<void(Status)> done);
  // SIGTERM to every command, then `finish` once they all ended or the grace period is over.
  void StopGracefully(const std::shared_ptr<Live>& live, bool by_request, std::function<void()> finish);
  StopFigures KillAndRead(const std::string& id, const std::vector<uint64_t>& seqs);
  void WatchControl(const std::shared_ptr<Live>& live);
  void WatchInit(const std::shared_ptr<Live>& live);
  void OnControlMessage(const std::shared_ptr<Live>& live, InitMessage message);
  void OnInitGone(const std::string& id);

  // snapshots.cc
  StatusOr<SnapshotRow> OwnedSnapshot(const Caller& caller, const std::string& id);
  void FillLayer(SandboxRow row, LayerSource source, bool start, Done<SandboxRow> done);
  void RemoveOrphanSnapshots();

  // exec.cc
  // The request init gets for `spec` in the sandbox of `row` (EINVAL for a bad user, cwd or env).
  StatusOr<ExecRequest> ExecRequestFor(const SandboxRow& row, const ExecSpec& spec) const;
  void AdoptCommands(const std::shared_ptr<Live>& live, std::map<uint64_t, HeldCommand> held);
  void OnCommandFinished(const std::string& sandbox_id, uint64_t seq, Command& finished);
  // Stores a command's outcome `lost` (the daemon could not learn its end), with the figures its
  // cgroup still held when they could be read.
  void StoreLost(CommandRow& row, const StatusOr<cgroups::CgroupStats>& figures);

  // lifecycle.cc: a new sandbox's row inserted (within the user's, issuer's and daemon's counts),
  // then started if asked.
  void CreateFresh(const Caller& caller, const UserCaps& caps, SandboxRow row, bool start, Done<SandboxRow> done);

  // pool.cc
  // Starts making pooled sandboxes where a shape holds fewer than it should (one at a time, in
  // the background; after a failure, again kPoolRetry later).
  void FillPool();
  void OnPoolFilled(SandboxRow row, PoolShape shape, std::shared_ptr<Launched> launched);
  // FillPool again kPoolRetry from now (once, however many failures asked).
  void ArmPoolRetry();
  // A pooled sandbox held for nobody (the daemon is stopping): stopped and removed, on the
  // calling (worker) thread; `process` null when its start failed. DestroyUnclaimedFills:
  // Detach's part for those whose start ended but whose hand-over to the loop has not run.
  void DestroyPooled(const std::string& id, SandboxProcess* process);
  void DestroyUnclaimedFills();
  // Gives the pooled sandbox `entry` to the caller as `row` (what a fresh create would have
  // stored); falls back to a fresh create when the pooled one is gone or cannot take the limits.
  void ClaimPooled(const Caller& caller, const UserCaps& caps, SandboxRow row, WarmPool::Entry entry,
                   Done<SandboxRow> done);
  // Stops and destroys a pooled sandbox and deletes its row (on the worker pool); then `done`.
  void DestroyPooled(WarmPool::Entry entry, std::function<void()> done = nullptr);
  // A pooled row the previous daemon left: its init (if it lives) stopped, the sandbox destroyed.
  Status RemovePooled(const SandboxRow& row);

  // moves.cc
  std::string MoveFile(const std::string& id, bool out) const;
  bool Busy(const std::string& id) const;
  // The node the catalog puts a sandbox or snapshot on (nullopt: none such).
  StatusOr<std::optional<std::string>> NodeOfMoving(const std::string& id);
  WritableLayer MovingLayer(const std::string& id, std::optional<LayerKind> kind = std::nullopt) const;
  Status RemoveMovingFiles(const std::string& id);  // on the worker pool
  bool SnapshotInUse(const std::string& id) const;
  Status ImageHere(const std::string& id, const std::string& image) const;
  void TakeMoved(const std::string& id, const MoveManifest& manifest, int64_t uid, int attempts, Done<Moved> done);
  void FailAdopt(const std::string& id, const Status& why, Done<Moved> done);
  void RemoveMoveLeftovers();

  // recovery.cc
  // A sandbox the previous daemon left running, starting or stopping: adopted if its init lives,
  // else stopped (its last CPU time debited, its commands `lost`). True when adopted.
  StatusOr<bool> RecoverSandbox(SandboxRow& row);
  // cgroups and full-network leftovers of sandboxes that are not running.
  void RemoveLeftovers(const std::vector<SandboxRow>& rows);

  boost::asio::io_context& io_;
  boost::asio::thread_pool& pool_;
  const DaemonConfig& config_;
  Store& store_;
  SandboxHost& host_;
  CommandObserver* observer_;
  Admission admission_;
  ComputeMeter meter_;
  LoopbackServices* loopback_ = nullptr;
  EgressProxy* egress_ = nullptr;
  SecretVault* vault_ = nullptr;
  const TrustBundles* trust_ = nullptr;
  FullNetwork* network_ = nullptr;
  ImageService* images_ = nullptr;
  std::function<bool()> drained_;
  std::map<std::string, std::shared_ptr<Live>> live_;  // running sandboxes by id
  std::string port_url_key_;  // LoadPortUrlKey
  std::function<void(const std::string&, int64_t)> ports_closed_;  // SetPortsClosed
  // sandbox_ports.cc: every port of a stopping sandbox, closed (port.closed with `reason`).
  void CloseAllPorts(const std::string& id, const std::string& reason);
  std::map<std::string, bool> busy_;                   // a lifecycle operation is under way
  std::map<std::string, StopReason> stop_reasons_;     // why a stop under way was made, when not asked
  WebhookOutbox* webhooks_ = nullptr;
  std::set<std::string> receiving_;                    // moving here: a part being written
  std::map<std::string, std::shared_ptr<Command>> commands_;  // by command id, until they end
  std::map<std::string, std::shared_ptr<Command>> recent_;    // ended, kept for late attaches
  std::deque<std::string> recent_order_;
  boost::asio::steady_timer idle_timer_;
  WarmPool warm_pool_;
  boost::asio::steady_timer pool_retry_;
  bool pool_retry_armed_ = false;
  std::map<PoolShape, std::string> pool_names_;  // a shape's image as pool.sizes names it
  bool metering_ = false;  // a MeterCompute round is reading
  bool detached_ = false;
  // Pooled sandboxes started on the worker pool whose hand-over to the event loop is posted but
  // not run yet: Detach destroys them (the loop stops right after it, and would drop the post),
  // and a fill that ends after Detach destroys its own (pool.cc).
  std::mutex fills_mu_;
  bool fills_stopped_ = false;
  std::map<std::string, std::shared_ptr<Launched>> fills_done_;
};

}  // namespace corral::supervisor
