// The admin socket's routes for the nodes of a fleet (supervisor/fleet/node_registry.h).
#include <cerrno>
#include <string>

#include "api/protocol_json.h"
#include "api/routes.h"
#include "supervisor/fleet/node_registry.h"

namespace corral::api {
namespace {

nlohmann::json NodeJson(const supervisor::NodeView& node, const std::string& self) {
  const supervisor::NodeRow& row = node.row;
  return {{"id", row.id},
          {"address", row.address},
          {"version", row.version},
          {"started_at", row.started_at},
          {"heartbeat_at_ms", row.heartbeat_at},
          {"silent_ms", node.silent_ms},
          {"alive", node.alive},
          {"drained", row.drained != supervisor::kNodeOpen},
          {"moving_out", row.drained == supervisor::kNodeMovingOut},
          {"this", row.id == self},
          {"sandboxes", row.sandboxes},
          {"max_sandboxes", row.max_sandboxes},
          {"memory_total", row.memory_total},
          {"memory_available", row.memory_available}};
}

}  // namespace

void RegisterNodeRoutes(Server& server, supervisor::NodeRegistry& nodes) {
  server.Route("GET", "/v1/admin/nodes", Auth::kAdminOnly, [&nodes](HttpRequest, Responder respond) {
    respond(ListResponse(nodes.List(), "nodes",
                         [&nodes](const supervisor::NodeView& node) { return NodeJson(node, nodes.id()); }));
  });
  for (const bool drain : {true, false}) {
    server.Route("POST", drain ? "/v1/admin/nodes/{id}/drain" : "/v1/admin/nodes/{id}/undrain", Auth::kAdminOnly,
                 [&nodes, drain](HttpRequest request, Responder respond) {
                   const std::string id = request.params["id"];
                   // ?move=true: its stopped sandboxes move to other nodes too.
                   if (!drain && request.query.count("move")) {
                     return respond(ErrorResponse(Status::Error("move is a drain's, not an undrain's", EINVAL)));
                   }
                   StatusOr<bool> move = QueryBool(request, "move", false);
                   if (!move.ok()) return respond(ErrorResponse(move.status()));
                   const int64_t state = !drain ? supervisor::kNodeOpen
                                         : *move ? supervisor::kNodeMovingOut
                                                 : supervisor::kNodeDrained;
                   Status set = nodes.SetDrained(id, state);
                   if (!set.ok()) return respond(ErrorResponse(set));
                   respond(JsonResponse(200, {{"id", id}, {"drained", drain}, {"moving_out", state == supervisor::kNodeMovingOut}}));
                 });
  }
}

}  // namespace corral::api
