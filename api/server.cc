// The server's shared state and its listeners; the connections are in http_session.cc and
// ws_session.cc (server_core.h says how the pieces fit).
//
// Nothing throws out of a completion handler: Beast and Asio are called with their error_code
// overloads, and the application's callbacks (authenticator, handlers) inside try/catch.
#include "api/server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>

#include "api/error_codes.h"
#include "api/http_session.h"
#include "api/http_text.h"
#include "api/server_core.h"

namespace corral::api {
namespace internal {

ServerCore::ServerCore(net::io_context& io_context, ServerLimits server_limits, Authenticator authenticate,
                       Metrics& metrics)
    : io(io_context),
      limits(std::move(server_limits)),
      handshake_timeout(limits.handshake_timeout_s),
      idle_timeout(limits.idle_timeout_s),
      allowed_origins(limits.allowed_origins),
      body_budget(limits.max_body_memory),
      authenticate_(std::move(authenticate)) {
  http_requests = &metrics.AddCounterFamily("corral_http_requests_total", "HTTP requests answered, by status code",
                                            {"code"});
  http_duration = &metrics.AddHistogram(
      "corral_http_request_duration_seconds", "Time from a request's arrival to its response being written",
      {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10});
  auth_failures = &metrics.AddCounter("corral_auth_failures_total",
                                      "Requests refused because their token was missing or did not verify");
  auth_ended = &metrics.AddCounter("corral_auth_ended_connections_total",
                                   "Open connections ended because their token expired or stopped verifying");
  connections = &metrics.AddGauge("corral_connections", "Open connections (TCP and admin socket)");
  ws_connections = &metrics.AddGauge("corral_websocket_connections", "Open WebSocket connections");
  auto& messages =
      metrics.AddCounterFamily("corral_websocket_messages_total", "WebSocket messages, by direction", {"direction"});
  auto& bytes = metrics.AddCounterFamily("corral_websocket_bytes_total",
                                         "WebSocket message payload bytes, by direction", {"direction"});
  ws_messages_in = &messages.WithLabels({"in"});
  ws_messages_out = &messages.WithLabels({"out"});
  ws_bytes_in = &bytes.WithLabels({"in"});
  ws_bytes_out = &bytes.WithLabels({"out"});
}

namespace {

bool IsCapture(const std::string& pattern) {
  return pattern.size() >= 2 && pattern.front() == '{' && pattern.back() == '}';
}

// "{name...}": one or more segments, joined with '/'.
bool IsRestCapture(const std::string& pattern) { return IsCapture(pattern) && pattern.ends_with("...}"); }

// Whether `route` matches `segments`; its captures go into `params`, and `literal` counts the
// segments matched literally.
bool MatchRoute(const RouteEntry& route, const std::vector<std::string>& segments,
                std::map<std::string, std::string>& params, int& literal) {
  const auto& patterns = route.segments;
  auto rest = std::find_if(patterns.begin(), patterns.end(), IsRestCapture);
  const size_t before = static_cast<size_t>(rest - patterns.begin());
  const size_t after = rest == patterns.end() ? 0 : patterns.size() - before - 1;
  if (rest == patterns.end() ? patterns.size() != segments.size() : segments.size() < before + after + 1) return false;
  auto one = [&](const std::string& pattern, const std::string& segment) {
    if (IsCapture(pattern)) {
      params[pattern.substr(1, pattern.size() - 2)] = segment;
      return true;
    }
    if (pattern != segment) return false;
    ++literal;
    return true;
  };
  for (size_t i = 0; i < before; ++i) {
    if (!one(patterns[i], segments[i])) return false;
  }
  if (rest == patterns.end()) return true;
  for (size_t i = 0; i < after; ++i) {
    if (!one(patterns[before + 1 + i], segments[segments.size() - after + i])) return false;
  }
  std::string joined;
  for (size_t i = before; i < segments.size() - after; ++i) joined += (joined.empty() ? "" : "/") + segments[i];
  params[rest->substr(1, rest->size() - 5)] = joined;
  return true;
}

}  // namespace

RouteMatch ServerCore::FindRoute(std::string_view method, const std::vector<std::string>& segments,
                                 bool is_unix) const {
  RouteMatch best;
  int best_score = -1;
  for (const RouteEntry& route : routes) {
    if (route.auth == Auth::kAdminOnly && !is_unix) continue;  // invisible on TCP
    std::map<std::string, std::string> params;
    int literal = 0;
    if (!MatchRoute(route, segments, params, literal)) continue;
    if (std::find(best.methods.begin(), best.methods.end(), route.method) == best.methods.end()) {
      best.methods.push_back(route.method);
    }
    // Literal segments win over captures ("/v1/x/new" before "/v1/x/{id}"); then the first registered.
    if (route.method == method && literal > best_score) {
      best_score = literal;
      best.route = &route;
      best.params = std::move(params);
    }
  }
  return best;
}

StatusOr<AuthContext> ServerCore::VerifyToken(const std::string& token) {
  if (token.empty()) return Status::Error("no token");
  try {
    StatusOr<AuthContext> result = authenticate_ ? authenticate_(token) : Status::Error("no authenticator");
    if (result.ok()) result->admin = false;  // never on TCP
    return result;
  } catch (const std::exception& e) {
    return Status::Error(std::string("authenticator threw: ") + e.what());
  }
}

StatusOr<AuthContext> ServerCore::Authenticate(const std::string& token, const Peer& peer,
                                               const std::string& request_id) {
  StatusOr<AuthContext> result = VerifyToken(token);
  if (result.ok()) return result;
  const Status failure = result.status();
  auth_failures->Increment();
  LogWarn(kLog, "authentication failed",
          {{"reason", failure.message()}, {"remote", peer.name}, {"request_id", request_id}});
  return failure;
}

StatusOr<std::string> ServerCore::CheckHop(const http::fields& headers, std::string_view method,
                                           std::string_view target, const Peer& peer, const std::string& request_id) {
  auto mark = headers.find("x-corral-hop");
  if (mark == headers.end()) return std::string();
  auto authorization = headers.find(http::field::authorization);
  StatusOr<std::string> from = Status::Error("hop mark: this node forwards nothing (no node.cluster_secret_file)");
  if (hop_verifier) {
    try {
      from = hop_verifier(SV(mark->value()), method, target,
                          authorization == headers.end() ? std::string_view() : SV(authorization->value()));
    } catch (const std::exception& e) {
      from = Status::Error(std::string("hop verifier threw: ") + e.what());
    }
  }
  if (from.ok()) return from;
  auth_failures->Increment();
  LogWarn(kLog, "authentication failed",
          {{"reason", from.status().message()}, {"remote", peer.name}, {"request_id", request_id}});
  return from.status();
}

void ServerCore::DoReauthenticate(const std::function<bool(const AuthContext&)>& which) {
  // Recheck may end a session and so change the map: work on a copy.
  std::vector<std::shared_ptr<Session>> open;
  for (auto& [id, weak] : sessions) {
    if (auto session = weak.lock()) open.push_back(std::move(session));
  }
  for (auto& session : open) {
    CallSafely("Session::Recheck", [&] { session->Recheck(which); });
  }
}

std::chrono::steady_clock::time_point TokenDeadline(int64_t expires_at) {
  if (expires_at <= 0) return std::chrono::steady_clock::time_point::max();
  // The token verifies through the second `expires_at`: it ends when the next one begins.
  const auto end = std::chrono::system_clock::time_point(std::chrono::seconds(expires_at + 1));
  const auto left = end - std::chrono::system_clock::now();
  return std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(left);
}

HttpResponse ErrorResponse(int status, std::string_view code, std::string_view message) {
  HttpResponse r;
  r.status = status;
  r.body = ErrorBody(code, message);
  return r;
}

HttpResponse UnauthorizedResponse() {
  HttpResponse r = ErrorResponse(401, "unauthorized", "unauthorized");
  r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

// --- listeners ------------------------------------------------------------------------------

Status ErrorFromCode(const std::string& what, const beast::error_code& ec) {
  if (ec.category() == boost::system::system_category()) return ErrnoError(what, ec.value());
  return Status::Error(what + ": " + ec.message());
}

Status ServerCore::Listen(bool is_unix, const sockaddr* addr, socklen_t len, const std::string& name,
                          int unix_mode, gid_t unix_group) {
  // Our own socket(2) and accept4(2), for SOCK_CLOEXEC: Asio's leave the descriptors open across
  // exec, and this process starts sandboxes.
  UniqueFd fd(::socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return ErrnoError("socket for " + name);
  if (!is_unix) {
    int one = 1;
    if (setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
      return ErrnoError("SO_REUSEADDR on " + name);
    }
  }
  if (::bind(fd.get(), addr, len) != 0) return ErrnoError("bind " + name);
  // Before listen(2), so that no one connects while the mode is still the umask's.
  if (is_unix && unix_group != static_cast<gid_t>(-1) &&
      chown(reinterpret_cast<const sockaddr_un*>(addr)->sun_path, static_cast<uid_t>(-1), unix_group) != 0) {
    return ErrnoError("chown " + name);
  }
  if (is_unix &&
      chmod(reinterpret_cast<const sockaddr_un*>(addr)->sun_path, static_cast<mode_t>(unix_mode)) != 0) {
    return ErrnoError("chmod " + name);
  }
  if (::listen(fd.get(), SOMAXCONN) != 0) return ErrnoError("listen " + name);
  if (!is_unix) {
    sockaddr_storage bound{};
    socklen_t bound_len = sizeof(bound);
    if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0) {
      return ErrnoError("getsockname " + name);
    }
    tcp_port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                 : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  }
  auto listener = std::make_unique<Listener>(
      Listener{net::basic_socket_acceptor<Protocol>(io), net::steady_timer(io), is_unix, name});
  beast::error_code ec;
  listener->acceptor.assign(Protocol(addr->sa_family, is_unix ? 0 : IPPROTO_TCP), fd.get(), ec);
  if (ec) return ErrorFromCode("listen " + name, ec);
  fd.release();
  Accept(listener.get());
  listeners.push_back(std::move(listener));
  LogInfo(kLog, "listening",
          {{"address", is_unix ? name : name + " (port " + std::to_string(tcp_port) + ")"}});
  return Status();
}

void ServerCore::Accept(Listener* listener) {
  listener->acceptor.async_wait(
      net::socket_base::wait_read,
      [self = shared_from_this(), listener](const beast::error_code& ec) { self->OnReadable(listener, ec); });
}

void ServerCore::OnReadable(Listener* listener, const beast::error_code& ec) {
  if (ec || stopping) return;  // operation_aborted: Stop closed the acceptor
  // A bounded batch per wake-up, so that a flood of connections does not starve the others.
  for (int i = 0; i < 64; ++i) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    int fd = ::accept4(listener->acceptor.native_handle(), reinterpret_cast<sockaddr*>(&addr), &len,
                       SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      int error = errno;
      if (error == EAGAIN || error == EWOULDBLOCK) break;
      if (error == EINTR || error == ECONNABORTED || error == EPROTO) continue;
      // EMFILE, ENFILE, ENOBUFS, ENOMEM: out of resources. Wait instead of spinning.
      LogWarn(kLog, "accept failed", {{"listener", listener->name}, {"error", ErrnoName(error)}});
      listener->retry_timer.expires_after(std::chrono::milliseconds(100));
      listener->retry_timer.async_wait(
          [self = shared_from_this(), listener](const beast::error_code& timer_ec) {
            if (!timer_ec && !self->stopping) self->Accept(listener);
          });
      return;
    }
    NewConnection(UniqueFd(fd), addr, listener->is_unix);
  }
  Accept(listener);
}

void ServerCore::NewConnection(UniqueFd fd, const sockaddr_storage& addr, bool is_unix) {
  Peer peer;
  peer.is_unix = is_unix;
  if (is_unix) {
    // The admin socket is for root: its mode says so, and the peer's credentials must agree. With
    // an admin group (mode 0660), connect(2) has checked the peer's membership against the mode.
    ucred cred{};
    socklen_t cred_len = sizeof(cred);
    if (getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) != 0 ||
        (cred.uid != 0 && !unix_group_access)) {
      LogWarn(kLog, "admin socket: peer is not root; closed",
              {{"uid", std::to_string(cred.uid)}, {"pid", std::to_string(cred.pid)}});
      return;  // fd closes here
    }
    peer.name = "unix:pid=" + std::to_string(cred.pid) + ",uid=" + std::to_string(cred.uid);
  } else {
    int one = 1;
    setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // small frames go out at once
    peer.name = EndpointName(addr);
  }

