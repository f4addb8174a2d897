// Internals of jwt.cc, exposed only so that tests can check the cryptographic core against
// published vectors (RFC 4231 for HMAC-SHA256, RFC 7515 Appendix A.1 for a whole JWS) apart from
// the claim rules, which those vectors do not satisfy. Nothing outside api/ and tests includes this.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace corral::api::internal {

// HMAC-SHA256 of `data` under `key`: 32 raw bytes, or nullopt if OpenSSL fails.
std::optional<std::string> HmacSha256(std::string_view key, std::string_view data);

// Checks everything VerifyToken checks before the claims: the token's shape and size, a header
// that pins HS256, and the signature under `secret` (at least 32 bytes). The payload is not read.
Status VerifySignature(std::string_view token, std::string_view secret);

}  // namespace corral::api::internal
