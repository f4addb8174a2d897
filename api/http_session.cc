#include "api/http_session.h"

#include <cstdint>
#include <limits>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/websocket.hpp>

#include "api/http_text.h"
#include "api/ws_session.h"

namespace corral::api::internal {

namespace websocket = boost::beast::websocket;

namespace {

// How long a connection that we close after an error reply may keep sending (its request body)
// before we close it hard; reading it first lets the client see the reply instead of a reset.
constexpr std::chrono::seconds kLingerTime{2};
constexpr size_t kLingerMaxBytes = 4 << 20;
// What a connection's read buffer may hold beyond the header limit (before a request is
// admitted), and beyond that once its body is being read: bytes in flight, not the body.
constexpr size_t kHeaderSlack = 8 << 10;
constexpr size_t kBodyReadBuffer = 256 << 10;

std::chrono::steady_clock::duration AtRate(size_t bytes, size_t bytes_per_second) {
  if (bytes_per_second == 0) return std::chrono::hours(24 * 365);
  return std::chrono::milliseconds(static_cast<int64_t>(bytes / bytes_per_second * 1000 +
                                                        bytes % bytes_per_second * 1000 / bytes_per_second));
}

}  // namespace

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
    net::dispatch(executor, [s, response = std::move(response)]() mutable { s->Respond(std::move(response)); });
  }

  ~ResponderState() {
    if (done.load() || !session) return;
    try {
      LogError(kLog, "handler dropped its responder without answering");
      auto s = std::move(session);
      // Posted, never run inline: this may run on another thread, or inside the handler.
      net::post(executor, [s] { s->Respond(ErrorResponse(500, "internal", "the handler did not answer")); });
    } catch (...) {
      // Out of memory while posting: the connection is closed when its session is released.
    }
  }
};

HttpSession::HttpSession(std::shared_ptr<ServerCore> core, Stream stream, Peer peer, uint64_t id,
                         std::unique_ptr<ConnectionSlot> slot)
    : core_(std::move(core)),
      stream_(std::move(stream)),
      peer_(std::move(peer)),
      id_(id),
      slot_(std::move(slot)),
      buffer_(core_->limits.max_header_bytes + kHeaderSlack),
      connected_at_(std::chrono::steady_clock::now()),
      deadline_(core_->io) {}

HttpSession::~HttpSession() {
  if (!upgraded_ && slot_) {
    LogInfo(kLog, "connection closed", {{"connection", std::to_string(id_)}, {"remote", peer_.name}});
  }
  core_->Unregister(id_);
}

void HttpSession::Start() { WaitForRequest(); }

void HttpSession::Reject() {
  request_id_ = NewRequestId();
  request_start_ = std::chrono::steady_clock::now();
  Send(ErrorResponse(503, "unavailable", "too many connections"), /*close=*/true);
}

void HttpSession::Respond(HttpResponse response) {
  if (!awaiting_response_) return;
  awaiting_response_ = false;
  body_hold_.Reset();
  if (closed_) return;
  Send(std::move(response), /*close=*/false);
}

// --- reading a request ---------------------------------------------------------------------

void HttpSession::WaitForRequest() {
  phase_ = Phase::kIdle;
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(std::min<size_t>(core_->limits.max_header_bytes, UINT32_MAX)));
  // The body's limit is the route's, set once the headers say which route (Admit): until then
  // none, or Beast would refuse a large Content-Length before the token is looked at.
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
  // Never below what it holds: a pipelined request may be here already.
  buffer_.max_size(buffer_.size() + core_->limits.max_header_bytes + kHeaderSlack);
  if (buffer_.size() > 0) return ReadHeader();
  auto deadline = first_request_ ? connected_at_ + core_->handshake_timeout
                                 : std::chrono::steady_clock::now() + core_->idle_timeout;
  if (has_token_) deadline = std::min(deadline, TokenDeadline(token_auth_.expires_at));
  stream_.expires_at(deadline);
  stream_.async_read_some(buffer_.prepare(kHeaderSlack),
                          [self = shared_from_this()](const beast::error_code& ec, size_t n) {
                            self->buffer_.commit(n);
                            if (ec) return self->OnReadError(ec);
                            self->ReadHeader();
                          });
}