  beast::error_code ec;
  Socket socket(io);
  socket.assign(Protocol(addr.ss_family == AF_UNSPEC ? AF_UNIX : addr.ss_family, is_unix ? 0 : IPPROTO_TCP),
                fd.get(), ec);
  if (ec) {
    LogWarn(kLog, "cannot take a new connection", {{"remote", peer.name}, {"error", ec.message()}});
    return;
  }
  fd.release();
  uint64_t id = next_id++;
  auto self = shared_from_this();
  if (connection_count.load() >= limits.max_connections) {
    LogWarn(kLog, "too many connections; refused", {{"remote", peer.name}});
    auto session =
        std::make_shared<HttpSession>(self, Stream(std::move(socket)), std::move(peer), id, nullptr);
    Register(id, session);
    session->Reject();
    return;
  }
  LogInfo(kLog, "connection opened", {{"connection", std::to_string(id)}, {"remote", peer.name}});
  auto session = std::make_shared<HttpSession>(self, Stream(std::move(socket)), std::move(peer), id,
                                               std::make_unique<ConnectionSlot>(self));
  Register(id, session);
  session->Start();
}

void ServerCore::DoStop() {
  if (!stopping) LogInfo(kLog, "stopping", {{"connections", std::to_string(connection_count.load())}});
  stopping = true;
  for (auto& listener : listeners) {
    beast::error_code ignored;
    listener->acceptor.close(ignored);
    listener->retry_timer.cancel();
  }
  if (!unix_path.empty()) {
    ::unlink(unix_path.c_str());
    unix_path.clear();
  }
  // Shutdown may end a session and so change the map: work on a copy.
  std::vector<std::shared_ptr<Session>> open;
  for (auto& [id, weak] : sessions) {
    if (auto session = weak.lock()) open.push_back(std::move(session));
  }
  for (auto& session : open) session->Shutdown();
}

}  // namespace internal

