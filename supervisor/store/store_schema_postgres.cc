// The store's schema in PostgreSQL: the same tables and columns as in SQLite
// (store_schema_sqlite.cc, whose comments say what each is for), in PostgreSQL's types. The
// version is in table corral_schema; kPostgresMigrations[i] takes version i to i + 1. Append only.
//
// Types: SQLite's INTEGER is BIGINT (every integer the store keeps is an int64), BLOB is BYTEA,
// AUTOINCREMENT is BIGSERIAL. TEXT is COLLATE "C": compared and sorted byte by byte, as SQLite
// does, whatever the database's locale. A text column that may hold any bytes (a git diff:
// sql_db.h's Bytes) is BYTEA. The tables listed oldest first (store_sql.h's ListSql: ORDER BY
// created_at, rowid) have a BIGSERIAL column `rowid`, the insertion order SQLite has built in.
// A unique constraint named *_alloc guards a value a transaction allocates (the lowest free uid
// range): a conflict on it means a concurrent transaction took the same one first, and the
// engine runs the transaction again (sql_postgres.cc), as SQLite's write lock would have
// serialized them.
#include <cerrno>
#include <iterator>
#include <optional>
#include <string>

#include "common/log.h"
#include "supervisor/store/sql_postgres.h"
#include "supervisor/store/store_schema.h"
#include "supervisor/store/store_sql.h"

