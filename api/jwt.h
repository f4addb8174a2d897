// JSON Web Tokens, HS256 only: how corrald knows who is calling and what they may ask for.
//
// An operator's backend (an "issuer") shares a secret of at least 32 bytes with corrald and mints
// short-lived tokens for its users. corrald verifies them with VerifyToken:
//   - the header must be exactly {"alg":"HS256"} (optionally "typ":"JWT"; "kid" ignored); any
//     other alg ("none", "HS512", "RS256"...) or any "crit" is rejected: the algorithm is pinned;
//   - `iss` is read from the (not yet trusted) payload only to pick the issuer's secret; an
//     unknown issuer is rejected;
//   - the signature is recomputed with OpenSSL's HMAC and compared in constant time
//     (CRYPTO_memcmp) before any other claim is looked at;
//   - `exp` is required, `nbf` and `iat` honoured, all within a bounded clock skew; a token whose
//     lifetime (exp - iat, or exp - now without iat) exceeds the maximum is rejected;
//   - `sub` is required and non-empty (at most 256 bytes), as is `iss` (at most 128 bytes).
// Every rejection returns an error whose message says why, for the log only: the API answers
// every one of them with the same 401.
//
// Claims (docs/PROTOCOL.md, "Tokens"): iss, sub, exp, iat, nbf, jti, scope (space-separated
// string or array), limits {...}, budget {...}. Unknown claims are ignored. `limits` and `budget`
// are parsed and checked here, once, into the supervisor's own values (UserCaps, Budget).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

// A token's parts are base64url without padding: Base64UrlEncode/Decode (strict: no padding, no
// character outside the alphabet, no non-canonical trailing bits).
#include "common/base64.h"
#include "common/status.h"
#include "supervisor/relay/budget.h"
#include "supervisor/sandboxes/sandbox_types.h"

namespace corral::api {

// Scopes a token may carry. A token without a `scope` claim has all the user scopes below;
// kAdmin is never implied.
inline constexpr char kScopeSandboxes[] = "sandboxes";  // create, destroy, start, stop, snapshot, fork
inline constexpr char kScopeExec[] = "exec";            // commands (no PTY)
inline constexpr char kScopeTerminal[] = "terminal";    // PTY commands
inline constexpr char kScopeFiles[] = "files";          // the file API, cp, tar
inline constexpr char kScopeSessions[] = "sessions";    // agent sessions (Claude Code) and their model calls
inline constexpr char kScopeSecrets[] = "secrets";      // the user's secrets, and naming them for a sandbox
// Never implied: sandboxes with a real network interface ("network": "full", full_network.h).
inline constexpr char kScopeUnsafeFullNetwork[] = "unsafe:full_network";
// Never implied: a sandbox port anyone may reach without a token or signature (api/port_proxy.h).
inline constexpr char kScopePortsPublic[] = "ports:public";

struct Claims {
  std::string iss;
  std::string sub;
  int64_t exp = 0;
  std::optional<int64_t> iat;
  std::optional<int64_t> nbf;
  std::string jti;                    // "" when absent
  std::vector<std::string> scopes;    // explicit, or the default user scopes
  // The caps the issuer puts on what this user may ask for (limits.sandboxes, .memory_bytes,
  // .cpus as millicores, .pids, .disk_bytes, .idle_timeout_s, .commands, .sessions, .egress);
  // absent: the daemon's own maxima. full_network is never set here: it is a scope.
  supervisor::UserCaps limits;
  // budget.ai_usd (as micro-dollars), .compute_s (as milliseconds), .window (absent: a day),
  // .window_start: what the relay and the compute meter enforce.
  supervisor::Budget budget;

  bool HasScope(std::string_view scope) const;
};

struct VerifyPolicy {
  int64_t now = 0;                   // unix seconds
  int64_t max_clock_skew_s = 60;
  int64_t max_lifetime_s = 24 * 3600;
};

// Returns the issuer's secret, or nullopt when there is no such issuer.
using SecretLookup = std::function<std::optional<std::string>(std::string_view issuer)>;

StatusOr<Claims> VerifyToken(std::string_view token, const SecretLookup& lookup,
                             const VerifyPolicy& policy);

// Builds and signs a token: header {"alg":"HS256","typ":"JWT"}, the given payload verbatim.
// For operators (`corral token mint`) and tests; the secret must be at least 32 bytes.
StatusOr<std::string> MintToken(const nlohmann::json& payload, std::string_view secret);

// A new issuer secret: 32 bytes from the kernel's CSPRNG (getrandom), base64url without padding
// (43 characters). The secret is used as the HMAC key exactly as written (its text bytes).
std::string GenerateSecret();

}  // namespace corral::api
