// The HTTP + WebSocket server of corrald (Boost.Beast over Boost.Asio).
//
// One io_context thread runs every connection; handlers are called on it and must not block
// (blocking work goes to a thread pool and posts its result back). The server knows nothing of
// sandboxes: it parses, authenticates, routes, enforces limits, and hands requests to handlers.
//
// Listeners:
//   - TCP (default 127.0.0.1:7878): every request needs a token (see Authenticate below) except
//     routes registered with Auth::kNone (/healthz, /metrics, static files).
//   - A unix socket (the admin socket, mode 0600): requests need no token; the peer must be
//     uid 0 (SO_PEERCRED), and handlers see AuthContext{admin = true}.
//
// Tokens: `Authorization: Bearer <jwt>`; for browsers, which cannot set headers on a WebSocket,
// also the subprotocol `bearer.<jwt>` offered beside `corral.v1` in Sec-WebSocket-Protocol, or
// `?token=<jwt>` in the URL. Every failure is the same reply: HTTP 401 with
// {"error":{"code":"unauthorized","message":"unauthorized"}} and `WWW-Authenticate: Bearer`
// (before a WebSocket upgrade, so a browser sees its connection refused); the reason goes to the
// log and corral_auth_failures_total counts it.
//
// Browsers: requests with an `Origin` header must name one of the allowed origins, or be from
// the same origin (Origin = scheme://Host: the web page corrald serves), for plain HTTP (CORS:
// preflight OPTIONS answered, Access-Control-Allow-Origin echoed) and for the WebSocket
// handshake (403 otherwise). Requests without Origin (CLI, backends) are not browsers.
//
// Limits (ServerLimits): header and body sizes (431/413), WebSocket message size (close 1009),
// total connections and WebSocket connections per user (503 / 429 before the upgrade),
// handshake timeout (a client that connects and sends nothing is dropped), idle timeout
// (WebSocket pings keep a live client's connection open; a dead one is dropped), malformed
// frames (close 1002) and invalid UTF-8 in text frames (close 1007). The daemon stays up.
// A request is judged on its headers before any of its body is read (http_session.h): a
// stranger makes the daemon hold headers only, and the bodies being read at once share one
// memory budget. Every request has a deadline for its headers and a minimum rate for its body.
//
// A connection is bound to its token: once the token expires (its `exp` plus the allowed skew)
// or stops verifying (Reauthenticate), a WebSocket is closed with 1008 and an idle keep-alive
// connection is closed; WebSocket clients renew with WsConnection::Renew (the `auth` op).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "api/metrics.h"
#include "api/server_types.h"
#include "common/status.h"

namespace corral::api {

namespace internal {
class ConnectionTaker;
}

struct RouteOptions {
  // The largest body this route takes, when not ServerLimits::max_body_bytes (e.g. file uploads).
  size_t max_body_bytes = 0;
};

class Server {
 public:
  Server(boost::asio::io_context& io, ServerLimits limits, Authenticator authenticate, Metrics& metrics);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Routes: exact path segments, "{name}" for one segment, or (at most once in a pattern)
  // "{name...}" for one or more, joined with '/' ("/v1/images/{ref...}/tag" takes
  // /v1/images/acme/agent:1/tag). Segments are percent-decoded one by one, so "a%2Fb" is one
  // segment, "a/b". Registered before listening.
  // Routes without a token (Auth::kNone) take no request body.
  void Route(std::string method, std::string pattern, Auth auth, HttpHandler handler);
  void Route(std::string method, std::string pattern, Auth auth, RouteOptions options, HttpHandler handler);
  // The WebSocket endpoint ("/v1/ws"); the subprotocol `corral.v1` is selected when offered.
  void WebSocket(std::string path, std::shared_ptr<WsHandler> handler);
  // Registered before listening; not asked for the admin socket or routes without tokens, nor
  // for a request another node forwarded (its node asked it).
  void SetRequestGate(RequestGate gate);
  // Applied to every route registered after it, and to the WebSocket endpoint's handler.
  void SetRouteWrapper(RouteWrapper wrapper);
  void SetWebSocketWrapper(WsHandlerWrapper wrapper);
  // Set before listening. A token-bearing request (or WebSocket upgrade) with an X-Corral-Hop
  // header is refused (401, as for a bad token) unless the verifier takes it; without a
  // verifier, every such request is refused.
  void SetHopVerifier(HopVerifier verifier);
  // Set before listening: asked about each request on the TCP listener before routing; takes
  // those that pass through elsewhere (api/port_proxy.h).
  void SetConnectionTaker(std::shared_ptr<internal::ConnectionTaker> taker);
  // Replaces the allowed browser origins (a config reload; on the event loop).
  void SetAllowedOrigins(std::vector<std::string> origins);

  // Binds and listens. Port 0 picks a free port (see tcp_port()).
  Status ListenTcp(const std::string& address, uint16_t port);
  // A unix socket with `mode`; `group` (not -1) becomes its group, set before listen(2) like the mode.
  Status ListenUnix(const std::string& path, int mode = 0600, gid_t group = static_cast<gid_t>(-1));
  uint16_t tcp_port() const;

  // Stops accepting and closes every connection (WebSockets with 1001 "going away").
  void Stop();

  // Verifies again the token of every open connection whose current token `which` selects
  // (after an issuer is removed or its secret replaced, or a token revoked); those that no
  // longer verify end: a WebSocket closes with 1008, an idle keep-alive connection closes, a
  // request whose body is being read is answered 401. From any thread (posted to the loop).
  void Reauthenticate(std::function<bool(const AuthContext&)> which);

  size_t connection_count() const;

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace corral::api