namespace corral::supervisor::store_internal {

namespace {

constexpr const char* kPostgresMigrations[] = {
    // 0 -> 1: the SQLite store as of its schema version 12, but for the uid ranges: unique per
    // node here (each node has its own uids), in the whole table in SQLite (one node).
    R"sql(
CREATE TABLE issuers (
  name        TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  secret      TEXT COLLATE "C" NOT NULL,
  created_at  BIGINT NOT NULL
);

CREATE TABLE revocations (
  iss         TEXT COLLATE "C" NOT NULL,
  jti         TEXT COLLATE "C" NOT NULL,
  revoked_at  BIGINT NOT NULL,
  PRIMARY KEY (iss, jti)
);

CREATE TABLE sandboxes (
  id               TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  iss              TEXT COLLATE "C" NOT NULL,
  sub              TEXT COLLATE "C" NOT NULL,
  name             TEXT COLLATE "C" NOT NULL,
  image            TEXT COLLATE "C" NOT NULL,
  state            TEXT COLLATE "C" NOT NULL,
  limits_json      TEXT COLLATE "C" NOT NULL,
  idle_timeout_s   BIGINT NOT NULL,
  uid_base         BIGINT NOT NULL,
  created_at       BIGINT NOT NULL,
  updated_at       BIGINT NOT NULL,
  last_active_at   BIGINT NOT NULL,
  init_pid         BIGINT NOT NULL,
  init_start_time  BIGINT NOT NULL,
  source           TEXT COLLATE "C" NOT NULL,
  budget_json      TEXT COLLATE "C" NOT NULL DEFAULT '{}',
  cpu_billed_usec  BIGINT NOT NULL DEFAULT 0,
  egress_json      TEXT COLLATE "C" NOT NULL DEFAULT '',
  network          TEXT COLLATE "C" NOT NULL DEFAULT 'loopback',
  image_name       TEXT COLLATE "C" NOT NULL DEFAULT '',
  node_id          TEXT COLLATE "C" NOT NULL DEFAULT '',
  rowid            BIGSERIAL,
  CONSTRAINT sandboxes_uid_alloc UNIQUE (node_id, uid_base)
);
CREATE INDEX sandboxes_by_user ON sandboxes (iss, sub);
CREATE INDEX sandboxes_by_node ON sandboxes (node_id);

CREATE TABLE snapshots (
  id           TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  sandbox_id   TEXT COLLATE "C" NOT NULL,
  iss          TEXT COLLATE "C" NOT NULL,
  sub          TEXT COLLATE "C" NOT NULL,
  image        TEXT COLLATE "C" NOT NULL,
  created_at   BIGINT NOT NULL,
  bytes        BIGINT NOT NULL,
  uid_base     BIGINT NOT NULL DEFAULT 0,
  limits_json  TEXT COLLATE "C" NOT NULL DEFAULT '{}',
  image_name   TEXT COLLATE "C" NOT NULL DEFAULT '',
  node_id      TEXT COLLATE "C" NOT NULL DEFAULT '',
  rowid        BIGSERIAL
);
CREATE INDEX snapshots_by_user ON snapshots (iss, sub);

CREATE TABLE commands (
  id            TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  sandbox_id    TEXT COLLATE "C" NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
  iss           TEXT COLLATE "C" NOT NULL,
  sub           TEXT COLLATE "C" NOT NULL,
  argv_json     TEXT COLLATE "C" NOT NULL,
  pty           BIGINT NOT NULL,
  state         TEXT COLLATE "C" NOT NULL,
  outcome_json  TEXT COLLATE "C" NOT NULL,
  created_at    BIGINT NOT NULL,
  ended_at      BIGINT NOT NULL,
  init_seq      BIGINT NOT NULL,
  seq_reserved  BIGINT NOT NULL DEFAULT 0,
  UNIQUE (sandbox_id, init_seq)
);
CREATE INDEX commands_by_state ON commands (sandbox_id, state);

CREATE TABLE events (
  seq         BIGSERIAL PRIMARY KEY,
  sandbox_id  TEXT COLLATE "C" NOT NULL,
  type        TEXT COLLATE "C" NOT NULL,
  data_json   TEXT COLLATE "C" NOT NULL,
  at          BIGINT NOT NULL
);
CREATE INDEX events_by_sandbox ON events (sandbox_id, seq);

CREATE TABLE ledger (
  id                  BIGSERIAL PRIMARY KEY,
  iss                 TEXT COLLATE "C" NOT NULL,
  sub                 TEXT COLLATE "C" NOT NULL,
  kind                TEXT COLLATE "C" NOT NULL CHECK (kind IN ('ai', 'compute')),
  amount              BIGINT NOT NULL,
  at                  BIGINT NOT NULL,
  sandbox_id          TEXT COLLATE "C" NOT NULL,
  session_id          TEXT COLLATE "C" NOT NULL,
  model               TEXT COLLATE "C" NOT NULL,
  input_tokens        BIGINT NOT NULL,
  output_tokens       BIGINT NOT NULL,
  cache_write_tokens  BIGINT NOT NULL,
  cache_read_tokens   BIGINT NOT NULL
);
CREATE INDEX ledger_by_user ON ledger (iss, sub, kind, at);
CREATE INDEX ledger_by_time ON ledger (at);

CREATE TABLE sessions (
  id              TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  sandbox_id      TEXT COLLATE "C" NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
  iss             TEXT COLLATE "C" NOT NULL,
  sub             TEXT COLLATE "C" NOT NULL,
  state           TEXT COLLATE "C" NOT NULL,
  agent_session   TEXT COLLATE "C" NOT NULL,
  parent_id       TEXT COLLATE "C" NOT NULL,
  options_json    TEXT COLLATE "C" NOT NULL,
  budget_json     TEXT COLLATE "C" NOT NULL,
  outcome_json    TEXT COLLATE "C" NOT NULL,
  cost_micro_usd  BIGINT NOT NULL,
  turns           BIGINT NOT NULL,
  created_at      BIGINT NOT NULL,
  updated_at      BIGINT NOT NULL,
  ended_at        BIGINT NOT NULL,
  seq_reserved    BIGINT NOT NULL,
  rowid           BIGSERIAL
);
CREATE INDEX sessions_by_user ON sessions (iss, sub);
CREATE INDEX sessions_by_sandbox ON sessions (sandbox_id);

CREATE TABLE executions (
  id              TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  iss             TEXT COLLATE "C" NOT NULL,
  sub             TEXT COLLATE "C" NOT NULL,
  state           TEXT COLLATE "C" NOT NULL CHECK (state IN ('running', 'completed', 'failed')),
  sandbox_id      TEXT COLLATE "C" NOT NULL,
  session_id      TEXT COLLATE "C" NOT NULL,
  request_json    TEXT COLLATE "C" NOT NULL,
  base_commit     TEXT COLLATE "C" NOT NULL,
  head_commit     TEXT COLLATE "C" NOT NULL,
  summary         TEXT COLLATE "C" NOT NULL,
  outcome         TEXT COLLATE "C" NOT NULL,
  cost_micro_usd  BIGINT NOT NULL,
  usage_json      TEXT COLLATE "C" NOT NULL,
  files_json      TEXT COLLATE "C" NOT NULL,
  diff            BYTEA NOT NULL,
  diff_truncated  BIGINT NOT NULL,
  bundle_bytes    BIGINT NOT NULL,
  error           TEXT COLLATE "C" NOT NULL,
  created_at      BIGINT NOT NULL,
  updated_at      BIGINT NOT NULL,
  ended_at        BIGINT NOT NULL,
  node_id         TEXT COLLATE "C" NOT NULL DEFAULT '',
  rowid           BIGSERIAL
);
CREATE INDEX executions_by_user ON executions (iss, sub);
CREATE INDEX executions_by_state ON executions (state);

CREATE TABLE execution_bundles (
  execution_id  TEXT COLLATE "C" NOT NULL PRIMARY KEY REFERENCES executions (id) ON DELETE CASCADE,
  data          BYTEA NOT NULL
);

CREATE TABLE layers (
  diff_id     TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  bytes       BIGINT NOT NULL,
  created_at  BIGINT NOT NULL
);
CREATE TABLE images (
  digest       TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  config_json  TEXT COLLATE "C" NOT NULL,
  bytes        BIGINT NOT NULL,
  created_at   BIGINT NOT NULL,
  source       TEXT COLLATE "C" NOT NULL
);
CREATE TABLE image_layers (
  image     TEXT COLLATE "C" NOT NULL REFERENCES images (digest) ON DELETE CASCADE,
  position  BIGINT NOT NULL,
  diff_id   TEXT COLLATE "C" NOT NULL REFERENCES layers (diff_id),
  PRIMARY KEY (image, position)
);
CREATE INDEX image_layers_by_layer ON image_layers (diff_id);
CREATE TABLE image_tags (
  name        TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  image       TEXT COLLATE "C" NOT NULL REFERENCES images (digest) ON DELETE CASCADE,
  updated_at  BIGINT NOT NULL
);
CREATE INDEX image_tags_by_image ON image_tags (image);

CREATE TABLE nodes (
  id                TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  address           TEXT COLLATE "C" NOT NULL,
  version           TEXT COLLATE "C" NOT NULL,
  started_at        BIGINT NOT NULL,
  heartbeat_at      BIGINT NOT NULL,
  drained           BIGINT NOT NULL,
  max_sandboxes     BIGINT NOT NULL,
  sandboxes         BIGINT NOT NULL,
  memory_total      BIGINT NOT NULL,
  memory_available  BIGINT NOT NULL
);
)sql",
    // 1 -> 2: budget holds and their users' rows, as SQLite's 12 -> 13 (model calls admitted and
    // not yet priced, on every node; the row each admission of a user's calls locks first).
    R"sql(
CREATE TABLE budget_holds (
  id          BIGSERIAL PRIMARY KEY,
  iss         TEXT COLLATE "C" NOT NULL,
  sub         TEXT COLLATE "C" NOT NULL,
  node_id     TEXT COLLATE "C" NOT NULL,
  micro_usd   BIGINT NOT NULL,
  created_at  BIGINT NOT NULL
);
CREATE INDEX budget_holds_by_user ON budget_holds (iss, sub, created_at);
CREATE INDEX budget_holds_by_node ON budget_holds (node_id);
CREATE TABLE budget_users (
  iss  TEXT COLLATE "C" NOT NULL,
  sub  TEXT COLLATE "C" NOT NULL,
  PRIMARY KEY (iss, sub)
);
)sql",
    // 2 -> 3: secrets, as SQLite's 13 -> 14.
    R"sql(
CREATE TABLE secrets (
  iss            TEXT COLLATE "C" NOT NULL,
  sub            TEXT COLLATE "C" NOT NULL,
  name           TEXT COLLATE "C" NOT NULL,
  sealed         BYTEA NOT NULL,
  bindings_json  TEXT COLLATE "C" NOT NULL,
  created_at     BIGINT NOT NULL,
  updated_at     BIGINT NOT NULL,
  PRIMARY KEY (iss, sub, name)
);
)sql",
    // 3 -> 4: sandboxes' secrets, as SQLite's 14 -> 15.
    R"sql(
