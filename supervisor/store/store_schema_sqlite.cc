// The store's schema in SQLite: opening the file, its migrations and the copy made before them.
#include "supervisor/store/store_schema.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <iterator>
#include <mutex>
#include <string>

#include "common/log.h"
#include "common/unique_fd.h"
#include "supervisor/store/sql_sqlite.h"
#include "supervisor/store/store_backup.h"
#include "supervisor/store/store_sql.h"

namespace corral::supervisor::store_internal {

namespace {

// ---------------------------------------------------------------------------------------------
// Schema. kMigrations[i] takes user_version i to i + 1. Append only: a released migration is
// never edited, since databases in the field have already run it.
//
// STRICT (SQLite 3.37) makes a column reject a value of the wrong type instead of storing it as
// whatever it is. Primary keys are declared NOT NULL because, for compatibility with old
// versions, SQLite lets a non-INTEGER PRIMARY KEY column hold NULLs.
constexpr const char* kMigrations[] = {
    R"sql(
CREATE TABLE issuers (
  name        TEXT NOT NULL PRIMARY KEY,
  secret      TEXT NOT NULL,
  created_at  INTEGER NOT NULL
) STRICT;

CREATE TABLE sandboxes (
  id               TEXT NOT NULL PRIMARY KEY,
  iss              TEXT NOT NULL,
  sub              TEXT NOT NULL,
  name             TEXT NOT NULL,
  image            TEXT NOT NULL,
  state            TEXT NOT NULL,
  limits_json      TEXT NOT NULL,
  idle_timeout_s   INTEGER NOT NULL,
  uid_base         INTEGER NOT NULL UNIQUE,
  created_at       INTEGER NOT NULL,
  updated_at       INTEGER NOT NULL,
  last_active_at   INTEGER NOT NULL,
  init_pid         INTEGER NOT NULL,
  init_start_time  INTEGER NOT NULL,
  source           TEXT NOT NULL
) STRICT;
CREATE INDEX sandboxes_by_user ON sandboxes (iss, sub);

-- No foreign key: a snapshot outlives the sandbox it was taken of.
CREATE TABLE snapshots (
  id          TEXT NOT NULL PRIMARY KEY,
  sandbox_id  TEXT NOT NULL,
  iss         TEXT NOT NULL,
  sub         TEXT NOT NULL,
  image       TEXT NOT NULL,
  created_at  INTEGER NOT NULL,
  bytes       INTEGER NOT NULL
) STRICT;
CREATE INDEX snapshots_by_user ON snapshots (iss, sub);

-- The UNIQUE index starts with sandbox_id, so it also serves the ON DELETE CASCADE lookup
-- (without an index on the child column, every sandbox delete would scan all commands).
CREATE TABLE commands (
  id            TEXT NOT NULL PRIMARY KEY,
  sandbox_id    TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
  iss           TEXT NOT NULL,
  sub           TEXT NOT NULL,
  argv_json     TEXT NOT NULL,
  pty           INTEGER NOT NULL,
  state         TEXT NOT NULL,
  outcome_json  TEXT NOT NULL,
  created_at    INTEGER NOT NULL,
  ended_at      INTEGER NOT NULL,
  init_seq      INTEGER NOT NULL,
  UNIQUE (sandbox_id, init_seq)
) STRICT;
CREATE INDEX commands_by_state ON commands (sandbox_id, state);

-- AUTOINCREMENT: a plain INTEGER PRIMARY KEY reuses the highest seq once that row is deleted,
-- and clients resume from a seq they have seen. No foreign key: events outlive the sandbox.
CREATE TABLE events (
  seq         INTEGER PRIMARY KEY AUTOINCREMENT,
  sandbox_id  TEXT NOT NULL,
  type        TEXT NOT NULL,
  data_json   TEXT NOT NULL,
  at          INTEGER NOT NULL
) STRICT;
CREATE INDEX events_by_sandbox ON events (sandbox_id, seq);
)sql",
    // 1 -> 2: a snapshot remembers the uid range its files belong to (a sandbox made from it
    // shifts them to its own) and the size of its disk, and the limits it was taken with.
    R"sql(
ALTER TABLE snapshots ADD COLUMN uid_base INTEGER NOT NULL DEFAULT 0;
ALTER TABLE snapshots ADD COLUMN limits_json TEXT NOT NULL DEFAULT '{}';
)sql",
    // 2 -> 3: the highest event seq a command's stream may have handed out, so that a daemon
    // that adopts the command after a restart numbers its events above it.
    R"sql(
ALTER TABLE commands ADD COLUMN seq_reserved INTEGER NOT NULL DEFAULT 0;
)sql",
    // 3 -> 4: the ledger. One row per debit: a model request's price (kind 'ai', micro-dollars,
    // with the usage it was priced from) or CPU time used in a sandbox (kind 'compute',
    // milliseconds). No foreign keys: the ledger outlives sandboxes and sessions.
    R"sql(