// --- public API -----------------------------------------------------------------------------

using internal::kLog;
namespace beast = internal::beast;
namespace net = internal::net;

class Server::Impl : public internal::ServerCore {
 public:
  using ServerCore::ServerCore;
};

Server::Server(net::io_context& io, ServerLimits limits, Authenticator authenticate, Metrics& metrics)
    : impl_(std::make_shared<Impl>(io, std::move(limits), std::move(authenticate), metrics)) {}

Server::~Server() { Stop(); }

void Server::Route(std::string method, std::string pattern, Auth auth, HttpHandler handler) {
  Route(std::move(method), std::move(pattern), auth, RouteOptions{}, std::move(handler));
}

void Server::Route(std::string method, std::string pattern, Auth auth, RouteOptions options, HttpHandler handler) {
  internal::RouteEntry route;
  route.method = std::move(method);
  if (pattern.empty() || pattern.front() != '/') pattern.insert(pattern.begin(), '/');
  for (std::string_view segment : SplitSegments(pattern)) route.segments.emplace_back(segment);
  route.auth = auth;
  route.max_body = options.max_body_bytes;
  route.handler = impl_->route_wrapper ? impl_->route_wrapper(route.method, pattern, auth, std::move(handler))
                                       : std::move(handler);
  impl_->routes.push_back(std::move(route));
}

