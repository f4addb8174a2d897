// A sandbox's commands, read-only: they run, stream and end over the WebSocket (ws_api.h).
#include <utility>

#include "api/auth_mapping.h"
#include "api/protocol_json.h"
#include "api/routes.h"

namespace corral::api {

void RegisterCommandRoutes(Server& server, supervisor::SandboxManager& manager) {
  server.Route("GET", "/v1/sandboxes/{id}/commands", Auth::kRequired,
               [&manager](HttpRequest request, Responder respond) {
                 respond(ListResponse(manager.ListCommands(CallerOfToken(request.auth), request.params["id"]),
                                      "commands", CommandJson));
               });
  server.Route("GET", "/v1/sandboxes/{id}/commands/{cid}", Auth::kRequired,
               [&manager](HttpRequest request, Responder respond) {
                 respond(ValueResponse(
                     manager.GetCommand(CallerOfToken(request.auth), request.params["id"], request.params["cid"]),
                     CommandJson));
               });
}

}  // namespace corral::api
