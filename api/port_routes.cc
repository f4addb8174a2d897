// Ports a sandbox shows (docs/PROTOCOL.md "Ports"; api/port_proxy.h passes their requests on).
#include <algorithm>
#include <cerrno>
#include <ctime>
#include <string>

#include "api/auth_mapping.h"
#include "api/protocol_json.h"
#include "api/routes.h"

namespace corral::api {
namespace {

using nlohmann::json;

// The host label of a port URL: PORT-sb-XXXX ('_' is no character of a DNS host name).
std::string HostUrl(const supervisor::PortsConfig& config, const std::string& id, int64_t port) {
  if (config.domain.empty()) return "";
  std::string label = id;
  if (label.size() > 2 && label[2] == '_') label[2] = '-';
  return "https://" + std::to_string(port) + "-" + label + "." + config.domain + "/";
}

std::string PathUrl(const std::string& id, int64_t port) {
  return "/v1/sandboxes/" + id + "/ports/" + std::to_string(port) + "/";
}

json PortJson(const supervisor::PortsConfig& config, const supervisor::PortRow& row) {
  const std::string url = HostUrl(config, row.sandbox_id, row.port);
  return {{"port", row.port},
          {"url", url.empty() ? json(nullptr) : json(url)},
          {"path_url", PathUrl(row.sandbox_id, row.port)},
          {"public", row.is_public},
          {"created_at", row.created_at}};
}

// The request's body ("" is {}) with only the fields named.
StatusOr<json> ObjectWith(const HttpRequest& request, std::initializer_list<std::string_view> fields) {
  ASSIGN_OR_RETURN(json body, ParseBody(request.body));
  RETURN_IF_ERROR(RefuseUnknownFields(body, fields));
  return body;
}

StatusOr<int64_t> PortParam(const HttpRequest& request) {
  const std::string& text = request.params.at("port");
  if (text.empty() || text.size() > 5 || text.find_first_not_of("0123456789") != std::string::npos) {
    return Status::Error("port: 1 to 65535", EINVAL);
  }
  return std::stoll(text);
}

}  // namespace

void RegisterPortRoutes(Server& server, supervisor::SandboxManager& manager, const supervisor::DaemonConfig& config) {
  const supervisor::PortsConfig ports = config.ports;
  server.Route("POST", "/v1/sandboxes/{id}/ports", Auth::kRequired, [&manager, ports](HttpRequest request, Responder respond) {
    if (!RequireScope(request, kScopeSandboxes, respond)) return;
    auto body = ObjectWith(request, {"port", "public"});
    if (!body.ok()) return respond(ErrorResponse(body.status()));
    auto port = body->find("port");
    if (port == body->end() || !port->is_number_integer()) {
      return respond(ErrorResponse(Status::Error("port: required, an integer", EINVAL)));
    }
    bool is_public = false;
    if (auto p = body->find("public"); p != body->end()) {
      if (!p->is_boolean()) return respond(ErrorResponse(Status::Error("public: a boolean", EINVAL)));
      is_public = p->get<bool>();
    }
    if (is_public && !RequireScope(request, kScopePortsPublic, respond)) return;
    auto row = manager.OpenPort(CallerOfToken(request.auth), request.params["id"], port->get<int64_t>(), is_public);
    if (!row.ok()) return respond(ErrorResponse(row.status()));
    respond(JsonResponse(201, PortJson(ports, *row)));
  });
  server.Route("GET", "/v1/sandboxes/{id}/ports", Auth::kRequired, [&manager, ports](HttpRequest request, Responder respond) {
    auto rows = manager.ListPorts(CallerOfToken(request.auth), request.params["id"]);
    if (!rows.ok()) return respond(ErrorResponse(rows.status()));
    json list = json::array();
    for (const auto& row : *rows) list.push_back(PortJson(ports, row));
    respond(JsonResponse(200, {{"id", request.params["id"]}, {"ports", list}}));
  });
  server.Route("DELETE", "/v1/sandboxes/{id}/ports/{port}", Auth::kRequired,
               [&manager](HttpRequest request, Responder respond) {
                 if (!RequireScope(request, kScopeSandboxes, respond)) return;
                 auto port = PortParam(request);
                 if (!port.ok()) return respond(ErrorResponse(port.status()));
                 Status closed = manager.ClosePort(CallerOfToken(request.auth), request.params["id"], *port);
                 if (!closed.ok()) return respond(ErrorResponse(closed));
                 respond(JsonResponse(200, {{"port", *port}, {"closed", true}}));
               });
  server.Route("POST", "/v1/sandboxes/{id}/ports/{port}/signed-url", Auth::kRequired,
               [&manager, ports](HttpRequest request, Responder respond) {
                 auto port = PortParam(request);
                 if (!port.ok()) return respond(ErrorResponse(port.status()));
                 const std::string& id = request.params["id"];
                 // Another user's sandbox is the 404 of none, whatever else is wrong.
                 if (auto owned = manager.ListPorts(CallerOfToken(request.auth), id); !owned.ok()) {
                   return respond(ErrorResponse(owned.status()));
                 }
                 auto body = ObjectWith(request, {"ttl_s"});
                 if (!body.ok()) return respond(ErrorResponse(body.status()));
                 int64_t ttl = std::min<int64_t>(3600, static_cast<int64_t>(ports.max_ttl_s));
                 if (auto t = body->find("ttl_s"); t != body->end()) {
                   if (!t->is_number_integer() || t->get<int64_t>() <= 0) {
                     return respond(ErrorResponse(Status::Error("ttl_s: a positive integer", EINVAL)));
                   }
                   ttl = t->get<int64_t>();
                 }
                 if (static_cast<uint64_t>(ttl) > ports.max_ttl_s) {
                   return respond(ErrorResponse(Status::Error(
                       "ttl_s: at most " + std::to_string(ports.max_ttl_s) + " (ports.max_ttl)", EINVAL)));
                 }
                 const int64_t exp = static_cast<int64_t>(time(nullptr)) + ttl;
                 auto sig = manager.SignPort(CallerOfToken(request.auth), id, *port, exp);
                 if (!sig.ok()) return respond(ErrorResponse(sig.status()));
                 const std::string query = "?corral_sig=" + *sig + "&corral_exp=" + std::to_string(exp);
                 const std::string url = HostUrl(ports, id, *port);
                 respond(JsonResponse(200, {{"url", url.empty() ? json(nullptr) : json(url + query)},
                                            {"path_url", PathUrl(id, *port) + query},
                                            {"expires_at", exp}}));
               });
}

}  // namespace corral::api