void HttpSession::ReadHeader() {
  phase_ = Phase::kHeader;
  // The first request's headers are due within the handshake timeout of the connection's start;
  // a later one's within the handshake timeout of its first byte.
  ArmDeadline((first_request_ ? connected_at_ : std::chrono::steady_clock::now()) + core_->handshake_timeout);
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](const beast::error_code& ec, size_t) { self->OnHeader(ec); });
}

void HttpSession::ArmDeadline(std::chrono::steady_clock::time_point deadline) {
  stream_.expires_never();
  deadline_hit_ = false;
  deadline_.expires_at(deadline);
  deadline_.async_wait([weak = weak_from_this()](const beast::error_code& ec) {
    auto self = ec ? nullptr : weak.lock();
    if (!self || self->closed_) return;
    self->deadline_hit_ = true;
    beast::error_code ignored;
    self->stream_.socket().cancel(ignored);
  });
}

bool HttpSession::DeadlineHit(const beast::error_code& ec) {
  deadline_.cancel();
  return deadline_hit_ && ec == net::error::operation_aborted;
}

void HttpSession::OnHeader(const beast::error_code& ec) {
  request_start_ = std::chrono::steady_clock::now();
  request_id_ = NewRequestId();
  if (DeadlineHit(ec)) return OnReadError(beast::error::timeout);
  if (ec) return OnReadError(ec);
  Admit();
}

void HttpSession::Admit() {
  const Request& req = parser_->get();
  keep_alive_ = req.keep_alive();
  body_owed_ = !parser_->is_done();
  cors_origin_.clear();
  token_ended_ = false;
  pending_ = HttpRequest();
  route_ = nullptr;
  if (core_->connection_taker && !peer_.is_unix) {
    Takeover takeover{core_, stream_, buffer_, req, peer_, id_, slot_, request_id_};
    if (core_->connection_taker->Take(takeover)) {
      upgraded_ = true;  // the stream is the taker's now
      return;
    }
  }
  if (!AdmitOrigin()) return;

  std::string_view target = SV(req.target());
  size_t question = target.find('?');
  std::string_view raw_path = target.substr(0, question);
  std::string_view raw_query = question == std::string_view::npos ? std::string_view() : target.substr(question + 1);
  if (raw_path.empty() || raw_path.front() != '/') {
    return Refuse(ErrorResponse(400, "bad_request", "the request target must be a path"));
  }
  auto segments = DecodeSegments(raw_path);
  auto path = PercentDecode(raw_path, false);
  auto query = ParseQuery(raw_query);
  if (!segments || !path || !query) return Refuse(ErrorResponse(400, "bad_request", "malformed percent-encoding"));

  if (core_->ws_handler && *path == core_->ws_path && websocket::is_upgrade(req)) {
    if (body_owed_) return Refuse(ErrorResponse(400, "bad_request", "an upgrade request has no body"));
    return HandleUpgrade(*query);
  }

  std::string method(req.method_string());
  const bool preflight = req.method() == http::verb::options && req.find(http::field::origin) != req.end() &&
                         req.find(http::field::access_control_request_method) != req.end();
  RouteMatch match = core_->FindRoute(method, *segments, peer_.is_unix);
  if (match.methods.empty()) return Refuse(ErrorResponse(404, "not_found", "no such endpoint"));
  if (preflight) return HandlePreflight(match);
  if (match.route == nullptr) {
    HttpResponse r = ErrorResponse(405, "bad_request", "method not allowed");
    std::string allow;
    for (const auto& m : match.methods) allow += (allow.empty() ? "" : ", ") + m;
    r.headers.emplace_back("Allow", allow);
    return Refuse(std::move(r));
  }

  size_t max_body = 0;
  if (!AdmitCaller(*match.route, max_body)) return;
  if (!AdmitBody(max_body)) return;

  pending_.method = std::move(method);
  pending_.target = std::string(target);
  pending_.path = std::move(*path);
  pending_.query = std::move(*query);
  pending_.params = std::move(match.params);
  for (const auto& field : req) {
    std::string name = ToLower(SV(field.name_string()));
    auto [it, inserted] = pending_.headers.emplace(name, std::string(field.value()));
    if (!inserted) it->second += ", " + std::string(field.value());
  }
  pending_.request_id = request_id_;
  route_ = match.route;
  ContinueToBody();
}