CREATE TABLE ledger (
  id                  INTEGER PRIMARY KEY AUTOINCREMENT,
  iss                 TEXT NOT NULL,
  sub                 TEXT NOT NULL,
  kind                TEXT NOT NULL CHECK (kind IN ('ai', 'compute')),
  amount              INTEGER NOT NULL,
  at                  INTEGER NOT NULL,
  sandbox_id          TEXT NOT NULL,
  session_id          TEXT NOT NULL,
  model               TEXT NOT NULL,
  input_tokens        INTEGER NOT NULL,
  output_tokens       INTEGER NOT NULL,
  cache_write_tokens  INTEGER NOT NULL,
  cache_read_tokens   INTEGER NOT NULL
) STRICT;
CREATE INDEX ledger_by_user ON ledger (iss, sub, kind, at);
)sql",
    // 4 -> 5: agent sessions. The transcript itself is Claude Code's, in the sandbox's
    // workspace; a row says whose session it is, how it was started and how it ended.
    R"sql(
CREATE TABLE sessions (
  id              TEXT NOT NULL PRIMARY KEY,
  sandbox_id      TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
  iss             TEXT NOT NULL,
  sub             TEXT NOT NULL,
  state           TEXT NOT NULL,
  agent_session   TEXT NOT NULL,
  parent_id       TEXT NOT NULL,
  options_json    TEXT NOT NULL,
  budget_json     TEXT NOT NULL,
  outcome_json    TEXT NOT NULL,
  cost_micro_usd  INTEGER NOT NULL,
  turns           INTEGER NOT NULL,
  created_at      INTEGER NOT NULL,
  updated_at      INTEGER NOT NULL,
  ended_at        INTEGER NOT NULL,
  seq_reserved    INTEGER NOT NULL
) STRICT;
CREATE INDEX sessions_by_user ON sessions (iss, sub);
CREATE INDEX sessions_by_sandbox ON sessions (sandbox_id);
)sql",
    // 5 -> 6: compute metering. A sandbox keeps the budget of the token that last started it
    // (its CPU time is debited against it) and how much of its cgroup's CPU time the ledger
    // already holds, so a restarted daemon that adopts it debits only what is new.
    R"sql(
ALTER TABLE sandboxes ADD COLUMN budget_json TEXT NOT NULL DEFAULT '{}';
ALTER TABLE sandboxes ADD COLUMN cpu_billed_usec INTEGER NOT NULL DEFAULT 0;
CREATE INDEX ledger_by_time ON ledger (at);
)sql",
    // 6 -> 7: headless executions (POST /v1/execute): what was asked and what came of it. No
    // foreign key: a record outlives the sandbox it ran in (destroyed when it ends). Its git
    // bundle, the one large column, lives in a table of its own, so that listing records never
    // reads it.
    R"sql(
CREATE TABLE executions (
  id              TEXT NOT NULL PRIMARY KEY,
  iss             TEXT NOT NULL,
  sub             TEXT NOT NULL,
  state           TEXT NOT NULL CHECK (state IN ('running', 'completed', 'failed')),
  sandbox_id      TEXT NOT NULL,
  session_id      TEXT NOT NULL,
  request_json    TEXT NOT NULL,
  base_commit     TEXT NOT NULL,
  head_commit     TEXT NOT NULL,
  summary         TEXT NOT NULL,
  outcome         TEXT NOT NULL,
  cost_micro_usd  INTEGER NOT NULL,
  usage_json      TEXT NOT NULL,
  files_json      TEXT NOT NULL,
  diff            TEXT NOT NULL,
  diff_truncated  INTEGER NOT NULL,
  bundle_bytes    INTEGER NOT NULL,
  error           TEXT NOT NULL,
  created_at      INTEGER NOT NULL,
  updated_at      INTEGER NOT NULL,
  ended_at        INTEGER NOT NULL
) STRICT;
CREATE INDEX executions_by_user ON executions (iss, sub);
CREATE INDEX executions_by_state ON executions (state);