void Server::SetRequestGate(RequestGate gate) { impl_->gate = std::move(gate); }

void Server::SetRouteWrapper(RouteWrapper wrapper) { impl_->route_wrapper = std::move(wrapper); }

void Server::SetWebSocketWrapper(WsHandlerWrapper wrapper) { impl_->ws_wrapper = std::move(wrapper); }

void Server::SetHopVerifier(HopVerifier verifier) { impl_->hop_verifier = std::move(verifier); }

void Server::SetConnectionTaker(std::shared_ptr<internal::ConnectionTaker> taker) {
  impl_->connection_taker = std::move(taker);
}

void Server::SetAllowedOrigins(std::vector<std::string> origins) { impl_->allowed_origins = std::move(origins); }

void Server::WebSocket(std::string path, std::shared_ptr<WsHandler> handler) {
  impl_->ws_path = std::move(path);
  impl_->ws_handler = impl_->ws_wrapper ? impl_->ws_wrapper(std::move(handler)) : std::move(handler);
}

Status Server::ListenTcp(const std::string& address, uint16_t port) {
  try {
    beast::error_code ec;
    net::ip::address ip = net::ip::make_address(address, ec);
    if (ec) return Status::Error("listen: not an IP address: '" + address + "'");
    net::ip::tcp::endpoint endpoint(ip, port);
    std::string name = (ip.is_v6() ? "[" + address + "]" : address) + ":" + std::to_string(port);
    return impl_->Listen(false, endpoint.data(), static_cast<socklen_t>(endpoint.size()), name, 0);
  } catch (const std::exception& e) {
    return Status::Error(std::string("listen: ") + e.what());
  }
}