ALTER TABLE sandboxes ADD COLUMN secrets_json TEXT COLLATE "C" NOT NULL DEFAULT '';
)sql",
    // 4 -> 5: the webhook outbox, as SQLite's 15 -> 16.
    R"sql(
CREATE TABLE webhook_outbox (
  id               TEXT COLLATE "C" NOT NULL,
  url              TEXT COLLATE "C" NOT NULL,
  type             TEXT COLLATE "C" NOT NULL,
  body             TEXT NOT NULL,
  created_at       BIGINT NOT NULL,
  attempts         BIGINT NOT NULL DEFAULT 0,
  next_attempt_ms  BIGINT NOT NULL,
  delivered_at     BIGINT NOT NULL DEFAULT 0,
  given_up_at      BIGINT NOT NULL DEFAULT 0,
  last_error       TEXT NOT NULL DEFAULT '',
  lease_node       TEXT COLLATE "C" NOT NULL DEFAULT '',
  lease_until_ms   BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (id, url)
);
CREATE INDEX webhook_outbox_due ON webhook_outbox (delivered_at, given_up_at, next_attempt_ms);
CREATE INDEX ledger_by_session ON ledger (session_id);
)sql",
    // 5 -> 6: sandbox ports and the signed port URLs' key, as SQLite's 16 -> 17.
    R"sql(