bool HttpSession::AdmitOrigin() {
  const Request& req = parser_->get();
  auto origin = req.find(http::field::origin);
  if (origin == req.end()) return true;
  auto host = req.find(http::field::host);
  const bool same_origin = host != req.end() && SameOrigin(SV(origin->value()), SV(host->value()));
  if (!same_origin && !core_->OriginAllowed(SV(origin->value()))) {
    LogWarn(kLog, "origin not allowed",
            {{"origin", std::string(origin->value())}, {"remote", peer_.name}, {"request_id", request_id_}});
    Refuse(ErrorResponse(403, "forbidden", "origin not allowed"));
    return false;
  }
  cors_origin_ = std::string(origin->value());
  return true;
}

bool HttpSession::AdmitCaller(const RouteEntry& route, size_t& max_body) {
  const Request& req = parser_->get();
  max_body = route.max_body != 0 ? route.max_body : core_->limits.max_body_bytes;
  if (route.auth == Auth::kNode) return AdmitNode(req);
  if (peer_.is_unix) {
    pending_.auth.admin = true;
    return true;
  }
  if (route.auth != Auth::kRequired) {
    max_body = 0;  // routes without a token take no body
    return true;
  }
  auto it = req.find(http::field::authorization);
  std::string token = it == req.end() ? std::string() : BearerTokenOf(SV(it->value()));
  auto auth = core_->Authenticate(token, peer_, request_id_);
  if (!auth.ok()) {
    keep_alive_ = false;
    Refuse(UnauthorizedResponse());
    return false;
  }
  StatusOr<std::string> forwarded_by = core_->CheckHop(req, SV(req.method_string()), SV(req.target()), peer_,
                                                      request_id_);
  if (!forwarded_by.ok()) {
    keep_alive_ = false;
    Refuse(UnauthorizedResponse());
    return false;
  }
  token_ = std::move(token);
  token_auth_ = *auth;
  has_token_ = true;
  pending_.auth = std::move(*auth);
  pending_.forwarded_by = std::move(*forwarded_by);
  // A forwarded request was counted by the node the client asked.
  if (core_->gate && pending_.forwarded_by.empty()) {
    if (std::optional<HttpResponse> refused = core_->gate(pending_.auth)) {
      Refuse(std::move(*refused));
      return false;
    }
  }
  return true;
}

// Another node of the fleet, by its verified hop mark alone (no token: the request is the
// node's own, not a client's it passes on); the admin socket too must show one.
bool HttpSession::AdmitNode(const Request& req) {
  StatusOr<std::string> from = core_->CheckHop(req, SV(req.method_string()), SV(req.target()), peer_, request_id_);
  if (from.ok() && from->empty()) {
    core_->auth_failures->Increment();
    LogWarn(kLog, "authentication failed",
            {{"reason", "a node's route without a hop mark"}, {"remote", peer_.name}, {"request_id", request_id_}});
  }
  if (!from.ok() || from->empty() || req.find(http::field::authorization) != req.end()) {
    keep_alive_ = false;
    Refuse(UnauthorizedResponse());
    return false;
  }
  pending_.forwarded_by = std::move(*from);
  return true;
}

