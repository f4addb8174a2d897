#include "api/execute_api.h"

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "api/auth_mapping.h"
#include "api/daemon_api.h"
#include "common/base64.h"
#include "common/log.h"
#include "supervisor/budget.h"

namespace corral::api {
namespace {

using nlohmann::json;
using supervisor::ExecutionRow;

constexpr size_t kMaxRevisionBytes = 256;

// JSON bodies here carry git's output and paths, which may be any bytes: invalid UTF-8 is
// replaced (U+FFFD) rather than refused.
HttpResponse JsonResponse(int status, const json& body) {
  HttpResponse response;
  response.status = status;
  response.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return response;
}

HttpResponse ErrorResponse(Status status) {
  // A git that hung is the daemon's trouble, not a bug: unavailable, with the message.
  if (status.error_number() == ETIMEDOUT) status = Status::Error(status.message(), EAGAIN);
  const ErrorCode code = ErrorCodeFor(status);
  if (code == ErrorCode::kInternal) LogError("api", "internal error", {{"error", status.ToString()}});
  HttpResponse response;
  response.status = HttpStatusFor(code);
  response.body = ErrorBody(ErrorCodeName(code), code == ErrorCode::kInternal ? "internal error" : status.message());
  return response;
}

HttpResponse BytesResponse(std::string bytes) {
  HttpResponse response;
  response.content_type = "application/octet-stream";
  response.body = std::move(bytes);
  return response;
}

Status ScopeError(const char* scope) {
  return Status::Error(std::string("this token lacks the \"") + scope + "\" scope", EPERM);
}

// A bundle in standard or URL-safe base64, padded or not; line breaks and spaces are skipped
// (`base64` wraps its output).
std::optional<std::string> DecodeBundle(std::string_view text) {
  std::string packed(text);
  packed.erase(std::remove_if(packed.begin(), packed.end(),
                              [](char c) { return c == '\n' || c == '\r' || c == ' ' || c == '\t'; }),
               packed.end());
  return Base64DecodeEither(packed);
}

StatusOr<json> ParseObject(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::Error("the body must be a JSON object", EINVAL);
  return j;
}

// {"repo": {"bundle": BASE64} | {"path": DIR}, "task", "model"?, "permission_mode"?, "timeout_s"?,
//  "keep_sandbox"?}
StatusOr<supervisor::ExecuteRequest> ParseExecute(const std::string& text) {
  ASSIGN_OR_RETURN(json body, ParseObject(text));
  supervisor::ExecuteRequest request;
  for (const auto& [key, value] : body.items()) {
    if (key == "task" || key == "model" || key == "permission_mode") {
      if (!value.is_string()) return Status::Error(key + ": expected a string", EINVAL);
      std::string& into = key == "task" ? request.task : key == "model" ? request.model : request.permission_mode;
      into = value.get<std::string>();
    } else if (key == "timeout_s") {
      if (!value.is_number_unsigned()) return Status::Error("timeout_s: expected a positive integer", EINVAL);
      request.timeout_s = value.get<uint64_t>();
    } else if (key == "keep_sandbox") {
      if (!value.is_boolean()) return Status::Error("keep_sandbox: expected true or false", EINVAL);
      request.keep_sandbox = value.get<bool>();
    } else if (key == "repo") {
      const bool bundle = value.is_object() && value.size() == 1 && value.contains("bundle");
      const bool path = value.is_object() && value.size() == 1 && value.contains("path");
      if (!bundle && !path) return Status::Error("repo: either {\"bundle\": BASE64} or {\"path\": DIR}", EINVAL);
      const json& field = bundle ? value["bundle"] : value["path"];
      if (!field.is_string() || field.get_ref<const std::string&>().empty()) {
        return Status::Error(std::string("repo.") + (bundle ? "bundle" : "path") + ": expected a non-empty string",
                             EINVAL);
      }
      if (path) {
        request.host_path = field.get<std::string>();
        continue;
      }
      auto decoded = DecodeBundle(field.get_ref<const std::string&>());
      if (!decoded || decoded->empty()) return Status::Error("repo.bundle: not base64 (a git bundle's bytes)", EINVAL);
      request.bundle = std::move(*decoded);
    } else {
      return Status::Error("unknown field \"" + key + "\"", EINVAL);
    }
  }
  if (!body.contains("repo")) return Status::Error("repo: required ({\"bundle\": BASE64} or {\"path\": DIR})", EINVAL);
  return request;
}

json ParsedOr(const std::string& text, json fallback) {
  json value = json::parse(text, nullptr, false);
  return value.is_discarded() ? fallback : value;
}

// The record. `with_diff`: GET of one record; lists leave the diffs out.
json ExecutionJson(const ExecutionRow& row, bool with_diff, bool with_owner) {
  json asked = ParsedOr(row.request_json, json::object());
  json j = {{"id", row.id},
            {"state", row.state},
            {"sandbox", row.sandbox_id.empty() ? json() : json(row.sandbox_id)},
            {"session", row.session_id.empty() ? json() : json(row.session_id)},
            {"task", asked.value("task", "")},
            {"repo", asked.value("repo", "")},
            {"model", asked.value("model", "")},
            {"permission_mode", asked.value("permission_mode", "")},
            {"timeout_s", asked.value("timeout_s", 0)},
            {"keep_sandbox", asked.value("keep_sandbox", false)},
            {"base", row.base_commit.empty() ? json() : json(row.base_commit)},
            {"created_at", row.created_at},
            {"updated_at", row.updated_at},
            {"ended_at", row.ended_at}};
  if (asked.contains("path")) j["path"] = asked["path"];
  if (with_owner) {
    j["iss"] = row.iss;
    j["sub"] = row.sub;
  }
  if (row.state == "running") return j;
  j["head"] = row.head_commit.empty() ? json() : json(row.head_commit);
  j["summary"] = row.summary;
  j["outcome"] = row.outcome.empty() ? json() : json(row.outcome);
  j["cost_usd"] = supervisor::FormatMicroUsd(row.cost_micro_usd);
  j["usage"] = ParsedOr(row.usage_json, json::object());
  j["files_changed"] = ParsedOr(row.files_json, json::array());
  if (with_diff) j["diff"] = row.diff;
  j["truncated"] = row.diff_truncated;
  j["bundle_bytes"] = row.bundle_bytes;
  if (!row.error.empty()) j["error"] = row.error;
  return j;
}

// ?path= (default the execute repository) and ?base= of the git routes.
struct GitQuery {
  std::string path = supervisor::kExecuteRepoPath;
  std::string base;
};

StatusOr<GitQuery> ParseGitQuery(const HttpRequest& request) {
  GitQuery query;
  if (auto it = request.query.find("path"); it != request.query.end()) {
    if (it->second.empty() || it->second[0] != '/' || it->second.find('\0') != std::string::npos ||
        it->second.size() > 4096) {
      return Status::Error("path: an absolute path inside the sandbox", EINVAL);
    }
    query.path = it->second;
  }
  if (auto it = request.query.find("base"); it != request.query.end()) {
    const std::string& base = it->second;
    // A revision, never an option (the scripts also pass --end-of-options).
    if (base.empty() || base[0] == '-' || base.size() > kMaxRevisionBytes || base.find('\0') != std::string::npos) {
      return Status::Error("base: a revision (a commit id, a branch, HEAD~1, ...)", EINVAL);
    }
    query.base = base;
  }
  return query;
}

}  // namespace

void RegisterExecute(Server& server, supervisor::Executions& executions, const supervisor::DaemonConfig& config) {
  server.Route("POST", "/v1/execute", Auth::kRequired, [&executions](HttpRequest request, Responder respond) {
    for (const char* scope : {kScopeSandboxes, kScopeSessions}) {
      if (!TokenHasScope(request.auth, scope)) return respond(ErrorResponse(ScopeError(scope)));
    }
    auto parsed = ParseExecute(request.body);
    request.body.clear();
    if (!parsed.ok()) return respond(ErrorResponse(parsed.status()));
    parsed->budget = BudgetOfToken(request.auth);
    executions.Start(CallerOfToken(request.auth), CapsOfToken(request.auth), std::move(*parsed),
                     [respond](StatusOr<ExecutionRow> row) {
                       if (!row.ok()) return respond(ErrorResponse(row.status()));
                       respond(JsonResponse(202, {{"id", row->id},
                                                  {"state", row->state},
                                                  {"sandbox", row->sandbox_id},
                                                  {"session", row->session_id},
                                                  {"base", row->base_commit}}));
                     });
  });
  server.Route("GET", "/v1/executions", Auth::kRequired, [&executions](HttpRequest request, Responder respond) {
    auto rows = executions.List(CallerOfToken(request.auth));
    if (!rows.ok()) return respond(ErrorResponse(rows.status()));
    json list = json::array();
    for (const auto& row : *rows) list.push_back(ExecutionJson(row, /*with_diff=*/false, request.auth.admin));
    respond(JsonResponse(200, {{"executions", list}}));
  });
  server.Route("GET", "/v1/executions/{id}", Auth::kRequired, [&executions](HttpRequest request, Responder respond) {
    auto row = executions.Get(CallerOfToken(request.auth), request.params["id"]);
    if (!row.ok()) return respond(ErrorResponse(row.status()));
    respond(JsonResponse(200, ExecutionJson(*row, /*with_diff=*/true, request.auth.admin)));
  });
  server.Route("DELETE", "/v1/executions/{id}", Auth::kRequired, [&executions](HttpRequest request, Responder respond) {
    if (!TokenHasScope(request.auth, kScopeSandboxes)) return respond(ErrorResponse(ScopeError(kScopeSandboxes)));
    Status deleted = executions.Delete(CallerOfToken(request.auth), request.params["id"]);
    if (!deleted.ok()) return respond(ErrorResponse(deleted));
    respond(JsonResponse(200, {{"id", request.params["id"]}}));
  });
  server.Route("GET", "/v1/executions/{id}/bundle", Auth::kRequired,
               [&executions](HttpRequest request, Responder respond) {
                 auto bundle = executions.Bundle(CallerOfToken(request.auth), request.params["id"]);
                 if (!bundle.ok()) return respond(ErrorResponse(bundle.status()));
                 respond(BytesResponse(std::move(*bundle)));
               });

  // git in a running sandbox, as its agent.
  server.Route("GET", "/v1/sandboxes/{id}/git/diff", Auth::kRequired,
               [&executions, &config](HttpRequest request, Responder respond) {
                 if (!TokenHasScope(request.auth, kScopeFiles)) return respond(ErrorResponse(ScopeError(kScopeFiles)));
                 auto query = ParseGitQuery(request);
                 if (!query.ok()) return respond(ErrorResponse(query.status()));
                 executions.git().Diff(
                     CallerOfToken(request.auth), CapsOfToken(request.auth), request.params["id"], query->path,
                     query->base, config.max_file_bytes, /*truncate=*/false,
                     [respond](StatusOr<supervisor::GitDiff> diff) {
                       if (!diff.ok()) return respond(ErrorResponse(diff.status()));
                       json files = json::array();
                       for (const auto& change : diff->files) {
                         json file = {{"path", change.path}, {"status", change.status}};
                         if (!change.from.empty()) file["from"] = change.from;
                         files.push_back(std::move(file));
                       }
                       respond(JsonResponse(200, {{"diff", diff->diff},
                                                  {"files_changed", files},
                                                  {"head", diff->head.empty() ? json() : json(diff->head)}}));
                     });
               });
  server.Route("GET", "/v1/sandboxes/{id}/git/bundle", Auth::kRequired,
               [&executions, &config](HttpRequest request, Responder respond) {
                 if (!TokenHasScope(request.auth, kScopeFiles)) return respond(ErrorResponse(ScopeError(kScopeFiles)));
                 auto query = ParseGitQuery(request);
                 if (!query.ok()) return respond(ErrorResponse(query.status()));
                 executions.git().Bundle(CallerOfToken(request.auth), CapsOfToken(request.auth), request.params["id"],
                                         query->path, query->base, config.max_file_bytes,
                                         [respond](StatusOr<std::string> bundle) {
                                           if (!bundle.ok()) return respond(ErrorResponse(bundle.status()));
                                           respond(BytesResponse(std::move(*bundle)));
                                         });
               });
}

}  // namespace corral::api
