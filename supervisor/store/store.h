// The daemon's state: issuers, sandboxes, snapshots, commands, events, sessions, the ledger and
// the budget holds on it, headless executions and nodes, in SQLite (a file in the state dir, the
// default) or PostgreSQL (a server the nodes of a fleet share). The same methods, tables and
// answers on both.
//
// SQLite: WAL mode, foreign keys on. Both: versioned migrations, each in its own transaction,
// forward only. Every method that returns OK has committed: an acknowledged API request is a
// committed row. SQLite's `synchronous` is NORMAL by default (a commit survives a crash of the
// daemon; FULL also survives a power cut, at one fsync per commit); PostgreSQL's durability is
// its server's (synchronous_commit).
//
// Thread-safe: one connection, serialized by a mutex. Calls are short (indexed lookups and
// single-row writes), so the daemon's event loop calls them directly.
//
// Errors: a missing row is a Status with errno ENOENT, a duplicate key EEXIST, a busy database
// EBUSY, an unreachable one (PostgreSQL down or restarting) ECONNREFUSED; anything else is the
// engine's error message with the operation that failed.
//
// Where it is: store.cc opens it (store_schema_{sqlite,postgres}.cc: each engine's migrations)
// and runs transactions; store_{issuers,sandboxes,commands,events,ledger,images}.cc hold the
// tables' methods, in SQL over store_sql.h (statements, binding, reading rows) and store_rows.h
// (each row type as its columns), on a connection of sql_db.h (sql_sqlite.cc, sql_postgres.cc).
// Only these files know SQL. Rows hold typed values (ResourceLimits, EgressRules, Budget);
// store_columns.h turns them into the text of their columns (limits_json, egress_json,
// budget_json) and back.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "isolation/resource_limits.h"
#include "rootfs/oci_archive.h"
#include "supervisor/relay/budget.h"
#include "supervisor/secrets/secret_binding.h"
#include "supervisor/egress/egress_policy.h"

