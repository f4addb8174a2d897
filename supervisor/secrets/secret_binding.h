// Where a secret may go, and how it goes out (issue 21): the egress proxy adds a secret's value
// to a sandbox's request only when the request matches one of the secret's bindings.
//
// A binding names:
//   hosts          exact names ("api.github.com") or "*.suffix" (any name below suffix, not
//                  suffix itself); compared lower case without a trailing dot; at least one
//   ports          where the request goes; empty: 443
//   methods        upper case; empty: any
//   path_prefixes  each starts with '/'; matched against the request's path with its dot
//                  segments resolved, and only when the path holds no percent-encoded '.', '/'
//                  or '\' (a path the upstream might read otherwise never matches); empty: any
//   how            kHeader: the header `header` set to `value_template` with {secret} replaced
//                  (e.g. Authorization: "Bearer {secret}", or "token {secret}"); kBasic:
//                  Authorization: Basic base64(`user`:secret)
// A request that matches no binding of a secret gets nothing of it: its placeholder, if the
// sandbox sent one, goes as it is (it is worthless anywhere else).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace corral::supervisor {

struct SecretBinding {
  enum class How { kHeader, kBasic };

  std::vector<std::string> hosts;
  std::vector<uint16_t> ports;
  std::vector<std::string> methods;
  std::vector<std::string> path_prefixes;
  How how = How::kHeader;
  std::string header = "Authorization";     // kHeader
  std::string value_template = "Bearer {secret}";  // kHeader: must hold {secret} once
  std::string user;                         // kBasic

  bool operator==(const SecretBinding&) const = default;
};

// EINVAL naming what is wrong: no host, a host pattern that is no DNS name ("*" alone, "*.com"
// is allowed, "a*b" is not), a port 0, a method that is not a token, a prefix without '/', a
// header name that is not a token or is one the proxy owns (Host, Content-Length,
// Transfer-Encoding, Connection, Proxy-*), a template without {secret} once, control characters
// in a template or user, a ':' in a basic user.
Status ValidateBinding(const SecretBinding& binding);

// The request's path (no query) with dot segments resolved; nullopt when it holds a
// percent-encoded '.', '/' or '\', or a backslash.
std::optional<std::string> NormalizedPath(std::string_view path);

// Whether the binding's hosts and ports cover host:port (`host` as the sandbox asked for it: any
// case, a trailing dot), whatever the request.
bool BindingCovers(const SecretBinding& binding, std::string_view host, uint16_t port);

// Whether the request matches: `host` as the sandbox asked for it (any case, a trailing dot).
bool BindingMatches(const SecretBinding& binding, std::string_view host, uint16_t port, std::string_view method,
                    std::string_view path);

// The bindings as the API and the store write them: a list of
//   {"hosts": [...], "ports": [...], "methods": [...], "path_prefixes": [...],
//    "header": "Authorization", "value": "Bearer {secret}"}   or   {..., "basic_user": "x"}
// (ports, methods, path_prefixes optional; header and value default as above). Parse
// validates each (ValidateBinding); at least one binding, at most kMaxBindings. `where` names
// the list in errors.
inline constexpr size_t kMaxBindings = 16;
StatusOr<std::vector<SecretBinding>> ParseSecretBindings(const nlohmann::json& j, std::string_view where);
nlohmann::json SecretBindingsJson(const std::vector<SecretBinding>& bindings);

// A secret's value: 1 to 8,192 bytes, none a control character (it goes into a header line:
// a CR or LF would make another header). EINVAL naming the rule, never the value.
Status ValidateSecretValue(std::string_view value);

// The header line the binding adds: {name, value} (the value valid: ValidateSecretValue).
std::pair<std::string, std::string> BindingHeader(const SecretBinding& binding, std::string_view secret);

}  // namespace corral::supervisor
