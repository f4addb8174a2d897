// The server's vocabulary (server.h is the server itself): its limits, the requests and
// responses handlers see, how a token is verified, and the WebSocket connection handlers talk
// to. Shared by the server's inside (server_core.h) and the protocol on top (the route files).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/auth_context.h"
#include "common/server_limits.h"
#include "common/status.h"

namespace corral::api {

// The server's limits (common/server_limits.h): the daemon's config holds them as they are.
using ServerLimits = corral::ServerLimits;

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
  // The node of the fleet that forwarded this request here (its verified X-Corral-Hop mark,
  // api/hop.h); "" for a request a client sent here itself.
  std::string forwarded_by;
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

// kNode: the fleet's own routes, for its nodes alone: a request with a hop mark that verifies
// (api/hop.h) and no token; the route takes a body.
enum class Auth { kRequired, kNone, kAdminOnly, kNode };

// Wraps each route's handler as it is registered (a fleet's forwarding, api/forwarding.h):
// given the route, returns the handler the server calls.
using RouteWrapper =
    std::function<HttpHandler(const std::string& method, const std::string& pattern, Auth auth, HttpHandler handler)>;

// Verifies the mark of a request another node forwarded (the X-Corral-Hop header, api/hop.h):
// the forwarding node, or an error (its message for the log only) that refuses the request.
using HopVerifier = std::function<StatusOr<std::string>(std::string_view mark, std::string_view method,
                                                        std::string_view target, std::string_view authorization)>;

// Asked about every authenticated request (HTTP, and WebSocket upgrades) once its token has
// verified, before its handler: an answer refuses the request with it (e.g. a rate limit).
using RequestGate = std::function<std::optional<HttpResponse>(const AuthContext& auth)>;

class WsConnection;
class WsHandler;

// Wraps the WebSocket endpoint's handler as it is registered (a fleet's forwarding of ops).
using WsHandlerWrapper = std::function<std::shared_ptr<WsHandler>(std::shared_ptr<WsHandler> handler)>;

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
  // Another such callback, called after that one, for as long as the connection lives (the
  // fleet's forwarder: its upstream streams wait for the client as the local ones do).
  virtual void AddOnDrain(std::function<void()> on_drain) = 0;
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
  // The token the connection is bound to ("" on the admin socket): what a fleet's node presents
  // for the client to the node it forwards the client's ops to.
  virtual const std::string& token() const = 0;
  // The node that forwarded this connection here (HttpRequest::forwarded_by); "" for a client's.
  virtual const std::string& forwarded_by() const = 0;
};

}  // namespace corral::api
