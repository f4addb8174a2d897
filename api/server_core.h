// Inside the server (server.h): the state every connection shares, and the pieces its HTTP and
// WebSocket sessions (http_session.cc, ws_session.cc) and its listeners (server.cc) are made of.
// Not for the rest of the daemon: it includes Beast, which is slow to compile.
//
// Threading: everything here runs on the io_context's thread (the server requires one thread),
// which makes that thread each connection's strand; the only entry points from other threads
// are Server::Stop and Server::Reauthenticate (posted) and a Responder (dispatched).
#pragma once

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "api/body_budget.h"
#include "api/metrics.h"
#include "api/server_types.h"
#include "common/log.h"
#include "common/unique_fd.h"

namespace corral::api::internal {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;

// TCP and unix connections share one stream type: the generic protocol holds either.
using Protocol = net::generic::stream_protocol;
using Socket = Protocol::socket;
using Stream = beast::basic_stream<Protocol>;
using Request = http::request<http::string_body>;

inline constexpr char kLog[] = "api";

// Boost 1.74's beast::string_view is boost::string_view, not std::string_view.
inline std::string_view SV(beast::string_view s) { return std::string_view(s.data(), s.size()); }

template <typename F>
void CallSafely(std::string_view what, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    LogError(kLog, "callback threw", {{"callback", what}, {"error", e.what()}});
  } catch (...) {
    LogError(kLog, "callback threw", {{"callback", what}, {"error", "unknown exception"}});
  }
}

struct Peer {
  bool is_unix = false;
  std::string name;  // "127.0.0.1:53122" or "unix:pid=123,uid=0"
};

struct RouteEntry {
  std::string method;
  std::vector<std::string> segments;  // "{name}" captures one segment, "{name...}" one or more
  Auth auth;
  size_t max_body = 0;  // 0: ServerLimits::max_body_bytes
  HttpHandler handler;
};

struct RouteMatch {
  const RouteEntry* route = nullptr;
  std::map<std::string, std::string> params;
  std::vector<std::string> methods;  // every method registered for the path
};

// What the server reaches in every open connection.
class Session {
 public:
  virtual ~Session() = default;
  // Server::Stop: close (WebSockets with 1001).
  virtual void Shutdown() = 0;
  // Server::Reauthenticate: when `which` selects the connection's token holder, verify its token
  // again; a connection whose token no longer verifies ends (see server.h).
  virtual void Recheck(const std::function<bool(const AuthContext&)>& which) = 0;
};

class ServerCore;
class ConnectionSlot;

// A connection whose request is not the API's but passes through to something else (a sandbox's
// port, api/port_proxy.h), as the server hands it over: the request's header (its body not read:
// what came after the header is in `buffer`).
struct Takeover {
  std::shared_ptr<ServerCore> core;
  Stream& stream;
  beast::flat_buffer& buffer;
  const Request& header;
  const Peer& peer;
  uint64_t id;
  std::unique_ptr<ConnectionSlot>& slot;
  const std::string& request_id;
};

// Asked about every request on a TCP listener before the origin check and routing.
class ConnectionTaker {
 public:
  virtual ~ConnectionTaker() = default;
  // True when it takes the connection: it has then moved the stream, the buffer and the slot out
  // of `takeover`, and the HTTP session is over.
  virtual bool Take(Takeover& takeover) = 0;
};

struct Listener {
  net::basic_socket_acceptor<Protocol> acceptor;
  net::steady_timer retry_timer;
  bool is_unix;
  std::string name;
};

class ServerCore : public std::enable_shared_from_this<ServerCore> {
 public:
  ServerCore(net::io_context& io_context, ServerLimits server_limits, Authenticator authenticate,
             Metrics& metrics);

  Status Listen(bool is_unix, const sockaddr* addr, socklen_t len, const std::string& name, int unix_mode,
                gid_t unix_group = static_cast<gid_t>(-1));
  void Accept(Listener* listener);
  void OnReadable(Listener* listener, const beast::error_code& ec);
  void NewConnection(UniqueFd fd, const sockaddr_storage& addr, bool is_unix);
  void DoStop();
  void DoReauthenticate(const std::function<bool(const AuthContext&)>& which);

