// Who may call: verifying tokens against the issuers and revocations (supervisor/issuers.h), and
// the admin routes that change them (docs/PROTOCOL.md, "Admin"): issuers added, removed or given
// a new secret, tokens minted and revoked. A change that ends tokens ends the open connections
// that carry them at once (Server::Reauthenticate).
#pragma once

#include "api/server.h"
#include "supervisor/config.h"
#include "supervisor/issuers.h"

namespace corral::api {

// Verifies tokens (api/jwt.h) with the issuers' secrets, then refuses revoked ones. The
// context's expires_at is the token's exp plus the allowed clock skew.
Authenticator MakeAuthenticator(const supervisor::Issuers& issuers, const supervisor::DaemonConfig& config);

// The /v1/admin routes for issuers, tokens and revocations.
void RegisterAuthAdmin(Server& server, supervisor::Issuers& issuers, const supervisor::DaemonConfig& config);

}  // namespace corral::api
