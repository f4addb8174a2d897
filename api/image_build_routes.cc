#include "api/image_build_routes.h"

#include <cerrno>
#include <string>

#include <nlohmann/json.hpp>

#include "api/auth_mapping.h"
#include "api/error_codes.h"
#include "api/image_json.h"
#include "api/protocol_json.h"
#include "common/parse.h"

namespace corral::api {
namespace {

using json = nlohmann::json;

StatusOr<supervisor::BuildRequest> ParseBuild(const json& body) {
  RETURN_IF_ERROR(RefuseUnknownFields(body, {"recipe", "context", "name", "build_args", "force", "no_cache", "limits"}));
  supervisor::BuildRequest request;
  if (!body.contains("recipe") || !body["recipe"].is_string()) {
    return Status::Error("recipe: expected the recipe's text", EINVAL);
  }
  request.recipe = body["recipe"].get<std::string>();
  RETURN_IF_ERROR(OptionalString(body, "context", request.context));
  if (!request.context.empty() && request.context[0] != '/') {
    return Status::Error("context: expected an absolute path (the daemon does not know the client's directory): " +
                             request.context,
                         EINVAL);
  }
  RETURN_IF_ERROR(OptionalString(body, "name", request.name));
  for (const char* key : {"force", "no_cache"}) {
    if (!body.contains(key)) continue;
    if (!body[key].is_boolean()) return Status::Error(std::string(key) + ": expected true or false", EINVAL);
    (key == std::string("force") ? request.force : request.no_cache) = body[key].get<bool>();
  }
  if (body.contains("build_args")) {
    if (!body["build_args"].is_object()) return Status::Error("build_args: expected an object of strings", EINVAL);
    for (const auto& [key, value] : body["build_args"].items()) {
      if (!value.is_string()) return Status::Error("build_args." + key + ": expected a string", EINVAL);
      request.build_args[key] = value.get<std::string>();
    }
  }
  if (body.contains("limits")) {
    ASSIGN_OR_RETURN(supervisor::CreateRequest create, ParseCreate(json{{"limits", body["limits"]}}));
    request.limits = create.limits;
  }
  return request;
}

json StatusJson(const supervisor::BuildStatus& status) {
  json out = {{"id", status.id},         {"state", status.state},           {"log", status.log},
              {"log_start", status.log_start}, {"next", status.next}, {"started_at", status.started_at}};
  if (status.ended_at != 0) out["ended_at"] = status.ended_at;
  if (status.result) {
    out["image"] = ImageJson(status.result->image);
    out["steps"] = status.result->steps;
    out["cached"] = status.result->cached;
  }
  if (status.state == "failed") {
    out["error"] = {{"code", ErrorCodeName(ErrorCodeFor(status.error))}, {"message", status.error.message()}};
  }
  return out;
}

HttpHandler WithBuilds(supervisor::ImageBuilds* builds,
                       std::function<void(supervisor::ImageBuilds&, HttpRequest, Responder)> handler) {
  return [builds, handler = std::move(handler)](HttpRequest request, Responder respond) {
    if (builds == nullptr) return respond(ErrorResponse(Status::Error("image builds are not set up on this daemon", EAGAIN)));
    handler(*builds, std::move(request), std::move(respond));
  };
}

}  // namespace

void RegisterImageBuildRoutes(Server& server, supervisor::ImageBuilds* builds) {
  server.Route("POST", "/v1/images/build", Auth::kAdminOnly,
               WithBuilds(builds, [](supervisor::ImageBuilds& b, HttpRequest request, Responder respond) {
                 auto body = ParseBody(request.body);
                 if (!body.ok()) return respond(ErrorResponse(body.status()));
                 auto parsed = ParseBuild(*body);
                 if (!parsed.ok()) return respond(ErrorResponse(parsed.status()));
                 auto id = b.Start(CallerOfToken(request.auth), std::move(*parsed));
                 if (!id.ok()) return respond(ErrorResponse(id.status()));
                 respond(JsonResponse(202, json{{"id", *id}, {"state", "running"}}));
               }));
  server.Route("GET", "/v1/images/builds/{id}", Auth::kAdminOnly,
               WithBuilds(builds, [](supervisor::ImageBuilds& b, HttpRequest request, Responder respond) {
                 uint64_t after = 0;
                 if (auto it = request.query.find("after"); it != request.query.end()) {
                   auto parsed = ParseUint(it->second);
                   if (!parsed.ok()) return respond(ErrorResponse(Status::Error("after: expected an offset", EINVAL)));
                   after = *parsed;
                 }
                 auto status = b.Get(request.params["id"], after);
                 if (!status.ok()) return respond(ErrorResponse(status.status()));
                 respond(JsonResponse(200, StatusJson(*status), InvalidUtf8::kReplace));
               }));
}

}  // namespace corral::api