namespace corral::supervisor {

namespace store_internal {
class SqlDb;
}

struct IssuerRow {
  std::string name;
  std::string secret;
  int64_t created_at = 0;  // unix seconds
};

// A revoked token id (supervisor/issuers.h); iss "" for every issuer's.
struct RevocationRow {
  std::string iss;
  std::string jti;
  int64_t revoked_at = 0;  // unix seconds
};

// Lifecycle of DESIGN.md §4: created -> starting -> running <-> frozen -> stopped -> destroyed.
// A destroyed sandbox's row is deleted; "destroying" marks one whose teardown is under way (so
// recovery can finish it after a crash).
struct SandboxRow {
  std::string id;             // "sb_..."
  std::string iss;
  std::string sub;
  std::string name;           // the user's label; "" when not given
  std::string image;          // "host" or the digest of its image ("sha256:..."), fixed at create
  std::string image_name;     // the name the image was asked by ("python:3.12"); "" for host or a digest
  std::string state;          // created|starting|running|frozen|stopping|stopped|destroying
  isolation::ResourceLimits limits;  // the effective limits (memory, cpus, pids, disk), fixed at create time
  int64_t idle_timeout_s = 0; // 0: never idles out
  int64_t uid_base = 0;       // host uid of root inside; unique among sandboxes
  int64_t created_at = 0;
  int64_t updated_at = 0;
  int64_t last_active_at = 0;
  int64_t init_pid = 0;               // host pid of corral-init while running, else 0
  int64_t init_start_time = 0;        // its start time (/proc/PID/stat field 22), against pid reuse
  std::string source;                 // "snap_..." or "sb_..." it was forked from; "" otherwise
  Budget budget;                      // the budget of the token that last created or started it
  int64_t cpu_billed_usec = 0;        // of this run's cgroup CPU time, what the ledger holds
  std::optional<EgressRules> egress;  // its egress rules; unset (rows from before they were kept): none
  std::string network = "loopback";   // "loopback" | "full" (supervisor/sandboxes/full_network.h)
  std::string node_id;                // the node that holds it (its files, cgroups, processes)
  // The secrets it may use (supervisor/secrets/), by name, sorted: its user's, else its issuer's.
  std::vector<std::string> secrets;
};

struct SnapshotRow {
  std::string id;             // "snap_..."
  std::string sandbox_id;     // the sandbox it was taken of (may since be destroyed)
  std::string iss;
  std::string sub;
  std::string image;          // "host" or its image's digest
  int64_t created_at = 0;
  int64_t bytes = 0;          // space it takes on the host's disk
  int64_t uid_base = 0;       // host uid of root inside, for the files in it
  isolation::ResourceLimits limits;  // the sandbox's limits when it was taken (disk_bytes: its size)
  std::string image_name;     // the sandbox's image_name
  std::string node_id;        // the node whose disk holds it
};

// An image layer, unpacked once under the state dir (supervisor/images/image_service.h).
struct LayerRow {
  std::string diff_id;        // "sha256:<hex>" of its uncompressed tar
  int64_t bytes = 0;          // its unpacked size
  int64_t created_at = 0;
};

struct ImageRow {
  std::string digest;                 // "sha256:<hex>" of its config: its id
  rootfs::ImageConfig config;
  int64_t bytes = 0;                  // its layers' unpacked size
  int64_t created_at = 0;
  std::string source;                 // "import", "pull REF", "build"
  std::vector<std::string> layers;    // diff_ids, bottom first
  std::vector<int64_t> layer_bytes;   // each layer's unpacked size, in the order of `layers` (read only)
  std::vector<std::string> names;     // the tags pointing at it, sorted
};

// Who uses an image: a sandbox or a snapshot records it while it exists.
struct ImageUse {
  int64_t sandboxes = 0;
  int64_t snapshots = 0;
  std::string example;                // one of them ("sb_..." or "snap_..."), for messages
};

struct CommandRow {
  std::string id;             // "cmd_..."
  std::string sandbox_id;
  std::string iss;
  std::string sub;
  std::string argv_json;      // JSON array of strings
  bool pty = false;
  std::string state;          // starting|running|exited
  std::string outcome_json;   // "" until exited
  int64_t created_at = 0;
  int64_t ended_at = 0;
  int64_t init_seq = 0;       // the number corral-init knows it by, unique per sandbox
  int64_t seq_reserved = 0;   // no event of this command has a higher seq (see Command::ReserveSeq)
};

struct EventRow {
  int64_t seq = 0;            // global, increasing
  std::string sandbox_id;
  std::string type;           // "sandbox.started", "command.exited", ...
  std::string data_json;
  int64_t at = 0;
};

// A port a sandbox shows (a preview URL; api/port_proxy.h).
struct PortRow {
  std::string sandbox_id;
  int64_t port = 0;
  bool is_public = false;
  int64_t created_at = 0;
};

struct SessionRow {
  std::string id;             // "ses_..."
  std::string sandbox_id;
  std::string iss;
  std::string sub;
  std::string state;          // idle|initializing|ready|processing|waiting_tool|completed|failed|aborted
  std::string agent_session;  // Claude Code's session id (a UUID), for --resume
  std::string parent_id;      // the session this one was forked from; ""
  std::string options_json = "{}";  // model, permission mode, tools
  Budget budget;              // the budget of the token that last drove it
  std::string outcome_json;   // "" until it ended
  int64_t cost_micro_usd = 0; // what the relay debited for it
  int64_t turns = 0;
  int64_t created_at = 0;
  int64_t updated_at = 0;
  int64_t ended_at = 0;
  int64_t seq_reserved = 0;   // no event of this session has a higher seq
};

// A checkpoint of an agent session (supervisor/sessions/checkpoints.cc): its sandbox's files as a
// snapshot (which holds the agent's transcript: it is in the workspace) at a turn boundary, and
// what a restore needs to continue from there. Deleted with its snapshot.
struct CheckpointRow {
  std::string id;             // "chk_..."
  std::string session_id;
  std::string sandbox_id;     // the sandbox it was taken in
  std::string snapshot_id;
  std::string iss;
  std::string sub;
  std::string agent_session;  // Claude Code's session id then (a fork of it continues)
  std::string cwd;            // the session's working directory ("" = /home/agent): its transcripts are there
  int64_t turns = 0;          // the session's turns then
  int64_t created_at = 0;
};

// A headless execution (POST /v1/execute): an agent's task on a copy of a git repository in a
// sandbox of its own, and what came of it. Its git bundle is stored apart (SetExecutionBundle).
struct ExecutionRow {
  std::string id;             // "exe_..."
  std::string iss;
  std::string sub;
  std::string state;          // running|completed|failed
  std::string sandbox_id;     // "" until the sandbox exists
  std::string session_id;     // "" until the agent started
  std::string request_json = "{}";  // task, repo kind, model, permission mode, timeout, keep_sandbox
  std::string base_commit;    // the repository's HEAD before the agent worked
  std::string head_commit;    // and after (with what it left uncommitted committed)
  std::string summary;        // the `result` text of the agent's turn
  std::string outcome;        // the session's outcome ("completed", "budget_exhausted", ...)
  int64_t cost_micro_usd = 0;
  std::string usage_json = "{}";
  std::string files_json = "[]";  // [{"path", "status"}, ...]
  std::string diff;           // base..head, at most the configured cap
  bool diff_truncated = false;
  int64_t bundle_bytes = 0;   // 0: no bundle (no new commits, or it was refused)
  std::string error;          // why it failed (or what is missing); "" when all went well
  int64_t created_at = 0;
  int64_t updated_at = 0;
  int64_t ended_at = 0;
  std::string node_id;        // the node that runs it
};

// A node's `drained`.
inline constexpr int64_t kNodeOpen = 0;
inline constexpr int64_t kNodeDrained = 1;
inline constexpr int64_t kNodeMovingOut = 2;

// A node of a fleet (supervisor/fleet/node_registry.h): one corrald on one host, as it last said
// of itself. A SQLite store has one node, its own.
struct NodeRow {
  std::string id;
  std::string address;          // host:port where the other nodes reach it; "" when not given
  std::string version;          // its corrald's
  int64_t started_at = 0;       // unix seconds
  int64_t heartbeat_at = 0;     // unix milliseconds of its last heartbeat
  int64_t drained = kNodeOpen;  // kNodeOpen, or takes no new sandboxes (an operator's choice, kept
                                // across restarts): kNodeDrained, or kNodeMovingOut, which also
                                // moves its stopped sandboxes to other nodes
  int64_t max_sandboxes = 0;    // sandbox.max_sandboxes
  int64_t sandboxes = 0;        // how many it held at its last heartbeat
  int64_t memory_total = 0;     // bytes (MemTotal)
  int64_t memory_available = 0; // bytes (MemAvailable) at its last heartbeat
};

// A secret (supervisor/secrets/): a user's (sub set), or one its issuer keeps for all its users
// (sub empty), by name; its value sealed (secret_box.h: the store never holds it in clear).
struct SecretRow {
  std::string iss;
  std::string sub;
  std::string name;
  std::string sealed;
  std::vector<SecretBinding> bindings;
  int64_t created_at = 0;
  int64_t updated_at = 0;
};

// One debit (see budget.h for the units).
struct LedgerRow {
  int64_t id = 0;             // assigned, increasing
  std::string iss;
  std::string sub;
  std::string kind;           // "ai": amount in micro-dollars; "compute": CPU milliseconds
  int64_t amount = 0;
  int64_t at = 0;             // unix seconds
  std::string sandbox_id;     // "" when none
  std::string session_id;     // "" when none
  std::string model;          // ai: the model as the answer named it
  int64_t input_tokens = 0;   // ai: the usage the amount was priced from
  int64_t output_tokens = 0;
  int64_t cache_write_tokens = 0;
  int64_t cache_read_tokens = 0;
};

// A sum of the ledger, by kind, sandbox and session (see Store::LedgerTotals).
struct LedgerTotal {
  std::string kind;
  std::string sandbox_id;
  std::string session_id;
  int64_t amount = 0;
  int64_t count = 0;          // ledger rows (for "ai": model calls)
};

// A model call's admission on its user's AI budget, and the hold it takes (Store::AdmitBudgetHold,
// supervisor/relay/model_relay.h).
struct BudgetHoldRequest {
  std::string iss;
  std::string sub;
  int64_t limit_micro_usd = 0;  // the budget of the window
  WindowRange window;           // the ledger's "ai" rows with start <= at < end are spent
  int64_t micro_usd = 0;        // the call's most possible cost: what it holds until it is priced
  int64_t now = 0;              // unix seconds: the hold's created_at
  int64_t stale_before = 0;     // holds created before this outlived their call: not counted, deleted
};
struct BudgetHoldAnswer {
  HoldVerdict verdict = HoldVerdict::kSpent;
  int64_t hold_id = 0;          // kAdmit: the hold's id, for SettleBudgetHold or ReleaseBudgetHold
  BudgetState state;            // what the decision read (every node's holds but the stale)
};

enum class Synchronous { kNormal, kFull };

// One delivery of a webhook event to one URL, in the outbox (supervisor/webhooks/): written with
// what the event is about, then sent until the URL takes it (at least once), or given up.
struct OutboxRow {
  std::string id;               // the event's "wh_..." id, the same on every attempt and for every URL
  std::string url;
  std::string type;             // "sandbox.stopped", ...
  std::string body;             // the exact JSON bytes signed and sent on every attempt
  int64_t created_at = 0;       // unix seconds: the event's
  int64_t attempts = 0;         // made so far
  int64_t next_attempt_ms = 0;  // unix milliseconds: not tried before
  int64_t delivered_at = 0;     // unix seconds; 0 until a 2xx
  int64_t given_up_at = 0;      // unix seconds; 0 unless it outlived webhooks.max_age
  std::string last_error;       // why the last attempt failed; ""
  std::string lease_node;       // the node delivering it now; "" (ClaimOutbox)
  int64_t lease_until_ms = 0;   // its lease ends: another node may take the row after this
};

// What came of one attempt (Store::FinishOutboxAttempt).
struct OutboxAttempt {
  std::string id;
  std::string url;
  bool delivered = false;
  bool give_up = false;         // failed, and too old to try again
  int64_t at = 0;               // unix seconds: delivered_at or given_up_at
  int64_t next_attempt_ms = 0;  // failed: the next attempt's time
  std::string error;            // failed: why ("HTTP 503", "connect: Connection refused", ...)
};

// Where the store is ([store] in corrald.toml).
enum class StoreBackend { kSqlite, kPostgresql };
struct StoreOptions {
  StoreBackend backend = StoreBackend::kSqlite;
  std::string path;                            // SQLite: the database file
  Synchronous synchronous = Synchronous::kNormal;  // SQLite
  std::string url;                             // PostgreSQL: a libpq connection string
  // This corrald's node: the rows it inserts are its own, and "the daemon's" sandboxes,
  // executions and sessions are those of its node (SQLite: every row; a SQLite store is one
  // node's, and takes the rows of another id as its own when it opens).
  std::string node_id = "local";
};

class Store {
 public:
  // Opens (creating if needed, mode 0600) and migrates to the latest schema. A store of an older
  // schema is first copied to <path>.schema-<N>.before-migration-<time> (SQLite's backup API,
  // 0600); when the copy fails, nothing is migrated and Open fails.
  static StatusOr<std::unique_ptr<Store>> Open(const std::string& path,
                                               Synchronous synchronous = Synchronous::kNormal);
  // Either engine. PostgreSQL: connects (ECONNREFUSED when it cannot, EINVAL for a connection
  // string that does not parse) and migrates, one node at a time; the operator backs the
  // database up (pg_dump) before an upgrade, as for any PostgreSQL database.
  static StatusOr<std::unique_ptr<Store>> Open(const StoreOptions& options);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  StoreBackend backend() const { return backend_; }
  const std::string& node_id() const { return node_id_; }
  int schema_version() const;  // -1 when it cannot be read
  static int latest_schema_version(StoreBackend backend = StoreBackend::kSqlite);

