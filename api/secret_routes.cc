// Secrets (docs/PROTOCOL.md "Secrets"; supervisor/secrets/secret_vault.h): a user's own, its
// issuer's (the admin socket's), and the ones a sandbox may use. A value goes in and never comes
// back out: no answer, log or event holds it.
#include <cerrno>
#include <string>
#include <vector>

#include "api/auth_mapping.h"
#include "api/protocol_json.h"
#include "api/routes.h"
#include "supervisor/secrets/secret_vault.h"

namespace corral::api {
namespace {

using nlohmann::json;
using supervisor::SecretRow;
using supervisor::SecretVault;

json SecretJson(const SecretRow& row) {
  return {{"name", row.name},
          {"owner", row.sub.empty() ? "issuer" : "user"},
          {"bindings", supervisor::SecretBindingsJson(row.bindings)},
          {"created_at", row.created_at},
          {"updated_at", row.updated_at}};
}

// The vault, or the answer that there is none.
SecretVault* VaultOr(supervisor::SandboxManager& manager, const Responder& respond) {
  SecretVault* vault = manager.secret_vault();
  if (vault == nullptr) {
    respond(ErrorResponse(
        Status::Error("this daemon keeps no secrets (secrets.key_file is not set in its config)", ENOTSUP)));
  }
  return vault;
}

// {"value": "...", "bindings": [...]}: stores the secret `name` of (iss, sub).
void PutSecret(SecretVault& vault, const std::string& iss, const std::string& sub, const std::string& name,
               const HttpRequest& request, const Responder& respond) {
  auto body = ParseBody(request.body);
  if (!body.ok()) return respond(ErrorResponse(body.status()));
  if (!body->is_object()) {
    return respond(ErrorResponse(Status::Error("expected an object {\"value\", \"bindings\"}", EINVAL)));
  }
  for (const auto& [key, _] : body->items()) {
    if (key != "value" && key != "bindings") {
      return respond(ErrorResponse(Status::Error(key + ": unknown field (value, bindings)", EINVAL)));
    }
  }
  const auto value = body->find("value");
  if (value == body->end() || !value->is_string()) {
    return respond(ErrorResponse(Status::Error("value: required, a string", EINVAL)));
  }
  const auto bindings_json = body->find("bindings");
  if (bindings_json == body->end()) {
    return respond(ErrorResponse(Status::Error("bindings: required: where the secret may go", EINVAL)));
  }
  auto bindings = supervisor::ParseSecretBindings(*bindings_json, "bindings");
  if (!bindings.ok()) return respond(ErrorResponse(bindings.status()));
  Status put = vault.Put(iss, sub, name, value->get_ref<const std::string&>(), *bindings);
  if (!put.ok()) return respond(ErrorResponse(put));
  auto rows = vault.List(iss, sub);
  if (!rows.ok()) return respond(ErrorResponse(rows.status()));
  for (const SecretRow& row : *rows) {
    if (row.name == name) return respond(JsonResponse(200, SecretJson(row)));
  }
  respond(ErrorResponse(Status::Error("secret " + name + " went away meanwhile", ENOENT)));
}

void DeleteSecret(SecretVault& vault, const std::string& iss, const std::string& sub, const std::string& name,
                  const Responder& respond) {
  Status deleted = vault.Delete(iss, sub, name);
  if (!deleted.ok()) return respond(ErrorResponse(deleted));
  respond(JsonResponse(200, {{"name", name}, {"deleted", true}}));
}

json SecretList(const std::vector<SecretRow>& rows) {
  json list = json::array();
  for (const SecretRow& row : rows) list.push_back(SecretJson(row));
  return list;
}

// The issuer the admin names, or the answer that there is no such issuer.
bool IssuerExists(SecretVault& vault, const std::string& iss, const Responder& respond) {
  Status known = vault.IssuerKnown(iss);
  if (!known.ok()) respond(ErrorResponse(known));
  return known.ok();
}

}  // namespace

void RegisterSecretRoutes(Server& server, supervisor::SandboxManager& manager) {
  // A user's own, and (names and bindings only) its issuer's that it may name too.
  server.Route("GET", "/v1/secrets", Auth::kRequired, [&manager](HttpRequest request, Responder respond) {
    if (!RequireScope(request, kScopeSecrets, respond)) return;
    SecretVault* vault = VaultOr(manager, respond);
    if (vault == nullptr) return;
    const std::string& iss = request.auth.claims.iss;
    auto own = vault->List(iss, request.auth.claims.sub);
    if (!own.ok()) return respond(ErrorResponse(own.status()));
    auto issuers = vault->List(iss, "");
    if (!issuers.ok()) return respond(ErrorResponse(issuers.status()));
    respond(JsonResponse(200, {{"secrets", SecretList(*own)}, {"issuer_secrets", SecretList(*issuers)}}));
  });
  server.Route("PUT", "/v1/secrets/{name}", Auth::kRequired, [&manager](HttpRequest request, Responder respond) {
    if (!RequireScope(request, kScopeSecrets, respond)) return;
    if (request.auth.claims.sub.empty()) {
      return respond(ErrorResponse(Status::Error("the admin socket keeps an issuer's secrets: "
                                                 "/v1/admin/issuers/{iss}/secrets/{name}",
                                                 EINVAL)));
    }
    if (SecretVault* vault = VaultOr(manager, respond)) {
      PutSecret(*vault, request.auth.claims.iss, request.auth.claims.sub, request.params["name"], request, respond);
    }
  });
  server.Route("DELETE", "/v1/secrets/{name}", Auth::kRequired, [&manager](HttpRequest request, Responder respond) {
    if (!RequireScope(request, kScopeSecrets, respond)) return;
    if (request.auth.claims.sub.empty()) return respond(ErrorResponse(Status::Error("no secret named " + request.params["name"], ENOENT)));
    if (SecretVault* vault = VaultOr(manager, respond)) {
      DeleteSecret(*vault, request.auth.claims.iss, request.auth.claims.sub, request.params["name"], respond);
    }
  });

  // The secrets a sandbox may use.
  server.Route("GET", "/v1/sandboxes/{id}/secrets", Auth::kRequired, [&manager](HttpRequest request, Responder respond) {
    respond(ValueResponse(manager.Get(CallerOfToken(request.auth), request.params["id"]),
                          [](const supervisor::SandboxRow& row) { return json{{"id", row.id}, {"secrets", row.secrets}}; }));
  });
  server.Route("PUT", "/v1/sandboxes/{id}/secrets", Auth::kRequired, [&manager](HttpRequest request, Responder respond) {
    if (!RequireScope(request, kScopeSandboxes, respond) || !RequireScope(request, kScopeSecrets, respond)) return;
    auto body = ParseBody(request.body);
    if (!body.ok()) return respond(ErrorResponse(body.status()));
    if (!body->is_object() || !body->contains("secrets") || body->size() != 1) {
      return respond(ErrorResponse(Status::Error("expected an object {\"secrets\": [names]}", EINVAL)));
    }
    auto names = ParseSecretNames((*body)["secrets"]);
    if (!names.ok()) return respond(ErrorResponse(names.status()));
    bool ca_trusted = false;
    auto row = manager.SetSecretNames(CallerOfToken(request.auth), request.params["id"], std::move(*names), ca_trusted);
    respond(ValueResponse(row, [ca_trusted](const supervisor::SandboxRow& set) {
      return json{{"id", set.id}, {"secrets", set.secrets}, {"ca_trusted", ca_trusted}};
    }));
  });

  // An issuer's secrets, for all its users: the admin socket's.
  server.Route("GET", "/v1/admin/issuers/{iss}/secrets", Auth::kAdminOnly,
               [&manager](HttpRequest request, Responder respond) {
                 SecretVault* vault = VaultOr(manager, respond);
                 if (vault == nullptr || !IssuerExists(*vault, request.params["iss"], respond)) return;
                 auto rows = vault->List(request.params["iss"], "");
                 if (!rows.ok()) return respond(ErrorResponse(rows.status()));
                 respond(JsonResponse(200, {{"secrets", SecretList(*rows)}}));
               });
  server.Route("PUT", "/v1/admin/issuers/{iss}/secrets/{name}", Auth::kAdminOnly,
               [&manager](HttpRequest request, Responder respond) {
                 SecretVault* vault = VaultOr(manager, respond);
                 if (vault == nullptr || !IssuerExists(*vault, request.params["iss"], respond)) return;
                 PutSecret(*vault, request.params["iss"], "", request.params["name"], request, respond);
               });
  server.Route("DELETE", "/v1/admin/issuers/{iss}/secrets/{name}", Auth::kAdminOnly,
               [&manager](HttpRequest request, Responder respond) {
                 SecretVault* vault = VaultOr(manager, respond);
                 if (vault == nullptr || !IssuerExists(*vault, request.params["iss"], respond)) return;
                 DeleteSecret(*vault, request.params["iss"], "", request.params["name"], respond);
               });
}

}  // namespace corral::api
