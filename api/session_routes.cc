// Agent sessions over HTTP: create, list, read. Their events, turns and answers are on the
// WebSocket (ws_api.h).
#include <string>
#include <utility>

#include "api/auth_mapping.h"
#include "api/protocol_json.h"
#include "api/routes.h"

namespace corral::api {

void RegisterSessionRoutes(Server& server, supervisor::SessionRunner& sessions) {
  server.Route("POST", "/v1/sandboxes/{id}/sessions", Auth::kRequired, [&sessions](HttpRequest request, Responder respond) {
    if (!RequireScope(request, kScopeSessions, respond)) return;
    auto body = ParseBody(request.body);
    if (!body.ok()) return respond(ErrorResponse(body.status()));
    auto create = ParseNewSession(*body);
    if (!create.ok()) return respond(ErrorResponse(create.status()));
    create->sandbox_id = request.params["id"];
    create->budget = request.auth.claims.budget;
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
}

}  // namespace corral::api
