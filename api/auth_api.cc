#include "api/auth_api.h"

#include <time.h>

#include <cerrno>
#include <regex>

#include <nlohmann/json.hpp>

#include "api/protocol_json.h"
#include "api/jwt.h"
#include "common/log.h"
#include "common/unix_time.h"

namespace corral::api {
namespace {

using nlohmann::json;

constexpr char kAdminLog[] = "admin";

VerifyPolicy PolicyOf(const supervisor::DaemonConfig& config) {
  VerifyPolicy policy;
  policy.now = UnixNow();
  policy.max_clock_skew_s = static_cast<int64_t>(config.max_clock_skew_s);
  policy.max_lifetime_s = static_cast<int64_t>(config.max_token_lifetime_s);
  return policy;
}

Status CheckIssuerName(const std::string& name) {
  static const std::regex kName("[A-Za-z0-9._-]{1,64}");
  if (std::regex_match(name, kName)) return Status();
  return Status::Error("name: 1 to 64 characters of A-Z a-z 0-9 . _ -", EINVAL);
}

// A token id the operator can revoke: 128 random bits, in the secrets' alphabet.
std::string NewTokenId() { return GenerateSecret().substr(0, 22); }

void RegisterIssuers(Server& server, supervisor::Issuers& issuers) {
  server.Route("GET", "/v1/admin/issuers", Auth::kAdminOnly, [&issuers](HttpRequest, Responder respond) {
    auto rows = issuers.List();
    if (!rows.ok()) return respond(ErrorResponse(rows.status()));
    json list = json::array();
    for (const auto& row : *rows) list.push_back({{"name", row.name}, {"created_at", row.created_at}});
    respond(JsonResponse(200, {{"issuers", list}}));
  });
  server.Route("POST", "/v1/admin/issuers", Auth::kAdminOnly, [&issuers](HttpRequest request, Responder respond) {
    auto body = ParseBody(request.body);
    if (!body.ok()) return respond(ErrorResponse(body.status()));
    std::string name;
    Status fields = RefuseUnknownFields(*body, {"name"});
    if (fields.ok()) fields = OptionalString(*body, "name", name);
    if (fields.ok()) fields = CheckIssuerName(name);
    if (!fields.ok()) return respond(ErrorResponse(fields));
    supervisor::IssuerRow row{name, GenerateSecret(), UnixNow()};
    Status added = issuers.Add(row);
    if (!added.ok()) {
      if (added.error_number() == EEXIST) return respond(ErrorResponse(Status::Error("issuer " + name + " exists", EEXIST)));
      return respond(ErrorResponse(added));
    }
    LogInfo(kAdminLog, "issuer added", {{"issuer", name}});
    respond(JsonResponse(201, {{"name", row.name}, {"secret", row.secret}, {"created_at", row.created_at}}));
  });
  server.Route("DELETE", "/v1/admin/issuers/{name}", Auth::kAdminOnly,
               [&server, &issuers](HttpRequest request, Responder respond) {
                 const std::string name = request.params["name"];
                 Status removed = issuers.Remove(name);
                 if (!removed.ok()) {
                   if (removed.error_number() == ENOENT) return respond(ErrorResponse(Status::Error("no issuer " + name, ENOENT)));
                   return respond(ErrorResponse(removed));
                 }
                 LogInfo(kAdminLog, "issuer removed", {{"issuer", name}});
                 server.Reauthenticate([name](const AuthContext& auth) { return auth.iss == name; });
                 respond(JsonResponse(200, {{"name", name}}));
               });
  // A new secret: tokens signed with the old one stop working, open connections included.
  server.Route("POST", "/v1/admin/issuers/{name}/secret", Auth::kAdminOnly,
               [&server, &issuers](HttpRequest request, Responder respond) {
                 const std::string name = request.params["name"];
                 auto body = ParseBody(request.body);
                 if (!body.ok()) return respond(ErrorResponse(body.status()));
                 Status fields = RefuseUnknownFields(*body, {});
                 if (!fields.ok()) return respond(ErrorResponse(fields));
                 const std::string secret = GenerateSecret();
                 Status replaced = issuers.ReplaceSecret(name, secret);
                 if (!replaced.ok()) {
                   if (replaced.error_number() == ENOENT) return respond(ErrorResponse(Status::Error("no issuer " + name, ENOENT)));
                   return respond(ErrorResponse(replaced));
                 }
                 LogInfo(kAdminLog, "issuer secret replaced", {{"issuer", name}});
                 server.Reauthenticate([name](const AuthContext& auth) { return auth.iss == name; });
                 respond(JsonResponse(200, {{"name", name}, {"secret", secret}}));
               });
}

void RegisterTokens(Server& server, supervisor::Issuers& issuers, const supervisor::DaemonConfig& config) {
  server.Route("POST", "/v1/admin/tokens", Auth::kAdminOnly, [&issuers, &config](HttpRequest request, Responder respond) {
    auto body = ParseBody(request.body);
    if (!body.ok()) return respond(ErrorResponse(body.status()));
    std::string issuer, sub, jti;
    std::optional<uint64_t> ttl;
    Status fields = RefuseUnknownFields(*body, {"issuer", "sub", "ttl_s", "scope", "limits", "budget", "jti"});
    if (fields.ok()) fields = OptionalString(*body, "issuer", issuer);
    if (fields.ok()) fields = OptionalString(*body, "sub", sub);
    if (fields.ok()) fields = OptionalString(*body, "jti", jti);
    if (fields.ok()) fields = OptionalUint(*body, "ttl_s", ttl);
    if (fields.ok() && sub.empty()) fields = Status::Error("sub: required (a string)", EINVAL);
    if (!fields.ok()) return respond(ErrorResponse(fields));
    if (ttl.value_or(3600) > config.max_token_lifetime_s) {
      return respond(ErrorResponse(Status::Error(
          "ttl_s: above auth.max_token_lifetime_s (" + std::to_string(config.max_token_lifetime_s) + ")", EINVAL)));
    }
    std::optional<std::string> secret = issuers.Secret(issuer);
    if (!secret) return respond(ErrorResponse(Status::Error("no issuer " + issuer, ENOENT)));
    if (jti.empty()) jti = NewTokenId();
    const int64_t now = UnixNow();
    const int64_t exp = now + static_cast<int64_t>(ttl.value_or(3600));
    json claims = {{"iss", issuer}, {"sub", sub}, {"iat", now}, {"exp", exp}, {"jti", jti}};
    for (const char* key : {"scope", "limits", "budget"}) {
      if (body->contains(key)) claims[key] = (*body)[key];
    }
    auto token = MintToken(claims, *secret);
    if (!token.ok()) return respond(ErrorResponse(token.status()));
    // A token the daemon would refuse is not handed out: its claims are checked as they will be.
    auto verified = VerifyToken(*token, [&](std::string_view) { return secret; }, PolicyOf(config));
    if (!verified.ok()) {
      return respond(ErrorResponse(
          Status::Error("the token would be refused: " + std::string(verified.status().message()), EINVAL)));
    }
    respond(JsonResponse(200, {{"token", *token}, {"exp", exp}, {"jti", jti}}));
  });

  // Revocation by token id: for one issuer, or (no "issuer") for every issuer's tokens with it.
  server.Route("POST", "/v1/admin/revocations", Auth::kAdminOnly,
               [&server, &issuers](HttpRequest request, Responder respond) {
                 auto body = ParseBody(request.body);
                 if (!body.ok()) return respond(ErrorResponse(body.status()));
                 supervisor::RevocationRow row;
                 Status fields = RefuseUnknownFields(*body, {"jti", "issuer"});
                 if (fields.ok()) fields = OptionalString(*body, "jti", row.jti);
                 if (fields.ok()) fields = OptionalString(*body, "issuer", row.iss);
                 if (fields.ok() && row.jti.empty()) fields = Status::Error("jti: required (a string)", EINVAL);
                 if (fields.ok() && row.jti.size() > 256) fields = Status::Error("jti: at most 256 bytes", EINVAL);
                 if (fields.ok() && !row.iss.empty()) fields = CheckIssuerName(row.iss);
                 if (!fields.ok()) return respond(ErrorResponse(fields));
                 row.revoked_at = UnixNow();
                 Status revoked = issuers.Revoke(row);
                 if (!revoked.ok()) {
                   if (revoked.error_number() == EEXIST) {
                     return respond(ErrorResponse(Status::Error("token " + row.jti + " is revoked already", EEXIST)));
                   }
                   return respond(ErrorResponse(revoked));
                 }
                 LogInfo(kAdminLog, "token revoked", {{"jti", row.jti}, {"issuer", row.iss}});
                 server.Reauthenticate([row](const AuthContext& auth) {
                   return auth.claims.jti == row.jti && (row.iss.empty() || auth.iss == row.iss);
                 });
                 respond(JsonResponse(201, {{"jti", row.jti}, {"issuer", row.iss}, {"revoked_at", row.revoked_at}}));
               });
  server.Route("GET", "/v1/admin/revocations", Auth::kAdminOnly, [&issuers](HttpRequest, Responder respond) {
    json list = json::array();
    for (const auto& row : issuers.Revocations()) {
      list.push_back({{"jti", row.jti}, {"issuer", row.iss}, {"revoked_at", row.revoked_at}});
    }
    respond(JsonResponse(200, {{"revocations", list}}));
  });
}

}  // namespace

Authenticator MakeAuthenticator(const supervisor::Issuers& issuers, const supervisor::DaemonConfig& config) {
  return [&issuers, &config](std::string_view token) -> StatusOr<AuthContext> {
    const VerifyPolicy policy = PolicyOf(config);
    ASSIGN_OR_RETURN(Claims claims,
                     VerifyToken(token, [&issuers](std::string_view issuer) { return issuers.Secret(issuer); }, policy));
    if (issuers.Revoked(claims.iss, claims.jti)) return Status::Error("token revoked (jti " + claims.jti + ")");
    AuthContext auth;
    auth.iss = claims.iss;
    auth.sub = claims.sub;
    auth.expires_at = claims.exp + policy.max_clock_skew_s;
    auth.claims = std::move(claims);
    return auth;
  };
}

void RegisterAuthAdmin(Server& server, supervisor::Issuers& issuers, const supervisor::DaemonConfig& config) {
  RegisterIssuers(server, issuers);
  RegisterTokens(server, issuers, config);
}

}  // namespace corral::api