CREATE TABLE sandbox_ports (
  sandbox_id  TEXT COLLATE "C" NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
  port        BIGINT NOT NULL,
  public      BIGINT NOT NULL,
  created_at  BIGINT NOT NULL,
  PRIMARY KEY (sandbox_id, port)
);
CREATE TABLE port_url_key (
  id   BIGINT PRIMARY KEY,
  key  BYTEA NOT NULL
);
)sql",
    // 6 -> 7: checkpoints, as SQLite's 17 -> 18.
    R"sql(
CREATE TABLE checkpoints (
  id             TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  session_id     TEXT COLLATE "C" NOT NULL,
  sandbox_id     TEXT COLLATE "C" NOT NULL,
  snapshot_id    TEXT COLLATE "C" NOT NULL REFERENCES snapshots (id) ON DELETE CASCADE,
  iss            TEXT COLLATE "C" NOT NULL,
  sub            TEXT COLLATE "C" NOT NULL,
  agent_session  TEXT NOT NULL,
  cwd            TEXT NOT NULL,
  turns          BIGINT NOT NULL,
  created_at     BIGINT NOT NULL
);
CREATE INDEX checkpoints_by_session ON checkpoints (session_id, created_at);
CREATE INDEX checkpoints_by_snapshot ON checkpoints (snapshot_id);
)sql",
};
constexpr int kPostgresLatest = static_cast<int>(std::size(kPostgresMigrations));

// Any 64-bit number of our own, the same in every corrald: the key of the advisory lock that
// serializes migrations between nodes.
constexpr int64_t kPostgresMigrationLock = 0x636f7272616c;  // "corral"

StatusOr<int64_t> PostgresVersion(SqlDb* db) {
  ASSIGN_OR_RETURN(std::optional<int64_t> exists,
                   QueryInt(db, "SELECT COUNT(*) FROM pg_catalog.pg_tables WHERE schemaname = current_schema() "
                                "AND tablename = 'corral_schema'",
                            {}, "find the schema version"));
  if (exists.value_or(0) == 0) return 0;
  ASSIGN_OR_RETURN(std::optional<int64_t> version,
                   QueryInt(db, "SELECT MAX(version) FROM corral_schema", {}, "read the schema version"));
  return version.value_or(0);
}

Status CheckPostgresNotNewer(int64_t version) {
  if (version <= kPostgresLatest) return Status();
  return Status::Error("store schema version " + std::to_string(version) +
                       " (PostgreSQL) is newer than this corrald supports (" +
                       std::to_string(kPostgresLatest) + ")");
}

// One migration, in a transaction, from the version read inside it.
Status MigratePostgresOneStep(SqlDb* db) {
  ASSIGN_OR_RETURN(int64_t version, PostgresVersion(db));
  RETURN_IF_ERROR(CheckPostgresNotNewer(version));
  if (version >= kPostgresLatest) return Status();
  const std::string what = "migrate to schema version " + std::to_string(version + 1);
  if (version == 0) RETURN_IF_ERROR(db->ExecScript("CREATE TABLE corral_schema (version BIGINT NOT NULL)", what));
  RETURN_IF_ERROR(db->ExecScript(kPostgresMigrations[version], what));
  return Run(db, "INSERT INTO corral_schema (version) VALUES (?1)", {int64_t{version + 1}}, what);
}

// Every migration still to run, under a session-level advisory lock (taken outside any
// transaction: a SERIALIZABLE transaction's snapshot would predate another node's migration it
// waited for).
Status MigratePostgres(SqlDb* db) {
  RETURN_IF_ERROR(Run(db, "SELECT pg_advisory_lock(?1)", {kPostgresMigrationLock}, "lock the schema for migrating"));
  Status status;
  while (status.ok()) {
    StatusOr<int64_t> version = PostgresVersion(db);
    if (!version.ok()) {
      status = version.status();
      break;
    }
    status = CheckPostgresNotNewer(*version);
    if (!status.ok() || *version >= kPostgresLatest) break;
    status = db->Transaction([db] { return MigratePostgresOneStep(db); });
    if (status.ok()) {
      LogInfo("store", "migrated the PostgreSQL schema",
              {{"from", std::to_string(*version)}, {"to", std::to_string(*version + 1)}});
    }
  }
  Status unlocked = Run(db, "SELECT pg_advisory_unlock(?1)", {kPostgresMigrationLock}, "unlock the schema");
  return status.ok() ? unlocked : status;
}

}  // namespace

int PostgresLatestSchemaVersion() { return kPostgresLatest; }

StatusOr<int64_t> PostgresSchemaVersion(SqlDb* db) { return PostgresVersion(db); }

StatusOr<std::unique_ptr<SqlDb>> OpenPostgresStore(const std::string& url) {
  ASSIGN_OR_RETURN(std::unique_ptr<SqlDb> db, ConnectPostgres(url));
  RETURN_IF_ERROR(MigratePostgres(db.get()));
  return db;
}

}  // namespace corral::supervisor::store_internal
