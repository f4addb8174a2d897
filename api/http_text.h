// The text of HTTP requests, as the server reads it: paths, queries, headers, origins, close
// reasons. Pure functions over strings (no Beast), unit-tested in http_text_test.cc.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace corral::api {

std::string ToLower(std::string_view s);
bool IEquals(std::string_view a, std::string_view b);
// Without the spaces and tabs at either end.
std::string_view Trim(std::string_view s);

// nullopt for a malformed escape ("%zz", a trailing "%").
std::optional<std::string> PercentDecode(std::string_view in, bool plus_is_space);
// "/a/b" -> {"a", "b"}; "/" -> {""}. `path` starts with '/'.
std::vector<std::string_view> SplitSegments(std::string_view path);
// Percent-decoded segments; nullopt for a malformed escape or a NUL byte.
std::optional<std::vector<std::string>> DecodeSegments(std::string_view raw_path);
// "a=1&b=x%20y&c" -> {a: "1", b: "x y", c: ""}; the first of repeated keys wins.
std::optional<std::map<std::string, std::string>> ParseQuery(std::string_view query);

// The token of an `Authorization: Bearer <token>` header's value, or "".
std::string BearerTokenOf(std::string_view authorization);
// The `bearer.<jwt>` entry of Sec-WebSocket-Protocol values ("" when none), and whether
// `corral.v1` was offered.
struct OfferedSubprotocols {
  bool corral_v1 = false;
  std::string token;
};
void ScanSubprotocols(std::string_view header_value, OfferedSubprotocols& offered);
inline constexpr char kSubprotocol[] = "corral.v1";

// A random id for X-Request-Id: 16 hex digits. Not a secret; unique in practice.
std::string NewRequestId();
// No CR or LF: a value that cannot split a header.
bool IsSafeHeaderText(std::string_view s);

// A page that corrald served itself calls it from its own origin: `origin` is `host` with a
// scheme. Tokens are bearer tokens, never cookies, so a page of another origin (even one whose
// name resolves here, DNS rebinding) holds no credential of a user's: allowing the same origin
// exposes nothing that needs a token.
bool SameOrigin(std::string_view origin, std::string_view host);

// RFC 6455 7.4: codes an endpoint may send. Others become 1011 (internal error).
uint16_t SendableCloseCode(uint16_t code);
// A close reason holds at most 123 bytes; cut at a UTF-8 character boundary.
std::string TruncateReason(std::string reason);

// "127.0.0.1:53122", "[::1]:53122", or "unix".
std::string EndpointName(const sockaddr_storage& addr);

}  // namespace corral::api