  // Issuers. AddIssuer: EEXIST when the name is taken. RemoveIssuer: ENOENT when absent; its secrets go too.
  Status AddIssuer(const IssuerRow& issuer);
  StatusOr<std::optional<IssuerRow>> GetIssuer(const std::string& name);
  StatusOr<std::vector<IssuerRow>> ListIssuers();  // by name
  Status RemoveIssuer(const std::string& name);
  Status SetIssuerSecret(const std::string& name, const std::string& secret);  // ENOENT when absent
  // Revoked token ids. AddRevocation: EEXIST when that (iss, jti) is revoked already.
  Status AddRevocation(const RevocationRow& revocation);
  StatusOr<std::vector<RevocationRow>> ListRevocations();  // oldest first

  // Sandboxes. CreateSandbox picks the lowest free uid_base of this node's
  // {uid_first + k * uid_step : 0 <= k < slots} and inserts the row, of this node, in one
  // transaction (ENOSPC when every slot is taken), returning the row as stored.
  StatusOr<SandboxRow> CreateSandbox(SandboxRow row, int64_t uid_first, int64_t uid_step, int64_t slots);
  Status UpdateSandbox(const SandboxRow& row);   // every column but egress, network and secrets, by id; ENOENT when absent
  Status SetSandboxEgress(const std::string& id, const EgressRules& rules);  // ENOENT when absent
  Status SetSandboxSecrets(const std::string& id, const std::vector<std::string>& names);  // ENOENT when absent
  StatusOr<std::optional<SandboxRow>> GetSandbox(const std::string& id);
  // All sandboxes of one user, or every sandbox of every node when iss is empty; oldest first.
  StatusOr<std::vector<SandboxRow>> ListSandboxes(const std::string& iss = "", const std::string& sub = "");
  // This node's sandboxes (pooled ones too); oldest first.
  StatusOr<std::vector<SandboxRow>> ListNodeSandboxes();
  StatusOr<int64_t> CountSandboxes(const std::string& iss, const std::string& sub);
  // Counted by the database, for admission, which must not load every row at every create: this
  // node's sandboxes (pooled ones too), or, when iss is set, those of one issuer's users on every
  // node.
  StatusOr<int64_t> CountAllSandboxes(const std::string& iss = "");
  // Deletes the sandbox and its commands (its events and snapshots stay). ENOENT when absent.
  Status DeleteSandbox(const std::string& id);
  // A stopped sandbox moving to this node (a drain, supervisor/sandboxes/moves.cc), in two steps:
  // FreeUidBase names the lowest free range of this node (as CreateSandbox would pick; ENOSPC
  // when none), for the files copied here to be re-owned to; TakeSandbox then makes the row this
  // node's with that range, in one transaction, if it still is `from_node`'s and stopped (false
  // when it is not: started, destroyed or moved meanwhile; EEXIST when the range was taken
  // meanwhile: pick again).
  StatusOr<int64_t> FreeUidBase(int64_t uid_first, int64_t uid_step, int64_t slots);
  StatusOr<bool> TakeSandbox(const std::string& id, const std::string& from_node, int64_t uid_base, int64_t now);

