// The text of preview-URL requests and answers (docs/PROTOCOL.md "Ports"), apart from the
// connections that carry them (api/port_proxy.h): where a request goes, what of corral's is taken
// out of it before the app sees it, and the head of the app's answer as the client gets it.
// Pure functions; tests/unit/port_http_test.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>

namespace corral::api::internal {

// Where a request goes, from its Host and target alone.
struct PortRoute {
  std::string sandbox_id;
  int64_t port = 0;
  bool by_host = false;
  std::string prefix;  // the path form's /v1/sandboxes/{id}/ports/{port}
  std::string rest;    // what the app is asked for: the path form's target below the prefix, or the host form's target
};

// The route of a request, or nullopt when it is the API's. `domain`: ports.domain ("" = no host
// routing). Host form: PORT-sb-XXXX.<domain> or PORT-sb_XXXX.<domain> (any letter case, any
// port after a ':'). Path form: /v1/sandboxes/{id}/ports/{port}/... but POST .../signed-url.
std::optional<PortRoute> MatchPortRoute(std::string_view method, std::string_view host, std::string_view target,
                                        std::string_view domain);

// `target` without corral's query parameters (token, corral_sig, corral_exp; percent-decoded
// into `found`), the others kept in their order and spelling.
std::string StripCorralParams(std::string_view target, std::map<std::string, std::string>& found);

// A Cookie header's value without every cookie called `name`, and the last one's value in `value`.
std::string StripCookie(std::string_view cookies, std::string_view name, std::string& value);

// A Set-Cookie of the app's, kept to its own port: its Domain attribute dropped (a cookie for the
// preview domain would go to every sandbox's port), and, when `path` is not empty (the path form,
// on corral's own origin), its Path made `path`.
std::string ConfineSetCookie(std::string_view value, std::string_view path);

// A Sec-WebSocket-Protocol value without the `bearer.TOKEN` entries (corral's way of sending a
// token from a browser) for which `is_token` is true.
std::string StripTokenSubprotocols(std::string_view value, const std::function<bool(const std::string&)>& is_token);

// The head of the app's answer as the client gets it: the status line, then `added` (whole
// header lines), then the app's fields with every Set-Cookie confined (ConfineSetCookie with
// `cookie_path`); a final answer (2xx-5xx) says Connection: close instead of the app's
// Connection and Keep-Alive, a 101 keeps its Upgrade. Written from the parsed head, never from
// the app's bytes: what a browser reads is exactly what corral wrote.
std::string ClientResponseHead(const boost::beast::http::response_header<>& head, std::string_view added,
                               std::string_view cookie_path);

}  // namespace corral::api::internal