Status Server::ListenUnix(const std::string& path, int mode, gid_t group) {
  try {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
      return Status::Error("admin socket path empty or too long: " + path);
    }
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    // A socket left by a previous run is replaced; one that a live server answers is not.
    struct stat st;
    if (lstat(path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) return Status::Error(path + " exists and is not a socket");
      UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (!probe) return ErrnoError("socket");
      if (::connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
        return Status::Error(path + " is in use by a running server");
      }
      if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoError("unlink stale " + path);
    }
    RETURN_IF_ERROR(impl_->Listen(true, reinterpret_cast<sockaddr*>(&addr), sizeof(addr), path, mode, group));
    impl_->unix_path = path;
    impl_->unix_group_access = group != static_cast<gid_t>(-1);
    return Status();
  } catch (const std::exception& e) {
    return Status::Error(std::string("listen: ") + e.what());
  }
}

uint16_t Server::tcp_port() const { return impl_->tcp_port; }

void Server::Stop() {
  try {
    // From the io_context's thread (or when nothing runs it) at once; from another thread posted,
    // since every connection belongs to that thread.
    if (impl_->io.get_executor().running_in_this_thread() || impl_->io.stopped()) {
      impl_->DoStop();
    } else {
      net::post(impl_->io, [impl = impl_] { impl->DoStop(); });
    }
  } catch (const std::exception& e) {
    LogError(kLog, "stop failed", {{"error", e.what()}});
  }
}

void Server::Reauthenticate(std::function<bool(const AuthContext&)> which) {
  try {
    if (impl_->io.get_executor().running_in_this_thread() || impl_->io.stopped()) {
      impl_->DoReauthenticate(which);
    } else {
      net::post(impl_->io, [impl = impl_, which = std::move(which)] { impl->DoReauthenticate(which); });
    }
  } catch (const std::exception& e) {
    LogError(kLog, "reauthenticate failed", {{"error", e.what()}});
  }
}

size_t Server::connection_count() const { return impl_->connection_count.load(); }

}  // namespace corral::api