  // Snapshots. InsertSnapshot: of this node.
  Status InsertSnapshot(const SnapshotRow& row);
  StatusOr<std::optional<SnapshotRow>> GetSnapshot(const std::string& id);
  StatusOr<std::vector<SnapshotRow>> ListSnapshots(const std::string& iss, const std::string& sub);
  Status DeleteSnapshot(const std::string& id);
  // This node's snapshots; oldest first.
  StatusOr<std::vector<SnapshotRow>> ListNodeSnapshots();
  // A snapshot moving to this node (a drain, moves.cc): its row becomes this node's if it still
  // is `from_node`'s (false otherwise: deleted or moved meanwhile). Its files keep their owners
  // (a snapshot's uid_base says whose they are; a sandbox made of it moves them).
  StatusOr<bool> TakeSnapshot(const std::string& id, const std::string& from_node);
  StatusOr<int64_t> CountSnapshots(const std::string& iss, const std::string& sub);

  // Images (store_images.cc). InsertImage adds the layers it names that have no row yet (from
  // `layers`), the image with its layer list, and, when `name` is not empty, points the tag at
  // it: one transaction. An image already present is kept as it is (the same digest is the same
  // image). The tag: EEXIST when it points at another image and !force.
  Status InsertImage(const ImageRow& image, const std::vector<LayerRow>& layers, const std::string& name,
                     bool force);
  StatusOr<std::optional<ImageRow>> GetImage(const std::string& digest);
  StatusOr<std::vector<ImageRow>> ListImages();
  StatusOr<std::optional<std::string>> ImageOfTag(const std::string& name);
  Status SetImageTag(const std::string& name, const std::string& digest, bool force);
  // Deletes the image and its tags; EBUSY when a sandbox or snapshot records it (checked in the
  // same transaction). ENOENT when absent.
  Status DeleteImage(const std::string& digest);
  StatusOr<ImageUse> ImageUses(const std::string& digest);
  StatusOr<std::vector<LayerRow>> ListLayers();
  // Deletes the layer rows no image uses; returns them.
  StatusOr<std::vector<LayerRow>> DeleteUnusedLayers();