CREATE TABLE execution_bundles (
  execution_id  TEXT NOT NULL PRIMARY KEY REFERENCES executions (id) ON DELETE CASCADE,
  data          BLOB NOT NULL
) STRICT;
)sql",
    // 7 -> 8: a sandbox's egress rules (JSON {"domains", "ports", "cidrs"}), changeable while it
    // runs; '' for a sandbox made before there were rules (it has none). The proxy's decisions
    // go to the events table (type 'egress').
    R"sql(
ALTER TABLE sandboxes ADD COLUMN egress_json TEXT NOT NULL DEFAULT '';
)sql",
    // 8 -> 9: a sandbox's network mode, fixed at create time: 'loopback' (only lo, the daemon's
    // services on it) or 'full' (a veth with NAT and filtering, supervisor/sandboxes/full_network.h).
    R"sql(
ALTER TABLE sandboxes ADD COLUMN network TEXT NOT NULL DEFAULT 'loopback';
)sql",
    // 9 -> 10: revoked token ids (supervisor/issuers.h): iss '' revokes the id for every issuer.
    R"sql(
CREATE TABLE revocations (
  iss         TEXT NOT NULL,
  jti         TEXT NOT NULL,
  revoked_at  INTEGER NOT NULL,
  PRIMARY KEY (iss, jti)
) STRICT;
)sql",
    // Images (supervisor/images/image_service.h): layers unpacked once and shared, images (by the
    // digest of their config) as stacks of layers, and tags naming them. A sandbox's and a
    // snapshot's `image` holds "host" or the image's digest; image_name the name it was asked by.
    R"sql(
CREATE TABLE layers (
  diff_id     TEXT NOT NULL PRIMARY KEY,
  bytes       INTEGER NOT NULL,
  created_at  INTEGER NOT NULL
) STRICT;
CREATE TABLE images (
  digest       TEXT NOT NULL PRIMARY KEY,
  config_json  TEXT NOT NULL,
  bytes        INTEGER NOT NULL,
  created_at   INTEGER NOT NULL,
  source       TEXT NOT NULL
) STRICT;
CREATE TABLE image_layers (
  image     TEXT NOT NULL REFERENCES images(digest) ON DELETE CASCADE,
  position  INTEGER NOT NULL,
  diff_id   TEXT NOT NULL REFERENCES layers(diff_id),
  PRIMARY KEY (image, position)
) STRICT;
CREATE INDEX image_layers_by_layer ON image_layers(diff_id);
CREATE TABLE image_tags (
  name        TEXT NOT NULL PRIMARY KEY,
  image       TEXT NOT NULL REFERENCES images(digest) ON DELETE CASCADE,
  updated_at  INTEGER NOT NULL
) STRICT;
CREATE INDEX image_tags_by_image ON image_tags(image);
ALTER TABLE sandboxes ADD COLUMN image_name TEXT NOT NULL DEFAULT '';
ALTER TABLE snapshots ADD COLUMN image_name TEXT NOT NULL DEFAULT '';
)sql",
    // 11 -> 12: the nodes of a fleet (supervisor/fleet/node_registry.h) and which node holds each
    // sandbox, snapshot and execution (a SQLite store is one node's: every row is its own). The
    // uid ranges stay unique in the whole table here; in PostgreSQL they are unique per node.
    R"sql(
CREATE TABLE nodes (
  id                TEXT NOT NULL PRIMARY KEY,
  address           TEXT NOT NULL,
  version           TEXT NOT NULL,
  started_at        INTEGER NOT NULL,
  heartbeat_at      INTEGER NOT NULL,
  drained           INTEGER NOT NULL,
  max_sandboxes     INTEGER NOT NULL,
  sandboxes         INTEGER NOT NULL,
  memory_total      INTEGER NOT NULL,
  memory_available  INTEGER NOT NULL
) STRICT;
ALTER TABLE sandboxes ADD COLUMN node_id TEXT NOT NULL DEFAULT '';
ALTER TABLE snapshots ADD COLUMN node_id TEXT NOT NULL DEFAULT '';
ALTER TABLE executions ADD COLUMN node_id TEXT NOT NULL DEFAULT '';
CREATE INDEX sandboxes_by_node ON sandboxes (node_id);
)sql",
    // 12 -> 13: budget holds (supervisor/relay/model_relay.h): one row per model call admitted
    // and not yet priced, with its most possible cost, counted against its user's AI budget by
    // every node. AUTOINCREMENT: an id is never reused, so a late settle or release of a hold
    // deleted meanwhile (stale, or its node restarted) cannot delete another call's. One row per
    // user in budget_users, which every admission of the user's calls writes first: on
    // PostgreSQL, the row lock that makes them take turns (Store::AdmitBudgetHold).
    R"sql(
