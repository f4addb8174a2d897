// Any node answers any request: a request for what another node of the fleet holds is forwarded
// to that node (supervisor/fleet/fleet_router.h says which), and its answer is the client's.
//
// HTTP, by the route's pattern, for every route registered after Install (so a route added
// later under these paths is forwarded without a word more):
//   /v1/sandboxes/{id}[/...]     the sandbox's node
//   /v1/snapshots/{id}[/...]     the snapshot's node
//   /v1/sessions/{id}[/...]      its sandbox's node
//   /v1/executions/{id}[/...]    the execution's node
//   POST /v1/sandboxes           where the fleet places it (a snapshot's node, when made from one)
//   POST /v1/execute             where the fleet places it
// Everything else (lists, usage, images, the admin routes) is answered here, from the store the
// fleet shares or from this node's own things. The WebSocket endpoint is forwarded op by op
// (api/ws_forward.h).
//
// The forwarded request carries the client's own token (the other node verifies it again: no
// authority is added) and a hop mark (api/hop.h) under the cluster secret; a request that arrived
// with a mark is never forwarded again, whatever this node's catalog says (no loops: it is
// answered here, 503 `unavailable` if it is not here). A request on the admin socket has no token
// to forward: for another node's sandbox it answers `unavailable`, naming the node. Without a
// cluster secret (node.cluster_secret_file) this node forwards nothing: another node's sandbox
// answers `unavailable` (SandboxManager's), and a create is made here.
#pragma once

#include <memory>
#include <string>

#include "api/peer_http.h"
#include "api/server.h"
#include "supervisor/fleet/fleet_router.h"

namespace corral::api {

class Forwarding {
 public:
  // `peers` null: no cluster secret, nothing is forwarded.
  Forwarding(supervisor::FleetRouter& router, std::unique_ptr<PeerHttp> peers);

  // Sets the server's route wrapper and hop verifier: before the routes are registered.
  void Install(Server& server);

  // The wrapper for one route (what Install sets); public for tests.
  HttpHandler Wrap(const std::string& method, const std::string& pattern, Auth auth, HttpHandler handler);

  supervisor::FleetRouter& router() { return router_; }
  PeerHttp* peers() { return peers_.get(); }

 private:
  // Answers here, or forwards to `target`.
  void Route(const StatusOr<supervisor::FleetTarget>& target, HttpRequest request, Responder respond,
             const HttpHandler& local);

  supervisor::FleetRouter& router_;
  std::unique_ptr<PeerHttp> peers_;
};

}  // namespace corral::api