  // Commands. InsertCommand assigns init_seq (1 + the sandbox's highest) and returns the row.
  StatusOr<CommandRow> InsertCommand(CommandRow row);
  Status UpdateCommand(const CommandRow& row);
  StatusOr<std::optional<CommandRow>> GetCommand(const std::string& id);
  // A sandbox's commands, newest first, at most `limit`; only those not exited when active_only.
  StatusOr<std::vector<CommandRow>> ListCommands(const std::string& sandbox_id, bool active_only,
                                                 int64_t limit = 1000);

  // Events: an append-only log per sandbox (lifecycle and command outcomes, not output bytes).
  StatusOr<int64_t> AppendEvent(const std::string& sandbox_id, const std::string& type,
                                const std::string& data_json);
  StatusOr<std::vector<EventRow>> ListEvents(const std::string& sandbox_id, int64_t after_seq,
                                             int64_t limit = 1000);
  // The same, with the event's webhook deliveries (one row per URL, OutboxRow) inserted in the same
  // transaction: an event in the log is never missing from the outbox, nor the reverse.
  StatusOr<int64_t> AppendEvent(const std::string& sandbox_id, const std::string& type,
                                const std::string& data_json, const std::vector<OutboxRow>& outbox);
  // Told of every event appended from now on, in seq order, on the appending thread and under
  // the store's lock: it must only hand the row on (post it to an event loop), never call back.
  void SetEventListener(std::function<void(const EventRow&)> listener);

