// The protocol's JSON (docs/PROTOCOL.md), at the API's edge: requests are parsed and checked
// here, once, into the supervisor's values; replies are made here from its rows. The route files
// (routes.h) and the WebSocket protocol (ws_api.h) handle no JSON text but through these.
//
// Checks are strict: a body is a JSON object, a field the route does not take is an error (not
// something silently left at its default), a mistyped field is an error naming the field. Every
// error is EINVAL (bad_request) with a message for the client.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/auth_context.h"
#include "api/server_types.h"
#include "common/status.h"
#include "supervisor/sessions/executions.h"
#include "supervisor/relay/ledger.h"
#include "supervisor/relay/rate_limiter.h"
#include "supervisor/sandboxes/sandbox_files.h"
#include "supervisor/sandboxes/sandbox_manager.h"
#include "supervisor/sessions/session_runner.h"
#include "supervisor/store/store.h"

namespace corral::api {

// ---- Replies ----

// Strings in a reply are UTF-8. kThrow: invalid UTF-8 is a bug (nlohmann throws; the server logs
// it); kReplace: it is data (git's output, paths) and becomes U+FFFD.
enum class InvalidUtf8 { kThrow, kReplace };

HttpResponse JsonResponse(int status, const nlohmann::json& body, InvalidUtf8 invalid = InvalidUtf8::kThrow);
// The stable code for the Status's errno (ErrorCodeFor); an internal error's details go to the
// log, never to the client.
HttpResponse ErrorResponse(const Status& status);
HttpResponse BytesResponse(std::string bytes, std::string content_type = "application/octet-stream");
// 200 with to_json(*value), or the error.
template <typename T, typename ToJson>
HttpResponse ValueResponse(const StatusOr<T>& value, ToJson&& to_json) {
  if (!value.ok()) return ErrorResponse(value.status());
  return JsonResponse(200, to_json(*value));
}
// 200 with {key: [to_json(row), ...]}, or the error.
template <typename Row, typename ToJson>
HttpResponse ListResponse(const StatusOr<std::vector<Row>>& rows, const char* key, ToJson&& to_json) {
  if (!rows.ok()) return ErrorResponse(rows.status());
  nlohmann::json list = nlohmann::json::array();
  for (const Row& row : *rows) list.push_back(to_json(row));
  return JsonResponse(200, {{key, list}});
}

// EPERM: the token lacks the scope.
Status ScopeError(const char* scope);
// Answers ScopeError and returns false when the request's token lacks `scope`.
bool RequireScope(const HttpRequest& request, const char* scope, const Responder& respond);
// EUSERS: the user is over api.requests_per_minute, with when to retry.
Status RateLimitedError(supervisor::RateLimiter& limiter, const AuthContext& auth);

// ---- Bodies and their fields ----

// "" is {}; anything but a JSON object is EINVAL.
StatusOr<nlohmann::json> ParseBody(const std::string& body);
// A field the daemon does not know is an error, not something silently left at its default (a
// misplaced {"cpus": 2} used to give a sandbox one CPU without a word).
Status RefuseUnknownFields(const nlohmann::json& body, std::initializer_list<std::string_view> known,
                           const char* where = nullptr);
// An optional unsigned integer field; a wrong type is an error naming the field.
Status OptionalUint(const nlohmann::json& body, const char* key, std::optional<uint64_t>& out);
// An optional string field (unchanged when absent); a wrong type is an error naming the field.
Status OptionalString(const nlohmann::json& body, const char* key, std::string& out);

// ---- Query parameters ----

// A non-negative integer; `fallback` when absent or empty.
StatusOr<int64_t> QueryInt(const std::map<std::string, std::string>& query, const char* key, int64_t fallback);
// "true"/"1" or "false"/"0"; `fallback` when absent.
StatusOr<bool> QueryBool(const HttpRequest& request, const char* key, bool fallback);
// ?mode=: octal up to 07777; `fallback` when absent.
StatusOr<uint32_t> QueryMode(const HttpRequest& request, uint32_t fallback);
// A required, non-empty path inside the sandbox.
StatusOr<std::string> QueryPath(const HttpRequest& request, const char* key = "path");

// ---- Requests ----

// POST /v1/sandboxes: {"name"?, "image"?, "start"?, "snapshot"?, "idle_timeout_s"?, "limits"?:
// {"memory_bytes", "cpus", "pids", "disk_bytes"}, "egress"? (checked here; the caps, by the
// manager), "network"?, "unsafe"?}. Network "full" needs "unsafe": ["full_network"] beside it.
// "secrets": a list of names (strings); the supervisor checks the names themselves.
StatusOr<std::vector<std::string>> ParseSecretNames(const nlohmann::json& names);
StatusOr<supervisor::CreateRequest> ParseCreate(const nlohmann::json& body);
// POST /v1/sandboxes/{id}/fork: {"name"?, "start"?}.
StatusOr<supervisor::ForkRequest> ParseFork(const nlohmann::json& body);
// POST /v1/sandboxes/{id}/sessions: {"prompt"?, "model"?, "permission_mode"?, "cwd"?, "resume"?,
// "fork"?, "allowed_tools"?, "disallowed_tools"?, "partial"?, "tools"?}.
StatusOr<supervisor::NewSession> ParseNewSession(const nlohmann::json& body);
// POST /v1/execute: {"repo": {"bundle": BASE64} | {"path": DIR}, "task", "model"?,
// "permission_mode"?, "timeout_s"?, "keep_sandbox"?}. The bundle is base64 in either alphabet,
// padded or not, line breaks and spaces skipped (`base64` wraps its output).
StatusOr<supervisor::ExecuteRequest> ParseExecute(const std::string& body);
// The WebSocket's exec op: {"sandbox", "argv", "env"?, "cwd"?, "user"?, "stdin"?, "pty"?:
// {"rows", "cols"}} (the caller checks the scope the pty asks for).
StatusOr<supervisor::ExecSpec> ParseExecSpec(const nlohmann::json& request);
// A signal by name ("TERM", "SIGTERM") or number (1 to 64); -1 for anything else.
int SignalNumber(const nlohmann::json& value);

// ?path= (default the execute repository) and ?base= of the git routes.
struct GitQuery {
  std::string path = supervisor::kExecuteRepoPath;
  std::string base;
};
StatusOr<GitQuery> ParseGitQuery(const HttpRequest& request);

// GET /v1/admin/usage?issuer=&user=&from=&to=&window=&format=jsonl|csv&after_id=&limit=
struct LedgerExport {
  supervisor::LedgerQuery query;
  bool csv = false;  // else JSON lines
};
StatusOr<LedgerExport> ParseLedgerExport(const std::map<std::string, std::string>& query, int64_t now);

// ---- Replies' bodies ----

// The owner (iss, sub) is shown to the admin socket only.
nlohmann::json SandboxJson(const supervisor::SandboxRow& row, bool with_owner);
// {"domains", "ports", "cidrs"}: a sandbox's egress rules as stored (none before there were rules).
nlohmann::json EgressJson(const supervisor::SandboxRow& row);
nlohmann::json SnapshotJson(const supervisor::SnapshotRow& row, bool with_owner);
nlohmann::json CommandJson(const supervisor::CommandRow& row);
nlohmann::json SessionJson(const supervisor::SessionRow& row);
// {"name", "type", "size", "mode": "0644", "mtime"}
nlohmann::json FileInfoJson(const supervisor::FileInfo& info);
// {"seq", "type", "at", "data"}: one entry of GET /v1/sandboxes/{id}/events.
nlohmann::json EventJson(const supervisor::EventRow& event);
// The same as a WebSocket watcher gets it, with {"event": "sandbox", "sandbox"}.
nlohmann::json SandboxEventJson(const supervisor::EventRow& event);
// An execution's record; lists leave the diffs out (`with_diff`).
nlohmann::json ExecutionJson(const supervisor::ExecutionRow& row, bool with_diff, bool with_owner);

}  // namespace corral::api