  RouteMatch FindRoute(std::string_view method, const std::vector<std::string>& segments, bool is_unix) const;
  bool OriginAllowed(std::string_view origin) const {
    return std::find(allowed_origins.begin(), allowed_origins.end(), origin) != allowed_origins.end();
  }
  // Verifies a token; on failure counts and logs the reason (never the token).
  StatusOr<AuthContext> Authenticate(const std::string& token, const Peer& peer, const std::string& request_id);
  // Verifies a token without counting or logging a failure: for what may or may not be one of
  // corral's (an app's own Authorization passing through a port URL, api/port_proxy.h).
  StatusOr<AuthContext> VerifyToken(const std::string& token);
  // A request's X-Corral-Hop mark (hop.h): "" when it has none, the forwarding node when it
  // verifies; an error (counted and logged like a bad token) when it does not.
  StatusOr<std::string> CheckHop(const beast::http::fields& headers, std::string_view method, std::string_view target,
                                 const Peer& peer, const std::string& request_id);

  void Register(uint64_t id, std::weak_ptr<Session> session) { sessions[id] = std::move(session); }
  // Called from a session's destructor: the entry is removed unless another session (the
  // WebSocket that took over an HTTP connection) has registered under the same id.
  void Unregister(uint64_t id) {
    auto it = sessions.find(id);
    if (it != sessions.end() && it->second.expired()) sessions.erase(it);
  }

  net::io_context& io;
  const ServerLimits limits;
  const std::chrono::seconds handshake_timeout;  // limits' times, as the timers take them
  const std::chrono::seconds idle_timeout;
  std::vector<std::string> allowed_origins;  // limits.allowed_origins, then what a reload set
  std::vector<RouteEntry> routes;
  std::string ws_path;
  std::shared_ptr<WsHandler> ws_handler;
  RequestGate gate;
  RouteWrapper route_wrapper;
  WsHandlerWrapper ws_wrapper;
  HopVerifier hop_verifier;
  std::shared_ptr<ConnectionTaker> connection_taker;
  std::vector<std::unique_ptr<Listener>> listeners;
  std::string unix_path;  // removed at Stop
  bool unix_group_access = false;  // the admin socket is 0660 for a group: its members may connect
  uint16_t tcp_port = 0;
  bool stopping = false;
  uint64_t next_id = 1;
  std::atomic<size_t> connection_count{0};
  std::unordered_map<uint64_t, std::weak_ptr<Session>> sessions;
  std::unordered_map<std::string, size_t> ws_per_user;
  BodyBudget body_budget;

  Family<Counter>* http_requests;
  Histogram* http_duration;
  Counter* auth_failures;
  Counter* auth_ended;
  Gauge* connections;
  Gauge* ws_connections;
  Counter* ws_messages_in;
  Counter* ws_messages_out;
  Counter* ws_bytes_in;
  Counter* ws_bytes_out;

 private:
  Authenticator authenticate_;
};

// Counts one open connection for as long as it lives; moves from the HTTP session to the
// WebSocket session on upgrade.
class ConnectionSlot {
 public:
  explicit ConnectionSlot(std::shared_ptr<ServerCore> core) : core_(std::move(core)) {
    core_->connection_count.fetch_add(1);
    core_->connections->Add(1);
  }
  ~ConnectionSlot() {
    core_->connection_count.fetch_sub(1);
    core_->connections->Add(-1);
  }
  ConnectionSlot(const ConnectionSlot&) = delete;
  ConnectionSlot& operator=(const ConnectionSlot&) = delete;

 private:
  std::shared_ptr<ServerCore> core_;
};

// One of a user's WebSocket connections, counted against max_ws_connections_per_user.
class UserSlot {
 public:
  UserSlot(std::shared_ptr<ServerCore> core, std::string key) : core_(std::move(core)), key_(std::move(key)) {
    ++core_->ws_per_user[key_];
  }
  ~UserSlot() {
    auto it = core_->ws_per_user.find(key_);
    if (it != core_->ws_per_user.end() && --it->second == 0) core_->ws_per_user.erase(it);
  }
  UserSlot(const UserSlot&) = delete;
  UserSlot& operator=(const UserSlot&) = delete;

 private:
  std::shared_ptr<ServerCore> core_;
  std::string key_;
};

// The steady-clock time at which a token that verifies until `expires_at` (unix seconds, the
// last second it is accepted in) stops verifying: the start of the next second. Max for 0.
std::chrono::steady_clock::time_point TokenDeadline(int64_t expires_at);

// {"error":{...}} with `status`: the body of every error reply the server makes itself.
HttpResponse ErrorResponse(int status, std::string_view code, std::string_view message);
HttpResponse UnauthorizedResponse();

}  // namespace corral::api::internal