  // Sessions. UpdateSession: every column, by id; ENOENT when absent. ListSessions: empty
  // arguments match every value; oldest first.
  Status InsertSession(const SessionRow& row);
  Status UpdateSession(const SessionRow& row);
  StatusOr<std::optional<SessionRow>> GetSession(const std::string& id);
  StatusOr<std::vector<SessionRow>> ListSessions(const std::string& iss, const std::string& sub,
                                                 const std::string& sandbox_id = "");
  // The sessions of this node's sandboxes; oldest first.
  StatusOr<std::vector<SessionRow>> ListNodeSessions();

  // Ledger. AddLedger returns the row's id; LedgerSum adds up one user's debits of a kind with
  // from <= at < to. ListLedger (for exports): empty iss or sub match every one, rows after
  // `after_id` by id, at most `limit`.
  StatusOr<int64_t> AddLedger(const LedgerRow& row);
  StatusOr<int64_t> LedgerSum(const std::string& iss, const std::string& sub, const std::string& kind,
                              int64_t from, int64_t to);
  // One user's debits with from <= at < to, summed by kind, sandbox and session.
  StatusOr<std::vector<LedgerTotal>> LedgerTotals(const std::string& iss, const std::string& sub, int64_t from,
                                                  int64_t to);
  StatusOr<std::vector<LedgerRow>> ListLedger(const std::string& iss, const std::string& sub, int64_t from,
                                              int64_t to, int64_t after_id = 0, int64_t limit = 10000);