bool HttpSession::AdmitBody(size_t max_body) {
  const boost::optional<uint64_t> length = parser_->content_length();
  if (body_owed_ && (max_body == 0 || (length && *length > max_body))) {
    LogInfo(kLog, "request body too large",
            {{"connection", std::to_string(id_)}, {"remote", peer_.name}, {"request_id", request_id_}});
    Refuse(ErrorResponse(413, "payload_too_large", "request body too large"));
    return false;
  }
  parser_->body_limit(max_body);
  chunked_body_ = body_owed_ && !length;
  if (!body_owed_) return true;
  body_hold_ = core_->body_budget.Reserve(length ? static_cast<size_t>(*length) : 0);
  if (body_hold_) return true;
  LogWarn(kLog, "request bodies' memory budget is spent; refused",
          {{"connection", std::to_string(id_)},
           {"remote", peer_.name},
           {"in_use", std::to_string(core_->body_budget.in_use())},
           {"request_id", request_id_}});
  HttpResponse r = ErrorResponse(503, "unavailable", "too many request bodies at once; retry later");
  r.headers.emplace_back("Retry-After", "1");
  Refuse(std::move(r));
  return false;
}

void HttpSession::ContinueToBody() {
  const Request& req = parser_->get();
  auto expect = req.find(http::field::expect);
  if (body_owed_ && expect != req.end() && IEquals(SV(expect->value()), "100-continue")) {
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    stream_.expires_after(core_->handshake_timeout);
    net::async_write(stream_, net::buffer(kContinue.data(), kContinue.size()),
                     [self = shared_from_this()](const beast::error_code& write_ec, size_t) {
                       if (write_ec) return self->CloseSocket();
                       self->ReadBody();
                     });
    return;
  }
  ReadBody();
}

void HttpSession::ReadBody() {
  if (parser_->is_done()) {
    body_owed_ = false;
    return Dispatch();
  }
  const auto now = std::chrono::steady_clock::now();
  if (phase_ != Phase::kBody) {
    phase_ = Phase::kBody;
    body_start_ = now;
    buffer_.max_size(core_->limits.max_header_bytes + kBodyReadBuffer);
  }
  // Progress within the handshake timeout, and the minimum rate after a grace of as long.
  const size_t received = parser_->get().body().size();
  auto deadline = std::min(now + core_->handshake_timeout,
                           body_start_ + core_->handshake_timeout + AtRate(received, core_->limits.body_min_rate));
  if (deadline <= now) {
    LogInfo(kLog, "request body too slow",
            {{"connection", std::to_string(id_)}, {"remote", peer_.name}, {"received", std::to_string(received)}});
    keep_alive_ = false;
    return Send(ErrorResponse(408, "bad_request", "request body too slow"), true);
  }
  ArmDeadline(deadline);
  http::async_read_some(stream_, buffer_, *parser_,
                        [self = shared_from_this()](const beast::error_code& ec, size_t) { self->OnBody(ec); });
}

void HttpSession::OnBody(const beast::error_code& ec) {
  const bool timed_out = DeadlineHit(ec);
  if (token_ended_) {
    keep_alive_ = false;
    return Send(UnauthorizedResponse(), true);
  }
  if (timed_out) return OnReadError(beast::error::timeout);
  if (ec) return OnReadError(ec);
  if (chunked_body_ && !body_hold_.GrowTo(parser_->get().body().size())) {
    LogWarn(kLog, "request bodies' memory budget is spent; refused",
            {{"connection", std::to_string(id_)}, {"remote", peer_.name}, {"request_id", request_id_}});
    keep_alive_ = false;
    HttpResponse r = ErrorResponse(503, "unavailable", "too many request bodies at once; retry later");
    r.headers.emplace_back("Retry-After", "1");
    return Send(std::move(r), true);
  }
  ReadBody();
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
  if (ec == http::error::buffer_overflow) {
    return Send(ErrorResponse(431, "bad_request", "request header too large"), true);
  }
  if (ec.category() == beast::error_code(http::error::end_of_stream).category() &&
      ec != http::error::end_of_stream && ec != http::error::partial_message) {
    LogInfo(kLog, "malformed request",
            {{"connection", std::to_string(id_)}, {"remote", peer_.name}, {"error", ec.message()}});
    return Send(ErrorResponse(400, "bad_request", "malformed request"), true);
  }
  // A request begun and not finished in time: say so (the write has its own deadline).
  if (ec == beast::error::timeout && (phase_ == Phase::kHeader || phase_ == Phase::kBody)) {
    LogInfo(kLog, "request timed out",
            {{"connection", std::to_string(id_)},
             {"remote", peer_.name},
             {"phase", phase_ == Phase::kHeader ? "header" : "body"}});
    return Send(ErrorResponse(408, "bad_request", "request timed out"), true);
  }
  // The client closed, went silent between requests (timeout) or the connection broke.
  if (ec != http::error::end_of_stream) {
    LogDebug(kLog, "connection read ended",
             {{"connection", std::to_string(id_)}, {"remote", peer_.name}, {"error", ec.message()}});
  }
  CloseSocket();
}

