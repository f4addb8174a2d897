// The store's row types as columns (internal to the store's .cc files): for each table, its
// column list and the row's fields in that order. One definition drives both binding values and
// reading rows, so a column cannot be bound in one order and read in another. Nothing here is
// particular to SQLite. Typed fields (limits, egress, budget) are encoded by store_columns.h.
#pragma once

#include <concepts>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "supervisor/store/store.h"

namespace corral::supervisor::store_internal {

// Column lists, in the order of the Fields() functions below. SQL text is only ever assembled
// from these constants; values are always bound.
constexpr std::string_view kIssuerColumns = "name, secret, created_at";
constexpr std::string_view kRevocationColumns = "iss, jti, revoked_at";
constexpr std::string_view kSandboxColumns =
    "id, iss, sub, name, image, state, limits_json, idle_timeout_s, uid_base, created_at, "
    "updated_at, last_active_at, init_pid, init_start_time, source, budget_json, cpu_billed_usec, egress_json, network, image_name, "
    "node_id, secrets_json";
constexpr std::string_view kSnapshotColumns =
    "id, sandbox_id, iss, sub, image, created_at, bytes, uid_base, limits_json, image_name, node_id";
constexpr std::string_view kLayerColumns = "diff_id, bytes, created_at";
constexpr std::string_view kImageColumns = "digest, config_json, bytes, created_at, source";
constexpr std::string_view kCommandColumns =
    "id, sandbox_id, iss, sub, argv_json, pty, state, outcome_json, created_at, ended_at, init_seq, "
    "seq_reserved";
constexpr std::string_view kEventColumns = "seq, sandbox_id, type, data_json, at";
constexpr std::string_view kSessionColumns =
    "id, sandbox_id, iss, sub, state, agent_session, parent_id, options_json, budget_json, outcome_json, "
    "cost_micro_usd, turns, created_at, updated_at, ended_at, seq_reserved";
constexpr std::string_view kExecutionColumns =
    "id, iss, sub, state, sandbox_id, session_id, request_json, base_commit, head_commit, summary, outcome, "
    "cost_micro_usd, usage_json, files_json, diff, diff_truncated, bundle_bytes, error, created_at, updated_at, "
    "ended_at, node_id";
constexpr std::string_view kNodeColumns =
    "id, address, version, started_at, heartbeat_at, drained, max_sandboxes, sandboxes, memory_total, "
    "memory_available";
constexpr std::string_view kLedgerColumns =
    "id, iss, sub, kind, amount, at, sandbox_id, session_id, model, input_tokens, output_tokens, "
    "cache_write_tokens, cache_read_tokens";
constexpr std::string_view kOutboxColumns =
    "id, url, type, body, created_at, attempts, next_attempt_ms, delivered_at, given_up_at, last_error, lease_node, "
    "lease_until_ms";

// A table whose first column is its key ("id"): its name, its columns, and what one row is called
// in errors ("get session ses_...").
struct Table {
  std::string_view name;
  std::string_view columns;
  std::string_view noun;
};
constexpr Table kSandboxes{"sandboxes", kSandboxColumns, "sandbox"};
constexpr Table kSnapshots{"snapshots", kSnapshotColumns, "snapshot"};
constexpr Table kCommands{"commands", kCommandColumns, "command"};
constexpr Table kSessions{"sessions", kSessionColumns, "session"};
constexpr Table kExecutions{"executions", kExecutionColumns, "execution"};

// The fields of each row type, in the order of its k*Columns list. `R` is the row type, const or
// not.
template <typename R, typename Row>
concept RowOf = std::same_as<std::remove_const_t<R>, Row>;

inline auto Fields(RowOf<IssuerRow> auto& r) { return std::tie(r.name, r.secret, r.created_at); }
inline auto Fields(RowOf<RevocationRow> auto& r) { return std::tie(r.iss, r.jti, r.revoked_at); }

inline auto Fields(RowOf<SandboxRow> auto& r) {
  return std::tie(r.id, r.iss, r.sub, r.name, r.image, r.state, r.limits, r.idle_timeout_s,
                  r.uid_base, r.created_at, r.updated_at, r.last_active_at, r.init_pid,
                  r.init_start_time, r.source, r.budget, r.cpu_billed_usec, r.egress, r.network, r.image_name,
                  r.node_id, r.secrets);
}

inline auto Fields(RowOf<SnapshotRow> auto& r) {
  return std::tie(r.id, r.sandbox_id, r.iss, r.sub, r.image, r.created_at, r.bytes, r.uid_base,
                  r.limits, r.image_name, r.node_id);
}

inline auto Fields(RowOf<LayerRow> auto& r) { return std::tie(r.diff_id, r.bytes, r.created_at); }
// An image's own columns; its layers and names are in image_layers and image_tags.
inline auto Fields(RowOf<ImageRow> auto& r) { return std::tie(r.digest, r.config, r.bytes, r.created_at, r.source); }

inline auto Fields(RowOf<CommandRow> auto& r) {
  return std::tie(r.id, r.sandbox_id, r.iss, r.sub, r.argv_json, r.pty, r.state, r.outcome_json,
                  r.created_at, r.ended_at, r.init_seq, r.seq_reserved);
}

inline auto Fields(RowOf<SessionRow> auto& r) {
  return std::tie(r.id, r.sandbox_id, r.iss, r.sub, r.state, r.agent_session, r.parent_id, r.options_json,
                  r.budget, r.outcome_json, r.cost_micro_usd, r.turns, r.created_at, r.updated_at, r.ended_at,
                  r.seq_reserved);
}

// A text field that may hold any bytes (sql_db.h's Bytes), in a row's Fields().
template <typename S>
struct BytesField {
  S& text;
};
template <typename S>
BytesField<S> AsBytes(S& text) {
  return {text};
}

inline auto Fields(RowOf<ExecutionRow> auto& r) {
  // The diff is git's output: any bytes.
  return std::tuple_cat(std::tie(r.id, r.iss, r.sub, r.state, r.sandbox_id, r.session_id, r.request_json,
                                 r.base_commit, r.head_commit, r.summary, r.outcome, r.cost_micro_usd, r.usage_json,
                                 r.files_json),
                        std::make_tuple(AsBytes(r.diff)),
                        std::tie(r.diff_truncated, r.bundle_bytes, r.error, r.created_at, r.updated_at, r.ended_at,
                                 r.node_id));
}

inline auto Fields(RowOf<NodeRow> auto& r) {
  return std::tie(r.id, r.address, r.version, r.started_at, r.heartbeat_at, r.drained, r.max_sandboxes, r.sandboxes,
                  r.memory_total, r.memory_available);
}

inline auto Fields(RowOf<LedgerRow> auto& r) {
  return std::tie(r.id, r.iss, r.sub, r.kind, r.amount, r.at, r.sandbox_id, r.session_id, r.model,
                  r.input_tokens, r.output_tokens, r.cache_write_tokens, r.cache_read_tokens);
}

inline auto Fields(RowOf<LedgerTotal> auto& r) {
  return std::tie(r.kind, r.sandbox_id, r.session_id, r.amount, r.count);
}

inline auto Fields(RowOf<OutboxRow> auto& r) {
  return std::tie(r.id, r.url, r.type, r.body, r.created_at, r.attempts, r.next_attempt_ms, r.delivered_at,
                  r.given_up_at, r.last_error, r.lease_node, r.lease_until_ms);
}

inline auto Fields(RowOf<EventRow> auto& r) {
  return std::tie(r.seq, r.sandbox_id, r.type, r.data_json, r.at);
}

}  // namespace corral::supervisor::store_internal