  // Budget holds (store_ledger.cc): a model call's most possible cost, held from its admission
  // until it is priced, in a table every node reads, so that the calls in flight on every node
  // count against their user's budget. AdmitBudgetHold is one transaction: it takes the user's
  // turn (a row lock: the user's admissions on every node take turns, other users' go on; EBUSY
  // when another node holds it for a second), reads the user's spending in the window and holds
  // (those created before stale_before are deleted, not counted), decides (DecideHold), and when
  // admitted inserts this node's hold. SettleBudgetHold is one
  // transaction: it deletes the hold (gone already: nothing) and inserts the priced call's ledger
  // row, returning its id, so that the money is never both held and spent, nor neither.
  // ReleaseBudgetHold: a call that ended without a price (no answer, or none with usage).
  // ReleaseNodeBudgetHolds (this node's start): every hold of this node, whose calls died with
  // its previous run; returns how many.
  StatusOr<BudgetHoldAnswer> AdmitBudgetHold(const BudgetHoldRequest& request);
  StatusOr<int64_t> SettleBudgetHold(int64_t hold_id, const LedgerRow& row);
  Status ReleaseBudgetHold(int64_t hold_id);
  StatusOr<int64_t> ReleaseNodeBudgetHolds();

  // Executions. InsertExecution: of this node. ListExecutions: empty arguments match every
  // value; oldest first. A bundle is stored (or replaced) apart from its record and goes with it
  // (DeleteExecution). FailRunningExecutions (recovery): every running execution of this node
  // becomes failed with `error`, in one transaction; returns them as stored.
  Status InsertExecution(const ExecutionRow& row);
  Status UpdateExecution(const ExecutionRow& row);
  StatusOr<std::optional<ExecutionRow>> GetExecution(const std::string& id);
  StatusOr<std::vector<ExecutionRow>> ListExecutions(const std::string& iss, const std::string& sub,
                                                     const std::string& state = "");
  Status DeleteExecution(const std::string& id);
  Status SetExecutionBundle(const std::string& id, std::string_view bundle);
  StatusOr<std::optional<std::string>> GetExecutionBundle(const std::string& id);
  StatusOr<std::vector<ExecutionRow>> FailRunningExecutions(const std::string& error, int64_t now);

  // Nodes (store_nodes.cc). RegisterNode inserts or replaces the node's row but for `drained`,
  // which stays as the operator left it (false for a new node). HeartbeatNode: ENOENT when its
  // row is gone. ListNodes: by id.
  Status RegisterNode(const NodeRow& row);
  Status HeartbeatNode(const std::string& id, int64_t at_ms, int64_t sandboxes, int64_t memory_available);
  StatusOr<std::optional<NodeRow>> GetNode(const std::string& id);
  StatusOr<std::vector<NodeRow>> ListNodes();
  Status SetNodeDrained(const std::string& id, int64_t drained);  // kNode*; ENOENT when absent

