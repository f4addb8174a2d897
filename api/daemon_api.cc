#include "api/daemon_api.h"

#include <memory>
#include <optional>
#include <string>

#include <boost/asio/post.hpp>

#include "api/protocol_json.h"
#include "api/routes.h"
#include "api/ws_api.h"
#include "common/log.h"
#include "supervisor/relay/rate_limiter.h"

namespace corral::api {

std::function<void(uint64_t)> RegisterApi(Server& server, boost::asio::io_context& io, boost::asio::thread_pool& pool,
                                         supervisor::SandboxManager& manager, supervisor::SessionRunner& sessions,
                                         supervisor::SandboxEvents& events, const supervisor::Ledger& ledger,
                                         const supervisor::DaemonConfig& config) {
  RegisterSessionRoutes(server, sessions);
  RegisterUsageRoutes(server, ledger, manager);
  server.Route("GET", "/healthz", Auth::kNone, [](HttpRequest, Responder respond) {
    respond(JsonResponse(200, {{"status", "ok"}, {"version", kVersion}, {"protocol", kProtocolVersion}}));
  });
  RegisterSandboxRoutes(server, manager, events);
  RegisterSecretRoutes(server, manager);
  RegisterPortRoutes(server, manager, config);
  // Preview URLs: the key their signatures are made with (the store's), and the requests to them.
  if (Status key = manager.LoadPortUrlKey(); !key.ok()) {
    LogError("api", "no port URL key: signed port URLs are refused", {{"error", key.ToString()}});
  }
  ServePorts(server, io, manager, config);
  RegisterCommandRoutes(server, manager);
  RegisterAdminRoutes(server, io, pool, manager, config);
  RegisterFileRoutes(server, io, pool, manager, config);

  // One bucket per user for HTTP requests and WebSocket ops together (api.requests_per_minute).
  auto limiter = std::make_shared<supervisor::RateLimiter>(config.requests_per_minute);
  server.SetRequestGate([limiter](const AuthContext& auth) -> std::optional<HttpResponse> {
    if (auth.admin || limiter->Allow(auth.UserKey())) return std::nullopt;
    HttpResponse response = ErrorResponse(RateLimitedError(*limiter, auth));
    response.headers.push_back({"Retry-After", std::to_string(limiter->RetryAfterSeconds(auth.UserKey()))});
    return response;
  });
  auto ws_api = std::make_shared<WsApi>(manager, sessions, events, limiter);
  // Every event the store appends (from any thread) reaches the watchers on the event loop.
  std::weak_ptr<WsApi> weak_api = ws_api;
  events.Watch([&io, weak_api](const supervisor::EventRow& event) {
    boost::asio::post(io, [weak_api, event] {
      if (auto api = weak_api.lock()) api->Publish(event);
    });
  });
  server.WebSocket("/v1/ws", ws_api);
  return [limiter](uint64_t requests_per_minute) {
    if (limiter->per_minute() != requests_per_minute) limiter->SetPerMinute(requests_per_minute);
  };
}

}  // namespace corral::api
