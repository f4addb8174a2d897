// The only translation unit that includes Beast: it is slow to compile.
//
// Threading: everything here runs on the io_context's thread (the header requires one thread),
// which makes that thread each connection's strand; the only entry points from other threads
// are Server::Stop (posted) and a Responder (dispatched). Nothing throws out of a completion
// handler: Beast and Asio are called with their error_code overloads, and the application's
// callbacks (authenticator, handlers) are called inside try/catch.
#include "api/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cstring>
#include <deque>
#include <optional>
#include <random>
#include <unordered_map>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include "common/log.h"
#include "common/unique_fd.h"

namespace corral::api {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace net = boost::asio;

namespace {

// TCP and unix connections share one stream type: the generic protocol holds either.
using Protocol = net::generic::stream_protocol;
using Socket = Protocol::socket;
using Stream = beast::basic_stream<Protocol>;
using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

constexpr char kLog[] = "api";
constexpr char kSubprotocol[] = "corral.v1";
constexpr char kBearerSubprotocolPrefix[] = "bearer.";
// How long a connection that we close after an error reply may keep sending (its request body)
// before we close it hard; reading it first lets the client see the reply instead of a reset.
constexpr std::chrono::seconds kLingerTime{2};
constexpr size_t kLingerMaxBytes = 4 << 20;

// --- small helpers -------------------------------------------------------------------------

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Boost 1.74's beast::string_view is boost::string_view, not std::string_view.
std::string_view SV(beast::string_view s) { return std::string_view(s.data(), s.size()); }

bool IEquals(std::string_view a, std::string_view b) {
  return beast::iequals(beast::string_view(a.data(), a.size()), beast::string_view(b.data(), b.size()));
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// nullopt for a malformed escape ("%zz", a trailing "%").
std::optional<std::string> PercentDecode(std::string_view in, bool plus_is_space) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return std::nullopt;
      int hi = HexValue(in[i + 1]);
      int lo = HexValue(in[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

// "/a/b" -> {"a", "b"}; "/" -> {""}. `path` starts with '/'.
std::vector<std::string_view> SplitSegments(std::string_view path) {
  std::vector<std::string_view> out;
  path.remove_prefix(1);
  size_t start = 0;
  for (;;) {
    size_t slash = path.find('/', start);
    out.push_back(
        path.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return out;
}

// Percent-decoded segments; nullopt for a malformed escape or a NUL byte.
std::optional<std::vector<std::string>> DecodeSegments(std::string_view raw_path) {
  std::vector<std::string> out;
  for (std::string_view raw : SplitSegments(raw_path)) {
    auto decoded = PercentDecode(raw, /*plus_is_space=*/false);
    if (!decoded || decoded->find('\0') != std::string::npos) return std::nullopt;
    out.push_back(std::move(*decoded));
  }
  return out;
}

// "a=1&b=x%20y&c" -> {a: "1", b: "x y", c: ""}; the first of repeated keys wins.
std::optional<std::map<std::string, std::string>> ParseQuery(std::string_view query) {
  std::map<std::string, std::string> out;
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    size_t eq = pair.find('=');
    auto key = PercentDecode(pair.substr(0, eq), true);
    auto value = PercentDecode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1), true);
    if (!key || !value) return std::nullopt;
    out.emplace(std::move(*key), std::move(*value));
  }
  return out;
}

// The token of "Authorization: Bearer <token>", or "".
std::string BearerToken(const Request& req) {
  auto it = req.find(http::field::authorization);
  if (it == req.end()) return "";
  std::string_view value = Trim(SV(it->value()));
  constexpr std::string_view kScheme = "bearer ";
  if (value.size() <= kScheme.size() || !IEquals(value.substr(0, kScheme.size()), kScheme)) return "";
  return std::string(Trim(value.substr(kScheme.size())));
}

// A random id for X-Request-Id: 16 hex digits. Not a secret; unique in practice.
std::string NewRequestId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[17];
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

bool IsSafeHeaderText(std::string_view s) { return s.find_first_of("\r\n", 0) == std::string_view::npos; }

// RFC 6455 7.4: codes an endpoint may send. Others become 1011 (internal error).
uint16_t SendableCloseCode(uint16_t code) {
  bool ok =
      (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) || (code >= 3000 && code <= 4999);
  return ok ? code : 1011;
}

// A close reason holds at most 123 bytes; cut at a UTF-8 character boundary.
std::string TruncateReason(std::string reason) {
  if (reason.size() <= 123) return reason;
  size_t n = 123;
  while (n > 0 && (static_cast<unsigned char>(reason[n]) & 0xC0) == 0x80) --n;
  reason.resize(n);
  return reason;
}

std::string EndpointName(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "unix";
}

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

// --- the server's shared state --------------------------------------------------------------

struct Peer {
  bool is_unix = false;
  std::string name;  // "127.0.0.1:53122" or "unix:pid=123,uid=0"
};

struct RouteEntry {
  std::string method;
  std::vector<std::string> segments;  // "{name}" captures one segment
  Auth auth;
  HttpHandler handler;
};

struct RouteMatch {
  const RouteEntry* route = nullptr;
  std::map<std::string, std::string> params;
  std::vector<std::string> methods;  // every method registered for the path
};

// What Server::Stop reaches: every open connection.
class Session {
 public:
  virtual ~Session() = default;
  virtual void Shutdown() = 0;
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
             Metrics& metrics)
      : io(io_context), limits(std::move(server_limits)), allowed_origins(limits.allowed_origins),
        authenticate_(std::move(authenticate)) {
    http_requests = &metrics.AddCounterFamily("corral_http_requests_total",
                                              "HTTP requests answered, by status code", {"code"});
    http_duration = &metrics.AddHistogram(
        "corral_http_request_duration_seconds", "Time from a request's arrival to its response being written",
        {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10});
    auth_failures = &metrics.AddCounter("corral_auth_failures_total",
                                        "Requests refused because their token was missing or did not verify");
    connections = &metrics.AddGauge("corral_connections", "Open connections (TCP and admin socket)");
    ws_connections = &metrics.AddGauge("corral_websocket_connections", "Open WebSocket connections");
    auto& messages = metrics.AddCounterFamily("corral_websocket_messages_total",
                                              "WebSocket messages, by direction", {"direction"});
    auto& bytes = metrics.AddCounterFamily("corral_websocket_bytes_total",
                                           "WebSocket message payload bytes, by direction", {"direction"});
    ws_messages_in = &messages.WithLabels({"in"});
    ws_messages_out = &messages.WithLabels({"out"});
    ws_bytes_in = &bytes.WithLabels({"in"});
    ws_bytes_out = &bytes.WithLabels({"out"});
  }

  Status Listen(bool is_unix, const sockaddr* addr, socklen_t len, const std::string& name, int unix_mode,
                gid_t unix_group = static_cast<gid_t>(-1));
  void Accept(Listener* listener);
  void OnReadable(Listener* listener, const beast::error_code& ec);
  void NewConnection(UniqueFd fd, const sockaddr_storage& addr, bool is_unix);
  void DoStop();

  RouteMatch FindRoute(std::string_view method, const std::vector<std::string>& segments, bool is_unix) const;
  bool OriginAllowed(std::string_view origin) const {
    return std::find(allowed_origins.begin(), allowed_origins.end(), origin) != allowed_origins.end();
  }
  // Verifies a token; on failure counts and logs the reason (never the token).
  StatusOr<AuthContext> Authenticate(const std::string& token, const Peer& peer,
                                     const std::string& request_id);

  void Register(uint64_t id, std::weak_ptr<Session> session) { sessions[id] = std::move(session); }
  // Called from a session's destructor: the entry is removed unless another session (the
  // WebSocket that took over an HTTP connection) has registered under the same id.
  void Unregister(uint64_t id) {
    auto it = sessions.find(id);
    if (it != sessions.end() && it->second.expired()) sessions.erase(it);
  }

  net::io_context& io;
  const ServerLimits limits;
  std::vector<std::string> allowed_origins;  // limits.allowed_origins, then what a reload set
  std::vector<RouteEntry> routes;
  std::string ws_path;
  std::shared_ptr<WsHandler> ws_handler;
  RequestGate gate;
  std::vector<std::unique_ptr<Listener>> listeners;
  std::string unix_path;  // removed at Stop
  bool unix_group_access = false;  // the admin socket is 0660 for a group: its members may connect
  uint16_t tcp_port = 0;
  bool stopping = false;
  uint64_t next_id = 1;
  std::atomic<size_t> connection_count{0};
  std::unordered_map<uint64_t, std::weak_ptr<Session>> sessions;
  std::unordered_map<std::string, size_t> ws_per_user;

  Family<Counter>* http_requests;
  Histogram* http_duration;
  Counter* auth_failures;
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

RouteMatch ServerCore::FindRoute(std::string_view method, const std::vector<std::string>& segments,
                                 bool is_unix) const {
  RouteMatch best;
  int best_score = -1;
  for (const RouteEntry& route : routes) {
    if (route.auth == Auth::kAdminOnly && !is_unix) continue;  // invisible on TCP
    if (route.segments.size() != segments.size()) continue;
    std::map<std::string, std::string> params;
    int literal = 0;
    bool match = true;
    for (size_t i = 0; i < segments.size() && match; ++i) {
      const std::string& pattern = route.segments[i];
      if (pattern.size() >= 2 && pattern.front() == '{' && pattern.back() == '}') {
        params[pattern.substr(1, pattern.size() - 2)] = segments[i];
      } else if (pattern == segments[i]) {
        ++literal;
      } else {
        match = false;
      }
    }
    if (!match) continue;
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

StatusOr<AuthContext> ServerCore::Authenticate(const std::string& token, const Peer& peer,
                                               const std::string& request_id) {
  Status failure;
  if (token.empty()) {
    failure = Status::Error("no token");
  } else {
    try {
      StatusOr<AuthContext> result = authenticate_ ? authenticate_(token) : Status::Error("no authenticator");
      if (result.ok()) {
        result->admin = false;  // never on TCP
        return result;
      }
      failure = result.status();
    } catch (const std::exception& e) {
      failure = Status::Error(std::string("authenticator threw: ") + e.what());
    }
  }
  auth_failures->Increment();
  LogWarn(kLog, "authentication failed",
          {{"reason", failure.message()}, {"remote", peer.name}, {"request_id", request_id}});
  return failure;
}

// --- WebSocket session ----------------------------------------------------------------------

class WsSession : public Session, public WsConnection, public std::enable_shared_from_this<WsSession> {
 public:
  WsSession(std::shared_ptr<ServerCore> core, Stream stream, Peer peer, uint64_t id,
            std::unique_ptr<ConnectionSlot> slot, std::unique_ptr<UserSlot> user_slot, AuthContext auth)
      : core_(std::move(core)),
        ws_(std::move(stream)),
        peer_(std::move(peer)),
        id_(id),
        slot_(std::move(slot)),
        user_slot_(std::move(user_slot)),
        auth_(std::move(auth)),
        abort_timer_(core_->io) {}

  ~WsSession() override { core_->Unregister(id_); }

  void Start(Request request, bool select_subprotocol, const std::string& request_id);

  uint64_t id() const override { return id_; }
  const AuthContext& auth() const override { return auth_; }
  void SendText(std::string message) override { Enqueue(true, std::move(message)); }
  void SendBinary(std::string message) override { Enqueue(false, std::move(message)); }
  size_t queued_bytes() const override { return queued_bytes_; }
  bool full() const override { return queued_bytes_ > core_->limits.ws_queue_high_water; }
  void SetOnDrain(std::function<void()> on_drain) override { on_drain_ = std::move(on_drain); }
  void PauseReading() override { read_paused_ = true; }
  void ResumeReading() override;
  void Close(uint16_t code, std::string reason) override;
  bool closed() const override { return finished_ || close_requested_; }

  void Shutdown() override;

 private:
  void OnAccept(const beast::error_code& ec);
  void DoRead();
  void OnRead(const beast::error_code& ec);
  void Enqueue(bool text, std::string payload);
  void DoWrite();
  void OnWrite(const beast::error_code& ec);
  void DoClose();
  // Drops what is queued but not yet being written.
  void DropQueue();
  // Closes the socket: every pending operation completes with an error, the read last.
  void Abort();
  // Bounds a close that cannot complete (a client that reads nothing): Abort after the
  // handshake timeout.
  void ArmAbortTimer();
  // The end of the connection, once: releases the limits' slots and calls OnClose.
  void Finish(const beast::error_code& ec);

  struct Outgoing {
    bool text;
    std::string payload;
  };

  std::shared_ptr<ServerCore> core_;
  websocket::stream<Stream> ws_;
  Peer peer_;
  uint64_t id_;
  std::unique_ptr<ConnectionSlot> slot_;
  std::unique_ptr<UserSlot> user_slot_;
  AuthContext auth_;
  std::optional<Request> upgrade_request_;
  beast::flat_buffer read_buffer_;
  std::deque<Outgoing> queue_;  // front() is being written while writing_
  size_t queued_bytes_ = 0;
  bool writing_ = false;
  bool above_high_water_ = false;
  bool opened_ = false;
  bool close_requested_ = false;
  bool close_started_ = false;
  bool finished_ = false;
  bool read_paused_ = false;  // PauseReading: no read is started
  bool read_parked_ = false;  // a read is owed once reading resumes
  // While parked no operation holds the session: it holds itself (until it reads again).
  std::shared_ptr<WsSession> parked_self_;
  websocket::close_reason close_reason_;
  std::function<void()> on_drain_;
  net::steady_timer abort_timer_;
};

void WsSession::Start(Request request, bool select_subprotocol, const std::string& request_id) {
  auto timeout = websocket::stream_base::timeout::suggested(beast::role_type::server);
  timeout.handshake_timeout = core_->limits.handshake_timeout;
  timeout.idle_timeout = core_->limits.idle_timeout;
  timeout.keep_alive_pings = true;
  ws_.set_option(timeout);
  ws_.read_message_max(core_->limits.max_ws_message_bytes);
  // One frame per message, written in one go: Beast's default splits every message into 4 KiB
  // fragments, each its own socket write and trip through the event loop.
  ws_.auto_fragment(false);
  ws_.set_option(
      websocket::stream_base::decorator([select_subprotocol, request_id](websocket::response_type& res) {
        res.set(http::field::server, "corrald");
        res.set("X-Request-Id", request_id);
        // Only corral.v1 is ever echoed: a `bearer.<jwt>` entry must not come back in a header.
        if (select_subprotocol) res.set(http::field::sec_websocket_protocol, kSubprotocol);
      }));
  upgrade_request_ = std::move(request);
  ws_.async_accept(*upgrade_request_,
                   [self = shared_from_this()](const beast::error_code& ec) { self->OnAccept(ec); });
}

void WsSession::OnAccept(const beast::error_code& ec) {
  upgrade_request_.reset();
  if (ec) {
    LogInfo(kLog, "websocket handshake failed",
            {{"connection", std::to_string(id_)}, {"remote", peer_.name}, {"error", ec.message()}});
    Finish(ec);
    return;
  }
  opened_ = true;
  core_->ws_connections->Add(1);
  core_->http_requests->WithLabels({"101"}).Increment();
  LogInfo(kLog, "websocket opened",
          {{"connection", std::to_string(id_)},
           {"remote", peer_.name},
           {"iss", auth_.iss},
           {"sub", auth_.sub},
           {"admin", auth_.admin ? "true" : "false"}});
  auto self = shared_from_this();
  CallSafely("WsHandler::OnOpen", [&] { core_->ws_handler->OnOpen(self); });
  if (!finished_) DoRead();
}

void WsSession::DoRead() {
  ws_.async_read(read_buffer_,
                 [self = shared_from_this()](const beast::error_code& ec, size_t) { self->OnRead(ec); });
}

void WsSession::OnRead(const beast::error_code& ec) {
  if (ec) {
    Finish(ec);
    return;
  }
  bool text = ws_.got_text();
  std::string message = beast::buffers_to_string(read_buffer_.data());
  read_buffer_.consume(read_buffer_.size());
  core_->ws_messages_in->Increment();
  core_->ws_bytes_in->Increment(message.size());
  auto self = shared_from_this();
  if (text) {
    CallSafely("WsHandler::OnText", [&] { core_->ws_handler->OnText(self, std::move(message)); });
  } else {
    CallSafely("WsHandler::OnBinary", [&] { core_->ws_handler->OnBinary(self, std::move(message)); });
  }
  if (finished_) return;
  if (read_paused_ && !close_requested_) {
    read_parked_ = true;
    parked_self_ = shared_from_this();
  } else {
    DoRead();
  }
}

void WsSession::ResumeReading() {
  read_paused_ = false;
  if (read_parked_ && !finished_) {
    read_parked_ = false;
    auto self = std::move(parked_self_);
    DoRead();
  }
}

void WsSession::Enqueue(bool text, std::string payload) {
  if (!opened_ || finished_ || close_requested_) return;
  queued_bytes_ += payload.size();
  queue_.push_back(Outgoing{text, std::move(payload)});
  if (queued_bytes_ > core_->limits.ws_queue_hard_limit) {
    LogWarn(kLog, "websocket client too slow; closing",
            {{"connection", std::to_string(id_)},
             {"remote", peer_.name},
             {"queued_bytes", std::to_string(queued_bytes_)}});
    DropQueue();
    Close(static_cast<uint16_t>(websocket::close_code::policy_error), "too slow");
    ArmAbortTimer();
    return;
  }
  if (queued_bytes_ > core_->limits.ws_queue_high_water) above_high_water_ = true;
  if (!writing_) DoWrite();
}

void WsSession::DoWrite() {
  writing_ = true;
  const Outgoing& next = queue_.front();
  ws_.text(next.text);
  ws_.async_write(net::buffer(next.payload),
                  [self = shared_from_this()](const beast::error_code& ec, size_t) { self->OnWrite(ec); });
}

void WsSession::OnWrite(const beast::error_code& ec) {
  writing_ = false;
  if (ec) {
    Abort();
    return;
  }
  core_->ws_messages_out->Increment();
  core_->ws_bytes_out->Increment(queue_.front().payload.size());
  queued_bytes_ -= queue_.front().payload.size();
  queue_.pop_front();
  if (above_high_water_ && queued_bytes_ <= core_->limits.ws_queue_high_water) {
    above_high_water_ = false;
    if (on_drain_ && !finished_ && !close_requested_) {
      auto on_drain = on_drain_;  // the callback may replace itself
      CallSafely("WsConnection drain callback", on_drain);
    }
  }
  if (writing_ || finished_) return;  // the drain callback's send started the next write
  if (!queue_.empty()) {
    DoWrite();
  } else if (close_requested_ && !close_started_) {
    DoClose();
  }
}

void WsSession::Close(uint16_t code, std::string reason) {
  if (!opened_ || finished_ || close_requested_) return;
  close_requested_ = true;
  close_reason_ = websocket::close_reason(static_cast<websocket::close_code>(SendableCloseCode(code)),
                                          TruncateReason(std::move(reason)));
  // The close handshake ends in the read (Beast completes it with the peer's close frame).
  ResumeReading();
  if (!writing_ && queue_.empty()) DoClose();
}

void WsSession::DoClose() {
  close_started_ = true;
  ws_.async_close(close_reason_, [self = shared_from_this()](const beast::error_code& ec) {
    // The read, which Beast completes once the close handshake is over, calls Finish.
    if (ec && !self->finished_) self->Abort();
  });
}

void WsSession::DropQueue() {
  while (queue_.size() > (writing_ ? 1u : 0u)) queue_.pop_back();
  queued_bytes_ = queue_.empty() ? 0 : queue_.front().payload.size();
  above_high_water_ = false;
}

void WsSession::Abort() {
  beast::error_code ignored;
  beast::get_lowest_layer(ws_).socket().shutdown(net::socket_base::shutdown_both, ignored);
  beast::get_lowest_layer(ws_).close();
  // A parked read is owed: it fails at once on the closed socket, and Finish runs.
  ResumeReading();
}

void WsSession::ArmAbortTimer() {
  abort_timer_.expires_after(core_->limits.handshake_timeout);
  abort_timer_.async_wait([self = shared_from_this()](const beast::error_code& ec) {
    if (!ec && !self->finished_) {
      LogInfo(kLog, "websocket close timed out", {{"connection", std::to_string(self->id_)}});
      self->Abort();
    }
  });
}

void WsSession::Shutdown() {
  if (finished_) return;
  if (!opened_) {
    Abort();
    return;
  }
  DropQueue();
  Close(static_cast<uint16_t>(websocket::close_code::going_away), "going away");
  ArmAbortTimer();
}

void WsSession::Finish(const beast::error_code& ec) {
  if (finished_) return;
  finished_ = true;
  abort_timer_.cancel();
  read_parked_ = false;
  auto parked = std::move(parked_self_);
  // Beast's own timer would otherwise stay armed (up to the idle timeout) after an error,
  // holding the io_context, for as long as a handler keeps this connection alive.
  ws_.set_option(
      websocket::stream_base::timeout{websocket::stream_base::none(), websocket::stream_base::none(), false});
  Abort();
  queue_.clear();
  queued_bytes_ = 0;
  user_slot_.reset();
  if (opened_) {
    core_->ws_connections->Add(-1);
    const auto& reason = ws_.reason();
    LogInfo(kLog, "websocket closed",
            {{"connection", std::to_string(id_)},
             {"remote", peer_.name},
             {"peer_close_code", std::to_string(reason.code)},
             {"error", ec == websocket::error::closed ? "" : ec.message()}});
    auto self = shared_from_this();
    CallSafely("WsHandler::OnClose", [&] { core_->ws_handler->OnClose(self); });
  }
  on_drain_ = nullptr;  // it may hold a reference to this connection
  slot_.reset();
}

// --- HTTP session ---------------------------------------------------------------------------

class HttpSession : public Session, public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(std::shared_ptr<ServerCore> core, Stream stream, Peer peer, uint64_t id,
              std::unique_ptr<ConnectionSlot> slot)
      : core_(std::move(core)),
        stream_(std::move(stream)),
        peer_(std::move(peer)),
        id_(id),
        slot_(std::move(slot)) {}

  ~HttpSession() override {
    if (!upgraded_ && slot_) {
      LogInfo(kLog, "connection closed", {{"connection", std::to_string(id_)}, {"remote", peer_.name}});
    }
    core_->Unregister(id_);
  }

  void Start() { DoReadHeader(); }
  // Over the connection limit: 503 at once, then close.
  void Reject() {
    request_id_ = NewRequestId();
    request_start_ = std::chrono::steady_clock::now();
    Send(ErrorResponse(503, "unavailable", "too many connections"), /*close=*/true);
  }
  void Shutdown() override {
    if (!upgraded_) CloseSocket();
  }
  // The handler's answer (on the io_context thread).
  void Respond(HttpResponse response) {
    if (!awaiting_response_) return;
    awaiting_response_ = false;
    if (closed_) return;
    Send(std::move(response), /*close=*/false);
  }

  static HttpResponse ErrorResponse(int status, std::string_view code, std::string_view message) {
    HttpResponse r;
    r.status = status;
    r.body = ErrorBody(code, message);
    return r;
  }

 private:
  void DoReadHeader();
  void OnReadHeader(const beast::error_code& ec);
  void DoReadBody();
  void OnReadBody(const beast::error_code& ec);
  void OnReadError(const beast::error_code& ec);
  void Handle();
  void HandlePreflight(const Request& req, const RouteMatch& match);
  void HandleUpgrade(Request req, const std::map<std::string, std::string>& query);
  void Send(HttpResponse response, bool close);
  void OnWrite(const beast::error_code& ec, bool close);
  void LingeringClose();
  void DoDrain();
  void CloseSocket();

  std::shared_ptr<ServerCore> core_;
  Stream stream_;
  Peer peer_;
  uint64_t id_;
  std::unique_ptr<ConnectionSlot> slot_;  // null for a rejected connection
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::unique_ptr<Response> response_;
  std::array<char, 4096> drain_buffer_;
  size_t drained_bytes_ = 0;
  bool first_request_ = true;
  bool keep_alive_ = false;
  bool awaiting_response_ = false;
  bool upgraded_ = false;
  bool closed_ = false;
  std::string request_id_;
  std::string cors_origin_;  // an allowed Origin, echoed in Access-Control-Allow-Origin
  std::chrono::steady_clock::time_point request_start_;
};

// The Responder's shared state: answers 500 if every copy is dropped unanswered.
struct ResponderState {
  std::shared_ptr<HttpSession> session;
  net::any_io_executor executor;
  std::atomic<bool> done{false};

  void Respond(HttpResponse response) {
    if (done.exchange(true)) {
      LogWarn(kLog, "responder called twice; ignored");
      return;
    }
    auto s = std::move(session);
    net::dispatch(executor,
                  [s, response = std::move(response)]() mutable { s->Respond(std::move(response)); });
  }

  ~ResponderState() {
    if (done.load() || !session) return;
    try {
      LogError(kLog, "handler dropped its responder without answering");
      auto s = std::move(session);
      // Posted, never run inline: this may run on another thread, or inside the handler.
      net::post(executor, [s] {
        s->Respond(HttpSession::ErrorResponse(500, "internal", "the handler did not answer"));
      });
    } catch (...) {
      // Out of memory while posting: the connection is closed when its session is released.
    }
  }
};

void HttpSession::DoReadHeader() {
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(std::min<size_t>(core_->limits.max_header_bytes, UINT32_MAX)));
  parser_->body_limit(core_->limits.max_body_bytes);
  stream_.expires_after(first_request_ ? core_->limits.handshake_timeout : core_->limits.idle_timeout);
  http::async_read_header(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](const beast::error_code& ec, size_t) { self->OnReadHeader(ec); });
}

void HttpSession::OnReadHeader(const beast::error_code& ec) {
  request_start_ = std::chrono::steady_clock::now();
  request_id_ = NewRequestId();
  if (ec) return OnReadError(ec);
  auto expect = parser_->get().find(http::field::expect);
  if (expect != parser_->get().end() && IEquals(SV(expect->value()), "100-continue") && !parser_->is_done()) {
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    stream_.expires_after(core_->limits.idle_timeout);
    net::async_write(stream_, net::buffer(kContinue.data(), kContinue.size()),
                     [self = shared_from_this()](const beast::error_code& write_ec, size_t) {
                       if (write_ec) return self->CloseSocket();
                       self->DoReadBody();
                     });
    return;
  }
  DoReadBody();
}

void HttpSession::DoReadBody() {
  if (parser_->is_done()) return Handle();
  stream_.expires_after(core_->limits.idle_timeout);
  http::async_read(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](const beast::error_code& ec, size_t) { self->OnReadBody(ec); });
}

void HttpSession::OnReadBody(const beast::error_code& ec) {
  if (ec) return OnReadError(ec);
  Handle();
}

void HttpSession::OnReadError(const beast::error_code& ec) {
  if (closed_ || ec == net::error::operation_aborted) return CloseSocket();
  keep_alive_ = false;
  if (ec == http::error::header_limit) {
    LogInfo(kLog, "request header too large", {{"connection", std::to_string(id_)}, {"remote", peer_.name}});
    return Send(ErrorResponse(431, "bad_request", "request header too large"), true);
  }
  if (ec == http::error::body_limit) {
    LogInfo(kLog, "request body too large", {{"connection", std::to_string(id_)}, {"remote", peer_.name}});
    return Send(ErrorResponse(413, "payload_too_large", "request body too large"), true);
  }
  if (ec.category() == beast::error_code(http::error::end_of_stream).category() &&
      ec != http::error::end_of_stream && ec != http::error::partial_message) {
    LogInfo(kLog, "malformed request",
            {{"connection", std::to_string(id_)}, {"remote", peer_.name}, {"error", ec.message()}});
    return Send(ErrorResponse(400, "bad_request", "malformed request"), true);
  }
  // The client closed, went silent (timeout) or the connection broke: nobody to answer.
  if (ec != http::error::end_of_stream) {
    LogDebug(kLog, "connection read ended",
             {{"connection", std::to_string(id_)}, {"remote", peer_.name}, {"error", ec.message()}});
  }
  CloseSocket();
}

// A browser page that corrald served itself (the web page) calls it from its own origin: the
// Origin it sends is this request's Host with a scheme. Tokens are bearer tokens, never cookies,
// so a page of another origin (even one whose name resolves here, DNS rebinding) holds no
// credential of a user's: allowing the same origin exposes nothing that needs a token.
bool SameOrigin(std::string_view origin, std::string_view host) {
  if (host.empty()) return false;
  for (std::string_view scheme : {"http://", "https://"}) {
    if (origin.size() == scheme.size() + host.size() && origin.substr(0, scheme.size()) == scheme &&
        origin.substr(scheme.size()) == host) {
      return true;
    }
  }
  return false;
}

void HttpSession::Handle() {
  Request req = parser_->release();
  keep_alive_ = req.keep_alive();
  cors_origin_.clear();

  auto origin = req.find(http::field::origin);
  if (origin != req.end()) {
    auto host = req.find(http::field::host);
    const bool same_origin = host != req.end() && SameOrigin(SV(origin->value()), SV(host->value()));
    if (!same_origin && !core_->OriginAllowed(SV(origin->value()))) {
      LogWarn(
          kLog, "origin not allowed",
          {{"origin", std::string(origin->value())}, {"remote", peer_.name}, {"request_id", request_id_}});
      return Send(ErrorResponse(403, "forbidden", "origin not allowed"), false);
    }
    cors_origin_ = std::string(origin->value());
  }

  std::string_view target = SV(req.target());
  size_t question = target.find('?');
  std::string_view raw_path = target.substr(0, question);
  std::string_view raw_query =
      question == std::string_view::npos ? std::string_view() : target.substr(question + 1);
  if (raw_path.empty() || raw_path.front() != '/') {
    return Send(ErrorResponse(400, "bad_request", "the request target must be a path"), false);
  }
  auto segments = DecodeSegments(raw_path);
  auto path = PercentDecode(raw_path, false);
  auto query = ParseQuery(raw_query);
  if (!segments || !path || !query) {
    return Send(ErrorResponse(400, "bad_request", "malformed percent-encoding"), false);
  }

  if (core_->ws_handler && *path == core_->ws_path && websocket::is_upgrade(req)) {
    return HandleUpgrade(std::move(req), *query);
  }

  std::string method(req.method_string());
  bool preflight = req.method() == http::verb::options && origin != req.end() &&
                   req.find(http::field::access_control_request_method) != req.end();
  RouteMatch match = core_->FindRoute(method, *segments, peer_.is_unix);
  if (match.methods.empty()) return Send(ErrorResponse(404, "not_found", "no such endpoint"), false);
  if (preflight) return HandlePreflight(req, match);
  if (match.route == nullptr) {
    HttpResponse r = ErrorResponse(405, "bad_request", "method not allowed");
    std::string allow;
    for (const auto& m : match.methods) allow += (allow.empty() ? "" : ", ") + m;
    r.headers.emplace_back("Allow", allow);
    return Send(std::move(r), false);
  }

  HttpRequest request;
  if (peer_.is_unix) {
    request.auth.admin = true;
  } else if (match.route->auth == Auth::kRequired) {
    auto auth = core_->Authenticate(BearerToken(req), peer_, request_id_);
    if (!auth.ok()) {
      HttpResponse r = ErrorResponse(401, "unauthorized", "unauthorized");
      r.headers.emplace_back("WWW-Authenticate", "Bearer");
      return Send(std::move(r), false);
    }
    request.auth = std::move(*auth);
    if (core_->gate) {
      if (std::optional<HttpResponse> refused = core_->gate(request.auth)) return Send(std::move(*refused), false);
    }
  }

  request.method = std::move(method);
  request.target = std::string(target);
  request.path = std::move(*path);
  request.query = std::move(*query);
  request.params = std::move(match.params);
  for (const auto& field : req) {
    std::string name = ToLower(SV(field.name_string()));
    auto [it, inserted] = request.headers.emplace(name, std::string(field.value()));
    if (!inserted) it->second += ", " + std::string(field.value());
  }
  request.body = std::move(req.body());
  request.request_id = request_id_;

  LogDebug(kLog, "request",
           {{"method", request.method}, {"path", request.path}, {"request_id", request_id_}});
  awaiting_response_ = true;
  auto state = std::make_shared<ResponderState>();
  state->session = shared_from_this();
  state->executor = core_->io.get_executor();
  Responder respond = [state](HttpResponse response) { state->Respond(std::move(response)); };
  state.reset();
  const HttpHandler& handler = match.route->handler;
  CallSafely("HttpHandler", [&] { handler(std::move(request), std::move(respond)); });
}

void HttpSession::HandlePreflight(const Request& req, const RouteMatch& match) {
  HttpResponse r;
  r.status = 204;
  r.content_type.clear();
  std::string methods;
  for (const auto& m : match.methods) methods += (methods.empty() ? "" : ", ") + m;
  r.headers.emplace_back("Access-Control-Allow-Methods", methods);
  r.headers.emplace_back("Access-Control-Allow-Headers", "Authorization, Content-Type");
  r.headers.emplace_back("Access-Control-Max-Age", "600");
  (void)req;
  Send(std::move(r), false);
}

void HttpSession::HandleUpgrade(Request req, const std::map<std::string, std::string>& query) {
  if (core_->stopping) {
    keep_alive_ = false;
    return Send(ErrorResponse(503, "unavailable", "the server is stopping"), true);
  }
  // Subprotocols: select corral.v1 when offered; a bearer.<jwt> entry carries the token.
  bool offered_v1 = false;
  std::string subprotocol_token;
  auto [offers_begin, offers_end] = req.equal_range(http::field::sec_websocket_protocol);
  for (auto it = offers_begin; it != offers_end; ++it) {
    std::string_view list = SV(it->value());
    while (!list.empty()) {
      size_t comma = list.find(',');
      std::string_view entry = Trim(list.substr(0, comma));
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
      if (entry == kSubprotocol) {
        offered_v1 = true;
      } else if (entry.substr(0, std::strlen(kBearerSubprotocolPrefix)) == kBearerSubprotocolPrefix) {
        subprotocol_token = std::string(entry.substr(std::strlen(kBearerSubprotocolPrefix)));
      }
    }
  }

  AuthContext auth;
  if (peer_.is_unix) {
    auth.admin = true;
  } else {
    std::string token = BearerToken(req);
    if (token.empty()) token = subprotocol_token;
    if (token.empty()) {
      auto it = query.find("token");
      if (it != query.end()) token = it->second;
    }
    auto result = core_->Authenticate(token, peer_, request_id_);
    if (!result.ok()) {
      keep_alive_ = false;
      HttpResponse r = ErrorResponse(401, "unauthorized", "unauthorized");
      r.headers.emplace_back("WWW-Authenticate", "Bearer");
      return Send(std::move(r), true);
    }
    auth = std::move(*result);
    if (core_->gate) {
      if (std::optional<HttpResponse> refused = core_->gate(auth)) {
        keep_alive_ = false;
        return Send(std::move(*refused), true);
      }
    }
  }

  std::unique_ptr<UserSlot> user_slot;
  if (!auth.admin) {
    std::string key = auth.UserKey();
    auto it = core_->ws_per_user.find(key);
    if (it != core_->ws_per_user.end() && it->second >= core_->limits.max_ws_connections_per_user) {
      LogWarn(kLog, "too many websocket connections for user",
              {{"iss", auth.iss}, {"sub", auth.sub}, {"remote", peer_.name}, {"request_id", request_id_}});
      keep_alive_ = false;
      return Send(ErrorResponse(429, "limit_exceeded", "too many WebSocket connections"), true);
    }
    user_slot = std::make_unique<UserSlot>(core_, std::move(key));
  }

  upgraded_ = true;
  stream_.expires_never();  // the WebSocket's own timeouts take over
  auto ws = std::make_shared<WsSession>(core_, std::move(stream_), peer_, id_, std::move(slot_),
                                        std::move(user_slot), std::move(auth));
  core_->Register(id_, ws);
  ws->Start(std::move(req), offered_v1, request_id_);
}

void HttpSession::Send(HttpResponse r, bool close) {
  auto res = std::make_unique<Response>();
  int status = r.status >= 100 && r.status <= 999 ? r.status : 500;
  res->result(static_cast<unsigned>(status));
  res->version(11);
  res->set(http::field::server, "corrald");
  if (!r.content_type.empty() && IsSafeHeaderText(r.content_type))
    res->set(http::field::content_type, r.content_type);
  for (const auto& [name, value] : r.headers) {
    // Framing is ours; and no header splitting through a handler's values.
    if (IEquals(name, "content-length") || IEquals(name, "transfer-encoding") ||
        IEquals(name, "connection") || name.empty() || !IsSafeHeaderText(name) || !IsSafeHeaderText(value) ||
        name.find_first_of(": ") != std::string::npos) {
      continue;
    }
    res->insert(name, value);
  }
  res->set("X-Request-Id", request_id_);
  if (!cors_origin_.empty()) {
    res->set(http::field::access_control_allow_origin, cors_origin_);
    res->set(http::field::access_control_expose_headers, "X-Request-Id");
    res->set(http::field::vary, "Origin");
  }
  res->body() = std::move(r.body);
  bool keep = keep_alive_ && !close && !core_->stopping;
  res->keep_alive(keep);
  res->prepare_payload();
  response_ = std::move(res);
  core_->http_requests->WithLabels({std::to_string(status)}).Increment();
  stream_.expires_after(core_->limits.idle_timeout);
  http::async_write(
      stream_, *response_,
      [self = shared_from_this(), keep](const beast::error_code& ec, size_t) { self->OnWrite(ec, !keep); });
}

void HttpSession::OnWrite(const beast::error_code& ec, bool close) {
  std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - request_start_;
  core_->http_duration->Observe(elapsed.count());
  response_.reset();
  if (ec) return CloseSocket();
  if (close) return LingeringClose();
  first_request_ = false;
  DoReadHeader();
}

void HttpSession::LingeringClose() {
  if (closed_) return;
  beast::error_code ignored;
  stream_.socket().shutdown(net::socket_base::shutdown_send, ignored);
  stream_.expires_after(kLingerTime);
  DoDrain();
}

void HttpSession::DoDrain() {
  stream_.async_read_some(net::buffer(drain_buffer_),
                          [self = shared_from_this()](const beast::error_code& ec, size_t n) {
                            self->drained_bytes_ += n;
                            if (ec || self->closed_ || self->drained_bytes_ > kLingerMaxBytes)
                              return self->CloseSocket();
                            self->DoDrain();
                          });
}

void HttpSession::CloseSocket() {
  if (closed_) return;
  closed_ = true;
  beast::error_code ignored;
  stream_.socket().shutdown(net::socket_base::shutdown_both, ignored);
  stream_.close();
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

}  // namespace

// --- public API -----------------------------------------------------------------------------

class Server::Impl : public ServerCore {
 public:
  using ServerCore::ServerCore;
};

std::string ErrorBody(std::string_view code, std::string_view message) {
  return "{\"error\":{\"code\":\"" + JsonEscape(code) + "\",\"message\":\"" + JsonEscape(message) + "\"}}";
}

Server::Server(net::io_context& io, ServerLimits limits, Authenticator authenticate, Metrics& metrics)
    : impl_(std::make_shared<Impl>(io, std::move(limits), std::move(authenticate), metrics)) {}

Server::~Server() { Stop(); }

void Server::Route(std::string method, std::string pattern, Auth auth, HttpHandler handler) {
  RouteEntry route;
  route.method = std::move(method);
  if (pattern.empty() || pattern.front() != '/') pattern.insert(pattern.begin(), '/');
  for (std::string_view segment : SplitSegments(pattern)) route.segments.emplace_back(segment);
  route.auth = auth;
  route.handler = std::move(handler);
  impl_->routes.push_back(std::move(route));
}

void Server::SetRequestGate(RequestGate gate) { impl_->gate = std::move(gate); }

void Server::SetAllowedOrigins(std::vector<std::string> origins) { impl_->allowed_origins = std::move(origins); }

void Server::WebSocket(std::string path, std::shared_ptr<WsHandler> handler) {
  impl_->ws_path = std::move(path);
  impl_->ws_handler = std::move(handler);
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

size_t Server::connection_count() const { return impl_->connection_count.load(); }

}  // namespace corral::api