  // Secrets (store_secrets.cc), by (iss, sub, name). PutSecret inserts one, or replaces the value
  // and bindings of the one of that name (its created_at kept). ListSecrets: by name.
  Status PutSecret(const SecretRow& row);
  StatusOr<std::optional<SecretRow>> GetSecret(const std::string& iss, const std::string& sub, const std::string& name);
  StatusOr<std::vector<SecretRow>> ListSecrets(const std::string& iss, const std::string& sub);
  Status DeleteSecret(const std::string& iss, const std::string& sub, const std::string& name);  // ENOENT when absent
  // Checkpoints (store_checkpoints.cc). A checkpoint goes with its snapshot (DeleteSnapshot).
  // ListCheckpoints: a session's, oldest first.
  Status InsertCheckpoint(const CheckpointRow& row);
  StatusOr<std::optional<CheckpointRow>> GetCheckpoint(const std::string& id);
  StatusOr<std::vector<CheckpointRow>> ListCheckpoints(const std::string& session_id);
  // Sandbox ports (store_ports.cc). PutPort inserts one or sets its `public`; true when it is
  // new. ListPorts: by port. DeletePort: ENOENT when absent. DeleteSandboxPorts: every port of
  // the sandbox, returning the ports deleted. PortUrlKey: the key signed port URLs are made
  // with, `candidate` stored first when there is none (the first caller's wins, on every node).
  StatusOr<bool> PutPort(const PortRow& row);
  StatusOr<std::vector<PortRow>> ListPorts(const std::string& sandbox_id);
  Status DeletePort(const std::string& sandbox_id, int64_t port);
  StatusOr<std::vector<int64_t>> DeleteSandboxPorts(const std::string& sandbox_id);
  StatusOr<std::string> PortUrlKey(const std::string& candidate);
  // The webhook outbox (store_webhooks.cc). InsertOutbox: rows whose (id, url) is there already
  // are left as they are (an event recorded once, whichever node records it first); joins the
  // caller's transaction. ClaimOutbox leases to this node, until now_ms + lease_ms, at most
  // `limit` rows that are due (not delivered, not given up, next_attempt_ms <= now_ms) and not
  // leased (or whose lease ended: a node that died delivering), earliest first, in one statement:
  // two nodes never hold one row at once. FinishOutboxAttempt records an attempt of a row this
  // node holds (attempts + 1, the lease released); false when the node no longer held it (its
  // lease ended and another node took it). ReleaseOutboxLeases: this node's leases, released (at
  // its start and stop: what it was sending is due again). PruneOutbox deletes the rows delivered or given up
  // before `before` (unix seconds); returns how many. OutboxDepth: rows neither delivered nor
  // given up. ListOutbox: every row, oldest first (tests, the admin's view).
  Status InsertOutbox(const std::vector<OutboxRow>& rows);
  StatusOr<std::vector<OutboxRow>> ClaimOutbox(int64_t now_ms, int64_t lease_ms, int64_t limit);
  StatusOr<bool> FinishOutboxAttempt(const OutboxAttempt& attempt);
  StatusOr<int64_t> ReleaseOutboxLeases();
  StatusOr<int64_t> PruneOutbox(int64_t before);
  StatusOr<int64_t> OutboxDepth();
  StatusOr<std::vector<OutboxRow>> ListOutbox();
  // The tokens of a session's model calls, summed from the ledger (its "ai" rows): calls,
  // input, output, cache write, cache read, in a LedgerRow's fields (id: the calls; amount: the micro-dollars).
  StatusOr<LedgerRow> SessionUsage(const std::string& session_id);

  // Runs `body` in one serializable transaction (SQLite: BEGIN IMMEDIATE ... COMMIT; ROLLBACK
  // when it fails). The methods above may be called inside it; they join the transaction.
  // PostgreSQL may run `body` more than once (a transaction that lost to a concurrent one is
  // run again): it must only call the store and assign what it returns.
  Status InTransaction(const std::function<Status()>& body);

 private:
  Store() = default;
  // `body` in SqlDb::LockedTransaction (joining an outer transaction, as InTransaction does).
  Status InLockedTransaction(const std::function<Status()>& body);
  Status ClaimEveryRow();
  store_internal::SqlDb* db_ = nullptr;  // owned
  StoreBackend backend_ = StoreBackend::kSqlite;
  std::string node_id_;
  mutable std::recursive_mutex mu_;
  std::function<void(const EventRow&)> event_listener_;
  int transaction_depth_ = 0;
};

}  // namespace corral::supervisor