CREATE TABLE budget_holds (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  iss         TEXT NOT NULL,
  sub         TEXT NOT NULL,
  node_id     TEXT NOT NULL,
  micro_usd   INTEGER NOT NULL,
  created_at  INTEGER NOT NULL
) STRICT;
CREATE INDEX budget_holds_by_user ON budget_holds (iss, sub, created_at);
CREATE INDEX budget_holds_by_node ON budget_holds (node_id);
CREATE TABLE budget_users (
  iss  TEXT NOT NULL,
  sub  TEXT NOT NULL,
  PRIMARY KEY (iss, sub)
) STRICT;
)sql",
    // 13 -> 14: secrets (supervisor/secrets/): a user's (sub set) or an issuer's (sub ''), by
    // name; the value sealed (secret_box.h), the bindings as JSON (secret_binding.h).
    R"sql(
CREATE TABLE secrets (
  iss            TEXT NOT NULL,
  sub            TEXT NOT NULL,
  name           TEXT NOT NULL,
  sealed         BLOB NOT NULL,
  bindings_json  TEXT NOT NULL,
  created_at     INTEGER NOT NULL,
  updated_at     INTEGER NOT NULL,
  PRIMARY KEY (iss, sub, name)
) STRICT;
)sql",
    // 14 -> 15: the secrets a sandbox may use, by name (a JSON array; '' for none).
    R"sql(
ALTER TABLE sandboxes ADD COLUMN secrets_json TEXT NOT NULL DEFAULT '';
)sql",
    // 15 -> 16: the webhook outbox (supervisor/webhooks/): one row per event and URL, written in
    // the transaction of what the event is about, its body kept as signed, leased to one node at
    // a time while it is sent. Times: unix seconds, but the *_ms (milliseconds). And the ledger by
    // session, for a session's usage when it ends.
    R"sql(
CREATE TABLE webhook_outbox (
  id               TEXT NOT NULL,
  url              TEXT NOT NULL,
  type             TEXT NOT NULL,
  body             TEXT NOT NULL,
  created_at       INTEGER NOT NULL,
  attempts         INTEGER NOT NULL DEFAULT 0,
  next_attempt_ms  INTEGER NOT NULL,
  delivered_at     INTEGER NOT NULL DEFAULT 0,
  given_up_at      INTEGER NOT NULL DEFAULT 0,
  last_error       TEXT NOT NULL DEFAULT '',
  lease_node       TEXT NOT NULL DEFAULT '',
  lease_until_ms   INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (id, url)
) STRICT;
CREATE INDEX webhook_outbox_due ON webhook_outbox (delivered_at, given_up_at, next_attempt_ms);
CREATE INDEX ledger_by_session ON ledger (session_id);
)sql",
    // 16 -> 17: ports a sandbox shows (preview URLs, api/port_proxy.h), and the key signed port
    // URLs are made with (one row, made by the first corrald that needs it: the same on every node).
    R"sql(
CREATE TABLE sandbox_ports (
  sandbox_id  TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
  port        INTEGER NOT NULL,
  public      INTEGER NOT NULL,
  created_at  INTEGER NOT NULL,
  PRIMARY KEY (sandbox_id, port)
) STRICT;
CREATE TABLE port_url_key (
  id   INTEGER PRIMARY KEY,
  key  BLOB NOT NULL
) STRICT;
)sql",
    // 17 -> 18: checkpoints of agent sessions (a snapshot and what a restore needs), gone with
    // their snapshot.
    R"sql(
CREATE TABLE checkpoints (
  id             TEXT NOT NULL PRIMARY KEY,
  session_id     TEXT NOT NULL,
  sandbox_id     TEXT NOT NULL,
  snapshot_id    TEXT NOT NULL REFERENCES snapshots (id) ON DELETE CASCADE,
  iss            TEXT NOT NULL,
  sub            TEXT NOT NULL,
  agent_session  TEXT NOT NULL,
  cwd            TEXT NOT NULL,
  turns          INTEGER NOT NULL,
  created_at     INTEGER NOT NULL
) STRICT;
CREATE INDEX checkpoints_by_session ON checkpoints (session_id, created_at);
CREATE INDEX checkpoints_by_snapshot ON checkpoints (snapshot_id);
)sql",
};
constexpr int kLatestSchemaVersion = static_cast<int>(std::size(kMigrations));
constexpr int kMinSqliteVersion = 3037000;  // STRICT tables.

// ---------------------------------------------------------------------------------------------
// Opening and migrating

