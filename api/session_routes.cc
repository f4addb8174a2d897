// Agent sessions over HTTP: create (also from a checkpoint), list, read; checkpoints. Their
// events, turns and answers are on the WebSocket (ws_api.h).
#include <string>
#include <utility>

#include "api/auth_mapping.h"
#include "api/protocol_json.h"
#include "api/routes.h"

namespace corral::api {
namespace {

nlohmann::json CheckpointJson(const supervisor::CheckpointRow& row) {
  return {{"id", row.id},           {"session", row.session_id}, {"sandbox", row.sandbox_id},
          {"snapshot", row.snapshot_id}, {"turns", row.turns}, {"created_at", row.created_at}};
}

void RegisterCheckpointRoutes(Server& server, supervisor::SessionRunner& sessions) {
  // A checkpoint is a snapshot of the sandbox (scope sandboxes) of a session (scope sessions).
  server.Route("POST", "/v1/sessions/{id}/checkpoint", Auth::kRequired, [&sessions](HttpRequest request, Responder respond) {
    if (!RequireScope(request, kScopeSessions, respond) || !RequireScope(request, kScopeSandboxes, respond)) return;
    sessions.Checkpoint(CallerOfToken(request.auth), request.params["id"],
                        [respond](StatusOr<supervisor::CheckpointRow> row) {
                          if (!row.ok()) return respond(ErrorResponse(row.status()));
                          respond(JsonResponse(201, CheckpointJson(*row)));
                        });
  });
  server.Route("GET", "/v1/sessions/{id}/checkpoints", Auth::kRequired, [&sessions](HttpRequest request, Responder respond) {
    respond(ListResponse(sessions.ListCheckpoints(CallerOfToken(request.auth), request.params["id"]), "checkpoints",
                         CheckpointJson));
  });
  server.Route("GET", "/v1/checkpoints/{id}", Auth::kRequired, [&sessions](HttpRequest request, Responder respond) {
    respond(ValueResponse(sessions.GetCheckpoint(CallerOfToken(request.auth), request.params["id"]), CheckpointJson));
  });
  server.Route("DELETE", "/v1/checkpoints/{id}", Auth::kRequired, [&sessions](HttpRequest request, Responder respond) {
    if (!RequireScope(request, kScopeSessions, respond) || !RequireScope(request, kScopeSandboxes, respond)) return;
    const std::string id = request.params["id"];
    sessions.DeleteCheckpoint(CallerOfToken(request.auth), id, [respond, id](StatusOr<bool> deleted) {
      if (!deleted.ok()) return respond(ErrorResponse(deleted.status()));
      respond(JsonResponse(200, {{"id", id}, {"deleted", true}}));
    });
  });
}

}  // namespace

void RegisterSessionRoutes(Server& server, supervisor::SessionRunner& sessions) {
  server.Route("POST", "/v1/sandboxes/{id}/sessions", Auth::kRequired, [&sessions](HttpRequest request, Responder respond) {
    if (!RequireScope(request, kScopeSessions, respond)) return;
    auto body = ParseBody(request.body);
    if (!body.ok()) return respond(ErrorResponse(body.status()));
    auto create = ParseNewSession(*body);
    if (!create.ok()) return respond(ErrorResponse(create.status()));
    create->sandbox_id = request.params["id"];
    create->budget = request.auth.claims.budget;
    if (!create->checkpoint.empty()) {
      // The sandbox's files replaced (or a copy of them used): scope sandboxes too.
      if (!RequireScope(request, kScopeSandboxes, respond)) return;
      return sessions.CreateFromCheckpoint(
          CallerOfToken(request.auth), CapsOfToken(request.auth), std::move(*create),
          [respond](StatusOr<std::shared_ptr<supervisor::AgentSession>> session) {
            if (!session.ok()) return respond(ErrorResponse(session.status()));
            respond(JsonResponse(201, SessionJson((*session)->row())));
          });
    }
    auto session = sessions.Create(CallerOfToken(request.auth), CapsOfToken(request.auth), std::move(*create));
    if (!session.ok()) return respond(ErrorResponse(session.status()));
    respond(JsonResponse(201, SessionJson((*session)->row())));
  });
  server.Route("GET", "/v1/sessions", Auth::kRequired, [&sessions](HttpRequest request, Responder respond) {
    const std::string sandbox = request.query.count("sandbox") ? request.query["sandbox"] : "";
    respond(ListResponse(sessions.List(CallerOfToken(request.auth), sandbox), "sessions", SessionJson));
  });
  server.Route("GET", "/v1/sessions/{id}", Auth::kRequired, [&sessions](HttpRequest request, Responder respond) {
    respond(ValueResponse(sessions.Get(CallerOfToken(request.auth), request.params["id"]), SessionJson));
  });
  RegisterCheckpointRoutes(server, sessions);
}

}  // namespace corral::api
