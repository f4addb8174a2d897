#include "api/forwarding.h"

#include <cerrno>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/http_text.h"
#include "api/protocol_json.h"
#include "api/ws_forward.h"
#include "common/unix_time.h"

namespace corral::api {
namespace {

using supervisor::FleetResource;

// The resource a pattern's third segment names, when it is "{id}" under one of the fleet's
// collections.
std::optional<FleetResource> ResourceOf(const std::vector<std::string_view>& segments) {
  if (segments.size() < 3 || segments[0] != "v1" || segments[2] != "{id}") return std::nullopt;
  if (segments[1] == "sandboxes") return FleetResource::kSandbox;
  if (segments[1] == "snapshots") return FleetResource::kSnapshot;
  if (segments[1] == "sessions") return FleetResource::kSession;
  if (segments[1] == "executions") return FleetResource::kExecution;
  return std::nullopt;
}

// The snapshot a create names ("" for none, and for a body that does not parse: the handler
// answers that).
std::string SnapshotOf(const std::string& body) {
  nlohmann::json parsed = nlohmann::json::parse(body, nullptr, false);
  if (!parsed.is_object()) return "";
  auto it = parsed.find("snapshot");
  return it != parsed.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

Forwarding::Forwarding(supervisor::FleetRouter& router, std::unique_ptr<PeerHttp> peers)
    : router_(router), peers_(std::move(peers)) {}

void Forwarding::Install(Server& server) {
  server.SetRouteWrapper([this](const std::string& method, const std::string& pattern, Auth auth,
                                HttpHandler handler) { return Wrap(method, pattern, auth, std::move(handler)); });
  if (peers_ == nullptr) return;  // every marked request refused
  server.SetWebSocketWrapper([this](std::shared_ptr<WsHandler> local) -> std::shared_ptr<WsHandler> {
    return std::make_shared<WsForwarder>(peers_->io(), std::move(local), router_, peers_->signer());
  });
  server.SetHopVerifier([this](std::string_view mark, std::string_view method, std::string_view target,
                               std::string_view authorization) {
    return peers_->signer().Verify(mark, method, target, authorization, UnixNowMs());
  });
}

HttpHandler Forwarding::Wrap(const std::string& method, const std::string& pattern, Auth auth, HttpHandler handler) {
  // Without a cluster secret nothing is forwarded: what another node holds answers
  // `unavailable` from the supervisor (SandboxManager::Owned), naming the node.
  if (auth != Auth::kRequired || peers_ == nullptr) return handler;
  const std::vector<std::string_view> segments = SplitSegments(pattern);
  const bool create = method == "POST" && segments.size() == 2 && segments[0] == "v1" &&
                      (segments[1] == "sandboxes" || segments[1] == "execute");
  if (create) {
    const bool sandboxes = segments[1] == "sandboxes";
    return [this, sandboxes, local = std::move(handler)](HttpRequest request, Responder respond) {
      if (!request.forwarded_by.empty() || request.auth.admin) return local(std::move(request), std::move(respond));
      // Asked before the request moves (an argument's evaluation order is not the call's).
      StatusOr<supervisor::FleetTarget> target = router_.Place(sandboxes ? SnapshotOf(request.body) : "");
      Route(target, std::move(request), std::move(respond), local);
    };
  }
  const std::optional<FleetResource> kind = ResourceOf(segments);
  if (!kind) return handler;
  return [this, kind = *kind, local = std::move(handler)](HttpRequest request, Responder respond) {
    if (!request.forwarded_by.empty()) return local(std::move(request), std::move(respond));
    StatusOr<supervisor::FleetTarget> target = router_.Locate(kind, request.params["id"]);
    Route(target, std::move(request), std::move(respond), local);
  };
}

void Forwarding::Route(const StatusOr<supervisor::FleetTarget>& target, HttpRequest request, Responder respond,
                       const HttpHandler& local) {
  if (!target.ok()) return respond(ErrorResponse(target.status()));
  if (target->here) return local(std::move(request), std::move(respond));
  const std::string where = "node " + target->node_id + " holds it";
  if (request.auth.admin) {
    return respond(ErrorResponse(
        Status::Error(where + ": the admin socket answers for this node only; ask that node's", EAGAIN)));
  }
  peers_->Forward(target->node_id, target->address, request, std::move(respond));
}

}  // namespace corral::api