// The file holds issuer secrets: create it 0600 ourselves (SQLite would use 0644 less the umask),
// and tighten an existing one. SQLite gives the -wal and -shm files the database file's mode.
Status CreatePrivateFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return ErrnoError("store: open " + path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("store: stat " + path);
  if (!S_ISREG(st.st_mode)) return Status::Error("store: " + path + " is not a regular file");
  if ((st.st_mode & 07777) != 0600 && ::fchmod(fd.get(), 0600) != 0) {
    return ErrnoError("store: chmod 0600 " + path);
  }
  return Status();
}

StatusOr<int64_t> UserVersion(SqlDb* db) {
  ASSIGN_OR_RETURN(std::optional<int64_t> version,
                   QueryInt(db, "PRAGMA user_version", {}, "read user_version"));
  return version.value_or(0);
}

Status CheckNotNewer(int64_t version) {
  if (version <= kLatestSchemaVersion) return Status();
  return Status::Error("store schema version " + std::to_string(version) +
                       " is newer than this corrald supports (" +
                       std::to_string(kLatestSchemaVersion) + ")");
}

// Runs the migration from the current user_version, read again under the write lock so that two
// processes opening the same new file do not both run it. Called inside a transaction.
Status MigrateOneStep(SqlDb* db) {
  ASSIGN_OR_RETURN(int64_t version, UserVersion(db));
  RETURN_IF_ERROR(CheckNotNewer(version));
  if (version >= kLatestSchemaVersion) return Status();
  std::string what = "migrate to schema version " + std::to_string(version + 1);
  RETURN_IF_ERROR(db->ExecScript(kMigrations[version], what));
  // PRAGMA takes no bound parameters; the value is our own integer.
  return db->ExecScript("PRAGMA user_version=" + std::to_string(version + 1), what);
}

// Before a store of an older schema is migrated: a copy of it as it was, beside it
// (<path>.schema-<N>.before-migration-<UTC time>, 0600), so that going back to the previous
// corrald stays possible. No copy, no migration.
Status CopyBeforeMigrating(SqlDb* db, const std::string& path) {
  ASSIGN_OR_RETURN(int64_t version, UserVersion(db));
  RETURN_IF_ERROR(CheckNotNewer(version));
  if (version == 0 || version >= kLatestSchemaVersion) return Status();  // new, or nothing to do
  const time_t now = time(nullptr);
  struct tm tm;
  gmtime_r(&now, &tm);
  char stamp[32];
  strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
  const std::string copy = path + ".schema-" + std::to_string(version) + ".before-migration-" + stamp;
  auto made = BackupStore(path, copy);
  if (!made.ok()) {
    return Status::Error("store: no copy of schema " + std::to_string(version) + " before migrating it to " +
                             std::to_string(kLatestSchemaVersion) + ", so it was not migrated: " +
                             made.status().message(),
                         made.status().error_number());
  }
  LogInfo("store", "copied the store before migrating it",
          {{"from", std::to_string(version)}, {"to", std::to_string(kLatestSchemaVersion)}, {"copy", copy}});
  return Status();
}

// Each migration in its own transaction, so a failure leaves the last good version.
Status Migrate(SqlDb* db) {
  ASSIGN_OR_RETURN(int64_t version, UserVersion(db));
  RETURN_IF_ERROR(CheckNotNewer(version));
  while (version < kLatestSchemaVersion) {
    RETURN_IF_ERROR(db->Transaction([db] { return MigrateOneStep(db); }));
    ASSIGN_OR_RETURN(int64_t migrated, UserVersion(db));
    if (migrated <= version) {
      return Status::Error("store: user_version stayed " + std::to_string(migrated) +
                           " after a migration");
    }
    version = migrated;
  }
  return Status();
}

}  // namespace

int SqliteLatestSchemaVersion() { return kLatestSchemaVersion; }

StatusOr<int64_t> SqliteSchemaVersion(SqlDb* db) { return UserVersion(db); }

StatusOr<std::unique_ptr<SqlDb>> OpenSqliteStore(const std::string& path, bool synchronous_full) {
  if (sqlite3_libversion_number() < kMinSqliteVersion) {
    return Status::Error(std::string("store: SQLite 3.37 or newer is required, this is ") + sqlite3_libversion());
  }
  RETURN_IF_ERROR(CreatePrivateFile(path));
  ASSIGN_OR_RETURN(std::unique_ptr<SqlDb> db, OpenSqlite(path, synchronous_full));
  RETURN_IF_ERROR(CopyBeforeMigrating(db.get(), path));
  RETURN_IF_ERROR(Migrate(db.get()));
  return db;
}

}  // namespace corral::supervisor::store_internal
