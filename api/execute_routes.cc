// Headless executions and git in a running sandbox (routes.h lists them). JSON bodies here carry
// git's output and paths, which may be any bytes: invalid UTF-8 is replaced (U+FFFD) rather than
// refused. The work is supervisor::Executions' and supervisor::SandboxGit's.
#include <cerrno>
#include <optional>
#include <string>
#include <utility>

#include "api/auth_mapping.h"
#include "api/protocol_json.h"
#include "api/routes.h"

namespace corral::api {
namespace {

using nlohmann::json;
using supervisor::ExecutionRow;

HttpResponse JsonReply(int status, const json& body) { return JsonResponse(status, body, InvalidUtf8::kReplace); }

HttpResponse ErrorReply(Status status) {
  // A git that hung is the daemon's trouble, not a bug: unavailable, with the message.
  if (status.error_number() == ETIMEDOUT) status = Status::Error(status.message(), EAGAIN);
  return ErrorResponse(status);
}

json DiffJson(const supervisor::GitDiff& diff) {
  json files = json::array();
  for (const auto& change : diff.files) {
    json file = {{"path", change.path}, {"status", change.status}};
    if (!change.from.empty()) file["from"] = change.from;
    files.push_back(std::move(file));
  }
  return {{"diff", diff.diff}, {"files_changed", files}, {"head", diff.head.empty() ? json() : json(diff.head)}};
}

// The git routes' scope (files) and query; nullopt once the refusal is answered.
std::optional<GitQuery> GitRequest(const HttpRequest& request, const Responder& respond) {
  if (!RequireScope(request, kScopeFiles, respond)) return std::nullopt;
  auto query = ParseGitQuery(request);
  if (!query.ok()) {
    respond(ErrorReply(query.status()));
    return std::nullopt;
  }
  return *query;
}

void StartExecution(supervisor::Executions& executions, HttpRequest request, Responder respond) {
  for (const char* scope : {kScopeSandboxes, kScopeSessions}) {
    if (!RequireScope(request, scope, respond)) return;
  }
  auto parsed = ParseExecute(request.body);
  request.body.clear();
  if (!parsed.ok()) return respond(ErrorReply(parsed.status()));
  parsed->budget = request.auth.claims.budget;
  executions.Start(CallerOfToken(request.auth), CapsOfToken(request.auth), std::move(*parsed),
                   [respond](StatusOr<ExecutionRow> row) {
                     if (!row.ok()) return respond(ErrorReply(row.status()));
                     respond(JsonReply(202, {{"id", row->id},
                                             {"state", row->state},
                                             {"sandbox", row->sandbox_id},
                                             {"session", row->session_id},
                                             {"base", row->base_commit}}));
                   });
}

}  // namespace

void RegisterExecuteRoutes(Server& server, supervisor::Executions& executions, const supervisor::DaemonConfig& config) {
  server.Route("POST", "/v1/execute", Auth::kRequired, [&executions](HttpRequest request, Responder respond) {
    StartExecution(executions, std::move(request), std::move(respond));
  });
  server.Route("GET", "/v1/executions", Auth::kRequired, [&executions](HttpRequest request, Responder respond) {
    auto rows = executions.List(CallerOfToken(request.auth));
    if (!rows.ok()) return respond(ErrorReply(rows.status()));
    json list = json::array();
    for (const auto& row : *rows) list.push_back(ExecutionJson(row, /*with_diff=*/false, request.auth.admin));
    respond(JsonReply(200, {{"executions", list}}));
  });
  server.Route("GET", "/v1/executions/{id}", Auth::kRequired, [&executions](HttpRequest request, Responder respond) {
    auto row = executions.Get(CallerOfToken(request.auth), request.params["id"]);
    if (!row.ok()) return respond(ErrorReply(row.status()));
    respond(JsonReply(200, ExecutionJson(*row, /*with_diff=*/true, request.auth.admin)));
  });
  server.Route("DELETE", "/v1/executions/{id}", Auth::kRequired, [&executions](HttpRequest request, Responder respond) {
    if (!RequireScope(request, kScopeSandboxes, respond)) return;
    Status deleted = executions.Delete(CallerOfToken(request.auth), request.params["id"]);
    if (!deleted.ok()) return respond(ErrorReply(deleted));
    respond(JsonReply(200, {{"id", request.params["id"]}}));
  });
  server.Route("GET", "/v1/executions/{id}/bundle", Auth::kRequired,
               [&executions](HttpRequest request, Responder respond) {
                 auto bundle = executions.Bundle(CallerOfToken(request.auth), request.params["id"]);
                 if (!bundle.ok()) return respond(ErrorReply(bundle.status()));
                 respond(BytesResponse(std::move(*bundle)));
               });

  // git in a running sandbox, as its agent.
  server.Route("GET", "/v1/sandboxes/{id}/git/diff", Auth::kRequired,
               [&executions, &config](HttpRequest request, Responder respond) {
                 auto query = GitRequest(request, respond);
                 if (!query) return;
                 executions.git().Diff(CallerOfToken(request.auth), CapsOfToken(request.auth), request.params["id"],
                                       query->path, query->base, config.max_file_bytes, /*truncate=*/false,
                                       [respond](StatusOr<supervisor::GitDiff> diff) {
                                         if (!diff.ok()) return respond(ErrorReply(diff.status()));
                                         respond(JsonReply(200, DiffJson(*diff)));
                                       });
               });
  server.Route("GET", "/v1/sandboxes/{id}/git/bundle", Auth::kRequired,
               [&executions, &config](HttpRequest request, Responder respond) {
                 auto query = GitRequest(request, respond);
                 if (!query) return;
                 executions.git().Bundle(CallerOfToken(request.auth), CapsOfToken(request.auth), request.params["id"],
                                         query->path, query->base, config.max_file_bytes,
                                         [respond](StatusOr<std::string> bundle) {
                                           if (!bundle.ok()) return respond(ErrorReply(bundle.status()));
                                           respond(BytesResponse(std::move(*bundle)));
                                         });
               });
}

}  // namespace corral::api
