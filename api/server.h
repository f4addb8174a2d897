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

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "api/auth_context.h"
#include "api/metrics.h"
#include "common/status.h"

namespace corral::api {

struct ServerLimits {
  size_t max_header_bytes = 16 * 1024;
  size_t max_body_bytes = 64 * 1024 * 1024;  // a route may allow more (RouteOptions)
  // What the request bodies being read at once may hold in all (503 with Retry-After above it).
  size_t max_body_memory = 256 * 1024 * 1024;
  // A body (and a response) must move at least this many bytes a second, after a grace of the
  // handshake timeout (408 otherwise). 0: no minimum.
  size_t body_min_rate = 16 * 1024;
  size_t max_ws_message_bytes = 1024 * 1024;
  size_t max_connections = 4096;            // TCP + unix, in total
  size_t max_ws_connections_per_user = 64;
  // A new connection's first request, every later request's headers (from its first byte), a
  // body's silence, and a WebSocket's opening or closing handshake.
  std::chrono::seconds handshake_timeout{10};
  // A keep-alive connection between requests; a WebSocket without traffic (pings keep it up).
  std::chrono::seconds idle_timeout{300};
  // A WebSocket connection's write queue: above high water it is "full" (see WsConnection);
  // above hard_limit the client is too slow and the connection is closed (1008 "too slow").
  size_t ws_queue_high_water = 1024 * 1024;
  size_t ws_queue_hard_limit = 64 * 1024 * 1024;
  std::vector<std::string> allowed_origins;  // exact "scheme://host[:port]"; empty: no browser
};

// Verifies a bearer token. The error's message is the reason, for the log only. On success the
// context's `expires_at` says until when (unix seconds, inclusive) the token verifies: the server
// ends a connection bound to it then (0: it does not expire).
using Authenticator = std::function<StatusOr<AuthContext>(std::string_view token)>;

struct HttpRequest {
  std::string method;      // "GET", "POST", ...
  std::string target;      // as sent, with the query
  std::string path;        // percent-decoded path without the query
  std::map<std::string, std::string> query;   // percent-decoded
  std::map<std::string, std::string> params;  // from the route pattern: "/v1/sandboxes/{id}" -> {"id": ...}
  std::map<std::string, std::string> headers; // lower-case names
  std::string body;
  AuthContext auth;        // empty iss/sub for Auth::kNone routes
  std::string request_id;  // unique per request, also sent back as X-Request-Id
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// Calls back exactly once, on the io_context thread (post to it from other threads).
using Responder = std::function<void(HttpResponse)>;
using HttpHandler = std::function<void(HttpRequest request, Responder respond)>;

enum class Auth { kRequired, kNone, kAdminOnly };

// Asked about every authenticated request (HTTP, and WebSocket upgrades) once its token has
// verified, before its handler: an answer refuses the request with it (e.g. a rate limit).
using RequestGate = std::function<std::optional<HttpResponse>(const AuthContext& auth)>;

class WsConnection;

// One per server; called for every WebSocket connection on the io_context thread.
class WsHandler {
 public:
  virtual ~WsHandler() = default;
  virtual void OnOpen(const std::shared_ptr<WsConnection>& connection) = 0;
  virtual void OnText(const std::shared_ptr<WsConnection>& connection, std::string message) = 0;
  virtual void OnBinary(const std::shared_ptr<WsConnection>& connection, std::string message) = 0;
  // The connection is gone (either side closed, or an error). No call follows.
  virtual void OnClose(const std::shared_ptr<WsConnection>& connection) = 0;
};

// A WebSocket connection, as handlers see it. All methods must be called on the io_context
// thread. Sends never block: messages queue and are written in order.
class WsConnection {
 public:
  virtual ~WsConnection() = default;
  virtual uint64_t id() const = 0;
  virtual const AuthContext& auth() const = 0;
  virtual void SendText(std::string message) = 0;
  virtual void SendBinary(std::string message) = 0;
  // Bytes queued and not yet written to the socket.
  virtual size_t queued_bytes() const = 0;
  // True while queued_bytes() is above ServerLimits::ws_queue_high_water: producers should stop
  // reading their sources until the drain callback runs.
  virtual bool full() const = 0;
  // Called (on the io_context thread) each time the queue falls to or below high water after
  // having been above it. One callback per connection; a later call replaces it.
  virtual void SetOnDrain(std::function<void()> on_drain) = 0;
  // Stops reading the client's messages (the next one stays in the socket, so TCP pushes back
  // on the client) until ResumeReading. For input that has nowhere to go yet.
  virtual void PauseReading() = 0;
  virtual void ResumeReading() = 0;
  // Sends a close frame with `code` (RFC 6455) once the queue is written, then closes.
  virtual void Close(uint16_t code, std::string reason) = 0;
  virtual bool closed() const = 0;
  // Binds the connection to a fresh token of the same user (the `auth` op): auth() becomes the
  // new token's, and its expiry the connection's. Returns the token's `exp`. Errors: EKEYREJECTED
  // when the token does not verify (the reason is logged), EPERM when it names another user,
  // EINVAL on the admin socket. The connection keeps its old token on any error.
  virtual StatusOr<int64_t> Renew(const std::string& token) = 0;
};

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

  // Routes: exact path segments or "{name}" for one segment. Registered before listening.
  // Routes without a token (Auth::kNone) take no request body.
  void Route(std::string method, std::string pattern, Auth auth, HttpHandler handler);
  void Route(std::string method, std::string pattern, Auth auth, RouteOptions options, HttpHandler handler);
  // The WebSocket endpoint ("/v1/ws"); the subprotocol `corral.v1` is selected when offered.
  void WebSocket(std::string path, std::shared_ptr<WsHandler> handler);
  // Registered before listening; not asked for the admin socket or routes without tokens.
  void SetRequestGate(RequestGate gate);
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

// {"error":{"code":"not_found","message":"..."}}; the body of every error reply.
std::string ErrorBody(std::string_view code, std::string_view message);

}  // namespace corral::api
