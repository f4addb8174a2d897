// Sandboxes, their egress rules and event logs, snapshots and forks (routes.h lists them).
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "api/auth_mapping.h"
#include "api/protocol_json.h"
#include "api/routes.h"

namespace corral::api {
namespace {

using nlohmann::json;
using supervisor::SandboxManager;
using supervisor::SandboxRow;
using supervisor::SnapshotRow;

using Handler = void (*)(SandboxManager&, HttpRequest, Responder);

// Answers the sandbox (or the error) with `status`; the owner is shown to the admin socket.
SandboxManager::Done<SandboxRow> ReplySandbox(Responder respond, int status, bool admin) {
  return [respond = std::move(respond), status, admin](StatusOr<SandboxRow> row) {
    if (!row.ok()) return respond(ErrorResponse(row.status()));
    respond(JsonResponse(status, SandboxJson(*row, admin)));
  };
}

// The answer to a destroy: {"id", "state": "destroyed"}.
SandboxManager::Done<bool> ReplyDestroyed(Responder respond, std::string id) {
  return [respond = std::move(respond), id = std::move(id)](StatusOr<bool> done) {
    if (!done.ok()) return respond(ErrorResponse(done.status()));
    respond(JsonResponse(200, {{"id", id}, {"state", "destroyed"}}));
  };
}

// The request's body as `parse` (ParseCreate, ParseFork) reads it; nullopt once the error is answered.
template <typename Parse>
auto ParsedBody(const HttpRequest& request, const Responder& respond, Parse parse)
    -> std::optional<std::remove_cvref_t<decltype(*parse(json()))>> {
  auto body = ParseBody(request.body);
  auto parsed = body.ok() ? parse(*body) : decltype(parse(*body))(body.status());
  if (!parsed.ok()) {
    respond(ErrorResponse(parsed.status()));
    return std::nullopt;
  }
  return std::move(*parsed);
}

// A row's reply body for this caller: `to_json` (SandboxJson, SnapshotJson) with the owner shown
// to the admin socket only.
template <typename Row>
auto RowJson(json (*to_json)(const Row&, bool), const HttpRequest& request) {
  return [to_json, admin = request.auth.admin](const Row& row) { return to_json(row, admin); };
}

void CreateSandbox(SandboxManager& manager, HttpRequest request, Responder respond) {
  if (!RequireScope(request, kScopeSandboxes, respond)) return;
  auto create = ParsedBody(request, respond, ParseCreate);
  if (!create) return;
  if (!create->secrets.empty() && !RequireScope(request, kScopeSecrets, respond)) return;
  manager.Create(CallerOfToken(request.auth), CapsOfToken(request.auth), std::move(*create),
                 ReplySandbox(std::move(respond), 201, request.auth.admin));
}

void ListSandboxes(SandboxManager& manager, HttpRequest request, Responder respond) {
  respond(ListResponse(manager.List(CallerOfToken(request.auth)), "sandboxes", RowJson(SandboxJson, request)));
}

void GetSandbox(SandboxManager& manager, HttpRequest request, Responder respond) {
  respond(ValueResponse(manager.Get(CallerOfToken(request.auth), request.params["id"]), RowJson(SandboxJson, request)));
}

void StartSandbox(SandboxManager& manager, HttpRequest request, Responder respond) {
  if (!RequireScope(request, kScopeSandboxes, respond)) return;
  manager.Start(CallerOfToken(request.auth), request.params["id"],
                ReplySandbox(std::move(respond), 200, request.auth.admin));
}

void StopSandbox(SandboxManager& manager, HttpRequest request, Responder respond) {
  if (!RequireScope(request, kScopeSandboxes, respond)) return;
  manager.Stop(CallerOfToken(request.auth), request.params["id"],
               ReplySandbox(std::move(respond), 200, request.auth.admin));
}

void GetEgress(SandboxManager& manager, HttpRequest request, Responder respond) {
  respond(ValueResponse(manager.Get(CallerOfToken(request.auth), request.params["id"]), EgressJson));
}

void PutEgress(SandboxManager& manager, HttpRequest request, Responder respond) {
  if (!RequireScope(request, kScopeSandboxes, respond)) return;
  auto body = ParseBody(request.body);
  if (!body.ok()) return respond(ErrorResponse(body.status()));
  if (!body->is_object()) {
    return respond(ErrorResponse(Status::Error("expected an object {\"domains\", \"ports\", \"cidrs\"}", EINVAL)));
  }
  auto change = supervisor::ParseEgressRulesChange(*body, "egress");
  if (!change.ok()) {
    // A sandbox that is not the caller's is not found, whatever the body says.
    auto row = manager.Get(CallerOfToken(request.auth), request.params["id"]);
    return respond(ErrorResponse(row.ok() ? change.status() : row.status()));
  }
  respond(ValueResponse(
      manager.SetEgress(CallerOfToken(request.auth), CapsOfToken(request.auth), request.params["id"], *change),
      EgressJson));
}

// The sandbox's event log (lifecycle, command outcomes, egress decisions), oldest first, from
// after_seq on: poll with the last seq seen.
void ListEvents(SandboxManager& manager, supervisor::SandboxEvents& events, HttpRequest request, Responder respond) {
  auto row = manager.Get(CallerOfToken(request.auth), request.params["id"]);
  if (!row.ok()) return respond(ErrorResponse(row.status()));
  auto after = QueryInt(request.query, "after_seq", 0);
  if (!after.ok()) return respond(ErrorResponse(after.status()));
  auto limit = QueryInt(request.query, "limit", 1000);
  if (!limit.ok()) return respond(ErrorResponse(limit.status()));
  if (*limit < 1 || *limit > 1000) return respond(ErrorResponse(Status::Error("limit: 1 to 1000", EINVAL)));
  const std::string type = request.query.count("type") ? request.query.at("type") : "";
  auto listed = events.List(row->id, *after, *limit);
  if (!listed.ok()) return respond(ErrorResponse(listed.status()));
  json list = json::array();
  int64_t last = *after;
  for (const auto& event : *listed) {
    last = event.seq;
    if (!type.empty() && event.type != type && event.type.rfind(type + ".", 0) != 0) continue;
    list.push_back(EventJson(event));
  }
  respond(JsonResponse(200, {{"events", list}, {"last_seq", last}, {"more", static_cast<int64_t>(listed->size()) == *limit}}));
}

void DestroySandbox(SandboxManager& manager, HttpRequest request, Responder respond) {
  if (!RequireScope(request, kScopeSandboxes, respond)) return;
  std::string id = request.params["id"];
  manager.Destroy(CallerOfToken(request.auth), id, ReplyDestroyed(std::move(respond), id));
}

void SnapshotSandbox(SandboxManager& manager, HttpRequest request, Responder respond) {
  if (!RequireScope(request, kScopeSandboxes, respond)) return;
  manager.Snapshot(CallerOfToken(request.auth), request.params["id"],
                   [respond, admin = request.auth.admin](StatusOr<SnapshotRow> row) {
                     if (!row.ok()) return respond(ErrorResponse(row.status()));
                     respond(JsonResponse(201, SnapshotJson(*row, admin)));
                   });
}

void ForkSandbox(SandboxManager& manager, HttpRequest request, Responder respond) {
  if (!RequireScope(request, kScopeSandboxes, respond)) return;
  auto fork = ParsedBody(request, respond, ParseFork);
  if (!fork) return;
  manager.Fork(CallerOfToken(request.auth), CapsOfToken(request.auth), request.params["id"], std::move(*fork),
               ReplySandbox(std::move(respond), 201, request.auth.admin));
}

void ListSnapshots(SandboxManager& manager, HttpRequest request, Responder respond) {
  respond(ListResponse(manager.ListSnapshots(CallerOfToken(request.auth)), "snapshots", RowJson(SnapshotJson, request)));
}

void GetSnapshot(SandboxManager& manager, HttpRequest request, Responder respond) {
  respond(ValueResponse(manager.GetSnapshot(CallerOfToken(request.auth), request.params["id"]),
                        RowJson(SnapshotJson, request)));
}

void DeleteSnapshot(SandboxManager& manager, HttpRequest request, Responder respond) {
  if (!RequireScope(request, kScopeSandboxes, respond)) return;
  std::string id = request.params["id"];
  manager.DeleteSnapshot(CallerOfToken(request.auth), id, ReplyDestroyed(std::move(respond), id));
}

}  // namespace

void RegisterSandboxRoutes(Server& server, SandboxManager& manager, supervisor::SandboxEvents& events) {
  struct ManagerRoute {
    const char* method;
    const char* path;
    Handler handler;
  };
  static constexpr ManagerRoute kRoutes[] = {
      {"POST", "/v1/sandboxes", CreateSandbox},
      {"GET", "/v1/sandboxes", ListSandboxes},
      {"GET", "/v1/sandboxes/{id}", GetSandbox},
      {"POST", "/v1/sandboxes/{id}/start", StartSandbox},
      {"GET", "/v1/sandboxes/{id}/egress", GetEgress},
      {"PUT", "/v1/sandboxes/{id}/egress", PutEgress},
      {"POST", "/v1/sandboxes/{id}/stop", StopSandbox},
      {"DELETE", "/v1/sandboxes/{id}", DestroySandbox},
      {"POST", "/v1/sandboxes/{id}/snapshot", SnapshotSandbox},
      {"POST", "/v1/sandboxes/{id}/fork", ForkSandbox},
      {"GET", "/v1/snapshots", ListSnapshots},
      {"GET", "/v1/snapshots/{id}", GetSnapshot},
      {"DELETE", "/v1/snapshots/{id}", DeleteSnapshot},
  };
  for (const ManagerRoute& route : kRoutes) {
    server.Route(route.method, route.path, Auth::kRequired,
                 [&manager, handler = route.handler](HttpRequest request, Responder respond) {
                   handler(manager, std::move(request), std::move(respond));
                 });
  }
  server.Route("GET", "/v1/sandboxes/{id}/events", Auth::kRequired,
               [&manager, &events](HttpRequest request, Responder respond) {
                 ListEvents(manager, events, std::move(request), std::move(respond));
               });
}

}  // namespace corral::api