void HttpSession::Dispatch() {
  phase_ = Phase::kHandling;
  pending_.body = std::move(parser_->get().body());
  HttpRequest request = std::move(pending_);
  pending_ = HttpRequest();
  LogDebug(kLog, "request", {{"method", request.method}, {"path", request.path}, {"request_id", request_id_}});
  awaiting_response_ = true;
  auto state = std::make_shared<ResponderState>();
  state->session = shared_from_this();
  state->executor = core_->io.get_executor();
  Responder respond = [state](HttpResponse response) { state->Respond(std::move(response)); };
  state.reset();
  const HttpHandler& handler = route_->handler;
  CallSafely("HttpHandler", [&] { handler(std::move(request), std::move(respond)); });
}

void HttpSession::HandlePreflight(const RouteMatch& match) {
  HttpResponse r;
  r.status = 204;
  r.content_type.clear();
  std::string methods;
  for (const auto& m : match.methods) methods += (methods.empty() ? "" : ", ") + m;
  r.headers.emplace_back("Access-Control-Allow-Methods", methods);
  r.headers.emplace_back("Access-Control-Allow-Headers", "Authorization, Content-Type");
  r.headers.emplace_back("Access-Control-Max-Age", "600");
  Refuse(std::move(r));
}

void HttpSession::HandleUpgrade(const std::map<std::string, std::string>& query) {
  Request req = parser_->release();
  if (core_->stopping) {
    keep_alive_ = false;
    return Send(ErrorResponse(503, "unavailable", "the server is stopping"), true);
  }
  // Subprotocols: select corral.v1 when offered; a bearer.<jwt> entry carries the token.
  OfferedSubprotocols offered;
  auto [offers_begin, offers_end] = req.equal_range(http::field::sec_websocket_protocol);
  for (auto it = offers_begin; it != offers_end; ++it) ScanSubprotocols(SV(it->value()), offered);

  AuthContext auth;
  std::string token;
  std::string forwarded_by;
  if (peer_.is_unix) {
    auth.admin = true;
  } else {
    auto header = req.find(http::field::authorization);
    if (header != req.end()) token = BearerTokenOf(SV(header->value()));
    if (token.empty()) token = offered.token;
    if (token.empty()) {
      auto it = query.find("token");
      if (it != query.end()) token = it->second;
    }
    auto result = core_->Authenticate(token, peer_, request_id_);
    if (!result.ok()) {
      keep_alive_ = false;
      return Send(UnauthorizedResponse(), true);
    }
    auth = std::move(*result);
    StatusOr<std::string> from = core_->CheckHop(req, SV(req.method_string()), SV(req.target()), peer_, request_id_);
    if (!from.ok()) {
      keep_alive_ = false;
      return Send(UnauthorizedResponse(), true);
    }
    forwarded_by = std::move(*from);
    if (core_->gate && forwarded_by.empty()) {
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
  auto ws = std::make_shared<WsSession>(core_, std::move(stream_), peer_, id_, std::move(slot_), std::move(user_slot),
                                        std::move(auth), std::move(token), std::move(forwarded_by));
  core_->Register(id_, ws);
  ws->Start(std::move(req), offered.corral_v1, request_id_);
}

// --- token binding -------------------------------------------------------------------------

void HttpSession::Recheck(const std::function<bool(const AuthContext&)>& which) {
  if (upgraded_ || closed_ || !has_token_ || !which(token_auth_)) return;
  auto verified = core_->Authenticate(token_, peer_, "");
  if (verified.ok() && verified->iss == token_auth_.iss && verified->sub == token_auth_.sub) {
    token_auth_ = std::move(*verified);
    return;
  }
  has_token_ = false;
  core_->auth_ended->Increment();
  LogInfo(kLog, "connection's token no longer verifies",
          {{"connection", std::to_string(id_)}, {"remote", peer_.name}, {"jti", token_auth_.claims.jti}});
  keep_alive_ = false;
  switch (phase_) {
    case Phase::kIdle:
      return CloseSocket();
    case Phase::kBody: {
      // The request being read carries this token: stop reading it (OnBody answers 401).
      token_ended_ = true;
      beast::error_code ignored;
      stream_.socket().cancel(ignored);
      return;
    }
    default:
      return;  // a handler or a write in progress finishes; the connection closes after it
  }
}

// --- writing -------------------------------------------------------------------------------

void HttpSession::Refuse(HttpResponse response) {
  if (body_owed_) keep_alive_ = false;
  Send(std::move(response), body_owed_);
}

void HttpSession::Send(HttpResponse r, bool close) {
  phase_ = Phase::kWriting;
  body_hold_.Reset();
  auto res = std::make_unique<http::response<http::string_body>>();
  int status = r.status >= 100 && r.status <= 999 ? r.status : 500;
  res->result(static_cast<unsigned>(status));
  res->version(11);
  res->set(http::field::server, "corrald");
  if (!r.content_type.empty() && IsSafeHeaderText(r.content_type)) res->set(http::field::content_type, r.content_type);
  for (const auto& [name, value] : r.headers) {
    // Framing is ours; and no header splitting through a handler's values.
    if (IEquals(name, "content-length") || IEquals(name, "transfer-encoding") || IEquals(name, "connection") ||
        name.empty() || !IsSafeHeaderText(name) || !IsSafeHeaderText(value) ||
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
  // A client that does not read its response is held to the body's minimum rate too.
  stream_.expires_after(core_->handshake_timeout + AtRate(response_->body().size(), core_->limits.body_min_rate));
  http::async_write(stream_, *response_, [self = shared_from_this(), keep](const beast::error_code& ec, size_t) {
    self->OnWrite(ec, !keep);
  });
}

void HttpSession::OnWrite(const beast::error_code& ec, bool close) {
  std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - request_start_;
  core_->http_duration->Observe(elapsed.count());
  response_.reset();
  if (ec) return CloseSocket();
  if (close || !keep_alive_) return LingeringClose();
  first_request_ = false;
  WaitForRequest();
}

void HttpSession::LingeringClose() {
  if (closed_) return;
  phase_ = Phase::kClosing;
  body_hold_.Reset();
  parser_.reset();
  buffer_.clear();
  beast::error_code ignored;
  stream_.socket().shutdown(net::socket_base::shutdown_send, ignored);
  stream_.expires_after(kLingerTime);
  DoDrain();
}

void HttpSession::DoDrain() {
  stream_.async_read_some(net::buffer(drain_buffer_), [self = shared_from_this()](const beast::error_code& ec, size_t n) {
    self->drained_bytes_ += n;
    if (ec || self->closed_ || self->drained_bytes_ > kLingerMaxBytes) return self->CloseSocket();
    self->DoDrain();
  });
}

void HttpSession::CloseSocket() {
  if (closed_) return;
  closed_ = true;
  deadline_.cancel();
  phase_ = Phase::kClosing;
  body_hold_.Reset();
  beast::error_code ignored;
  stream_.socket().shutdown(net::socket_base::shutdown_both, ignored);
  stream_.close();
}

}  // namespace corral::api::internal
