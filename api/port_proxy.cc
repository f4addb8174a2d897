#include "api/port_proxy.h"

#include <netinet/in.h>

#include <chrono>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include "api/http_text.h"
#include "api/routes.h"
#include "common/unix_time.h"

namespace corral::api::internal {

namespace {

using net::awaitable;
using net::use_awaitable;
using tcp = net::ip::tcp;

constexpr char kPortCookie[] = "corral_port";
constexpr uint32_t kMaxAppResponseHead = 64 << 10;
constexpr size_t kPortChunk = 16 << 10;
constexpr std::chrono::seconds kPortConnectTimeout{10};

// A unix time of at most 12 digits, or nullopt.
std::optional<int64_t> ExpirySeconds(std::string_view s) {
  if (s.empty() || s.size() > 12) return std::nullopt;
  int64_t value = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

// What a path-routed page gets: a document of an opaque origin, never corral's own (the API's
// origin serves the page at / and its token), whatever the app sends.
constexpr char kPathFormPolicy[] =
    "Content-Security-Policy: sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads\r\n";

}  // namespace

// One client connection taken from the server, to one port.
class PortConnection : public Session, public std::enable_shared_from_this<PortConnection> {
 public:
  PortConnection(std::shared_ptr<PortProxy> proxy, Takeover& t, PortRoute route)
      : proxy_(std::move(proxy)),
        core_(t.core),
        client_(std::move(t.stream)),
        buffer_(std::move(t.buffer)),
        header_(t.header),
        peer_(t.peer),
        id_(t.id),
        slot_(std::move(t.slot)),
        request_id_(t.request_id),
        route_(std::move(route)),
        upstream_(proxy_->io_),
        watchdog_(proxy_->io_) {}

  ~PortConnection() override {
    if (counted_) {
      auto it = proxy_->open_.find({route_.sandbox_id, route_.port});
      if (it != proxy_->open_.end()) {
        it->second.erase(this);
        if (it->second.empty()) proxy_->open_.erase(it);
      }
    }
    core_->Unregister(id_);
  }

  void Start() { net::co_spawn(proxy_->io_, Serve(shared_from_this()), net::detached); }

  void Shutdown() override { Close(); }

  void Recheck(const std::function<bool(const AuthContext&)>& which) override {
    if (!by_token_ || closed_ || !which(auth_)) return;
    auto verified = core_->Authenticate(token_, peer_, "");
    if (verified.ok() && verified->iss == auth_.iss && verified->sub == auth_.sub) return;
    Close();
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ignored;
    client_.socket().shutdown(net::socket_base::shutdown_both, ignored);
    client_.close();
    upstream_.socket().shutdown(net::socket_base::shutdown_both, ignored);
    upstream_.close();
    watchdog_.cancel();
  }

 private:
  std::chrono::seconds Idle() const { return std::chrono::seconds(proxy_->config_.idle_timeout_s); }

  // The connection ends when the app's side does (or a refusal is written).
  static awaitable<void> Serve(std::shared_ptr<PortConnection> self) {
    co_await self->Run();
    self->Close();
  }

  // ports.idle_timeout: no byte either way for that long ends the connection. One watch for both
  // directions (a stream's own timeout would end a download whose client says nothing).
  static awaitable<void> Watch(std::shared_ptr<PortConnection> self) {
    beast::error_code ec;
    while (!self->closed_) {
      self->watchdog_.expires_at(self->last_byte_ + self->Idle());
      co_await self->watchdog_.async_wait(net::redirect_error(use_awaitable, ec));
      if (self->closed_) break;
      if (std::chrono::steady_clock::now() >= self->last_byte_ + self->Idle()) {
        LogInfo(kLog, "port connection idle", {{"sandbox", self->route_.sandbox_id},
                                                {"port", std::to_string(self->route_.port)}});
        self->Close();
      }
    }
  }

  awaitable<void> Answer(int status, std::string_view code, std::string_view message) {
    http::response<http::string_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::server, "corrald");
    res.set(http::field::content_type, "application/json");
    res.set("X-Request-Id", request_id_);
    res.body() = ErrorResponse(status, code, message).body;
    res.keep_alive(false);
    res.prepare_payload();
    beast::error_code ec;
    client_.expires_after(core_->handshake_timeout);
    co_await http::async_write(client_, res, net::redirect_error(use_awaitable, ec));
  }

  awaitable<void> NotFound() {
    LogInfo(kLog, "port request refused", {{"sandbox", route_.sandbox_id}, {"port", std::to_string(route_.port)},
                                           {"remote", peer_.name}, {"request_id", request_id_}});
    co_await Answer(404, "not_found", "no sandbox " + route_.sandbox_id + " for this user");
  }

  // A token of corral's in the Authorization header, of whichever user: never the app's.
  void FindHeaderToken() {
    auto authorization = header_.find(http::field::authorization);
    if (authorization == header_.end()) return;
    const std::string token = BearerTokenOf(SV(authorization->value()));
    if (token.empty()) return;
    auto auth = core_->VerifyToken(token);
    if (!auth.ok()) return;  // the app's own
    strip_authorization_ = true;
    header_token_ = token;
    header_auth_ = std::move(*auth);
  }

  bool IsOwner(const AuthContext& auth, const supervisor::SandboxManager::PortTarget& target) const {
    return auth.iss == target.sandbox.iss && auth.sub == target.sandbox.sub;
  }

  // Who may: sets by_token_/set_cookie_ and returns true, or false for the 404.
  bool Allowed(const supervisor::SandboxManager::PortTarget& target, std::map<std::string, std::string>& params,
               const std::string& cookie_value) {
    if (!header_token_.empty() && IsOwner(header_auth_, target)) {
      by_token_ = true;
      token_ = header_token_;
      auth_ = header_auth_;
      return true;
    }
    if (!params["token"].empty()) {
      auto auth = core_->Authenticate(params["token"], peer_, request_id_);
      if (auth.ok() && IsOwner(*auth, target)) {
        by_token_ = true;
        token_ = params["token"];
        auth_ = std::move(*auth);
        return true;
      }
    }
    if (target.port.is_public) return true;
    if (!params["corral_sig"].empty()) {
      std::optional<int64_t> exp = ExpirySeconds(params["corral_exp"]);
      if (!exp || !proxy_->manager_.VerifyPortSignature(target, *exp, params["corral_sig"])) return false;
      set_cookie_ = std::to_string(*exp) + "." + params["corral_sig"];
      cookie_exp_ = *exp;
      return true;
    }
    const size_t dot = cookie_value.find('.');
    if (dot == std::string::npos) return false;
    std::optional<int64_t> exp = ExpirySeconds(std::string_view(cookie_value).substr(0, dot));
    return exp && proxy_->manager_.VerifyPortSignature(target, *exp, std::string_view(cookie_value).substr(dot + 1));
  }

  // The request head the app gets.
  std::string Head(const std::string& target, const std::string& cookies) const {
    const bool upgrade = header_.find(http::field::upgrade) != header_.end();
    std::string head = std::string(header_.method_string()) + " " + target + " HTTP/1.1\r\n";
    std::string original_host;
    for (const auto& field : header_) {
      const std::string name = ToLower(SV(field.name_string()));
      if (name == "host") original_host = std::string(field.value());
      if (name == "host" || name == "cookie" || name == "keep-alive" || name == "proxy-connection" ||
          name == "proxy-authorization" || name == "x-forwarded-for" || name == "x-forwarded-host" ||
          name == "x-forwarded-prefix" || (name == "authorization" && strip_authorization_) ||
          (name == "connection" && !upgrade)) {
        continue;
      }
      std::string value(field.value());
      if (name == "sec-websocket-protocol") {
        value = StripTokenSubprotocols(value, [this](const std::string& token) { return core_->VerifyToken(token).ok(); });
        if (value.empty()) continue;
      }
      head += std::string(field.name_string()) + ": " + value + "\r\n";
    }
    head += "Host: " + (route_.by_host ? original_host : "localhost:" + std::to_string(route_.port)) + "\r\n";
    if (!cookies.empty()) head += "Cookie: " + cookies + "\r\n";
    const std::string address = peer_.name.substr(0, peer_.name.rfind(':'));
    head += "X-Forwarded-For: " + address + "\r\nX-Forwarded-Host: " + original_host + "\r\n";
    if (!route_.by_host) head += "X-Forwarded-Prefix: " + route_.prefix + "\r\n";
    if (!upgrade) head += "Connection: close\r\n";
    return head + "\r\n";
  }

  // corral's cookie for a first request with a signature: the app's subresources and WebSocket
  // then carry it. Secure on the host form (its URLs are https); on the path form when the load
  // balancer says the request came over https.
  std::string CookieHeader() const {
    const std::string path = route_.by_host ? "/" : route_.prefix + "/";
    auto proto = header_.find("X-Forwarded-Proto");
    const bool secure = route_.by_host || (proto != header_.end() && IEquals(SV(proto->value()), "https"));
    return std::string(kPortCookie) + "=" + set_cookie_ + "; Path=" + path +
           "; Max-Age=" + std::to_string(std::max<int64_t>(0, cookie_exp_ - UnixNow())) + "; HttpOnly; SameSite=Lax" +
           (secure ? "; Secure" : "");
  }

  // Connects the socket made in the sandbox to 127.0.0.1:PORT there; false after answering 502.
  awaitable<bool> Connect() {
    auto socket = proxy_->manager_.PortSocket(route_.sandbox_id);
    if (!socket.ok()) {
      co_await Answer(502, "bad_gateway", "the sandbox's port cannot be reached");
      co_return false;
    }
    beast::error_code ec;
    upstream_.socket().assign(tcp::v4(), socket->release(), ec);
    if (!ec) {
      upstream_.expires_after(kPortConnectTimeout);
      const tcp::endpoint endpoint(net::ip::address_v4::loopback(), static_cast<uint16_t>(route_.port));
      co_await upstream_.async_connect(endpoint, net::redirect_error(use_awaitable, ec));
      upstream_.expires_never();
    }
    if (ec) {
      co_await Answer(502, "bad_gateway", "nothing answers on port " + std::to_string(route_.port) + " in the sandbox");
      co_return false;
    }
    co_return true;
  }

  awaitable<void> Run() {
    std::map<std::string, std::string> params;
    const std::string target = StripCorralParams(route_.rest, params);
    std::string cookie_value;
    auto cookie = header_.find(http::field::cookie);
    const std::string cookies =
        cookie == header_.end() ? std::string() : StripCookie(SV(cookie->value()), kPortCookie, cookie_value);
    FindHeaderToken();
    // No such sandbox or port, another node's sandbox, or one not running (its ports close
    // when it stops): the same 404 as for a caller who may not.
    auto found = proxy_->manager_.FindPort(route_.sandbox_id, route_.port);
    if (!found.ok() || !Allowed(*found, params, cookie_value)) co_return co_await NotFound();
    auto& open = proxy_->open_[{route_.sandbox_id, route_.port}];
    if (open.size() >= proxy_->config_.max_connections_per_port) {
      if (open.empty()) proxy_->open_.erase({route_.sandbox_id, route_.port});
      LogWarn(kLog, "port connections at the limit", {{"sandbox", route_.sandbox_id}, {"port", std::to_string(route_.port)}});
      co_return co_await Answer(503, "unavailable", "too many connections to this port");
    }
    open.insert(this);
    counted_ = true;
    if (!co_await Connect()) co_return;
    LogInfo(kLog, "port connection",
            {{"sandbox", route_.sandbox_id}, {"port", std::to_string(route_.port)}, {"remote", peer_.name},
             {"request_id", request_id_}, {"by", by_token_ ? "token" : found->port.is_public ? "public" : "signature"}});
    client_.expires_never();
    last_byte_ = std::chrono::steady_clock::now();
    net::co_spawn(proxy_->io_, Watch(shared_from_this()), net::detached);
    const std::string head = Head(target, cookies);
    beast::error_code ec;
    co_await net::async_write(upstream_, net::buffer(head), net::redirect_error(use_awaitable, ec));
    if (!ec && buffer_.size() > 0) {
      co_await net::async_write(upstream_, buffer_.data(), net::redirect_error(use_awaitable, ec));
      buffer_.consume(buffer_.size());
    }
    if (ec) co_return;
    // The request's body (or a WebSocket's frames) goes on while the answer is awaited: an app
    // may read all of a body before it answers.
    net::co_spawn(proxy_->io_, PumpUp(shared_from_this()), net::detached);
    if (!co_await PassResponseHeads()) co_return;
    co_await Pump(upstream_, client_);
  }

  // Reads the app's answer's head (and any 1xx before it) with Beast's parser and writes the
  // client a head of corral's making from it (ClientResponseHead): corral's cookie, the path
  // form's policy, the app's cookies kept to its port. An answer that does not parse as HTTP/1.x
  // is a 502 (or, after a 1xx, the end).
  awaitable<bool> PassResponseHeads() {
    std::string added;
    if (!set_cookie_.empty()) added += "Set-Cookie: " + CookieHeader() + "\r\n";
    if (!route_.by_host) added += kPathFormPolicy;
    const std::string cookie_path = route_.by_host ? "" : route_.prefix + "/";
    bool interim_sent = false;
    for (;;) {
      http::response_parser<http::empty_body> parser;
      parser.header_limit(kMaxAppResponseHead);
      parser.eager(false);
      beast::error_code ec;
      co_await http::async_read_header(upstream_, upstream_buffer_, parser, net::redirect_error(use_awaitable, ec));
      last_byte_ = std::chrono::steady_clock::now();
      if (ec) {
        if (!interim_sent && !closed_) {
          LogWarn(kLog, "port answer is not HTTP", {{"sandbox", route_.sandbox_id}, {"port", std::to_string(route_.port)},
                                                    {"error", ec.message()}});
          co_await Answer(502, "bad_gateway", "the app's answer is not HTTP/1.1");
        }
        co_return false;
      }
      const auto& head = parser.get().base();
      const std::string text = ClientResponseHead(head, added, cookie_path);
      co_await net::async_write(client_, net::buffer(text), net::redirect_error(use_awaitable, ec));
      if (ec) co_return false;
      // 100 Continue, 102, 103 Early Hints: another head follows (101 is the upgrade's own).
      if (head.result_int() >= 100 && head.result_int() < 200 && head.result_int() != 101) {
        interim_sent = true;
        continue;
      }
      break;
    }
    beast::error_code ec;
    if (upstream_buffer_.size() > 0) {
      co_await net::async_write(client_, upstream_buffer_.data(), net::redirect_error(use_awaitable, ec));
      upstream_buffer_.consume(upstream_buffer_.size());
    }
    co_return !ec;
  }

  template <typename From, typename To>
  awaitable<void> Pump(From& from, To& to) {
    std::vector<char> chunk(kPortChunk);
    beast::error_code ec;
    while (!closed_) {
      const size_t n = co_await from.async_read_some(net::buffer(chunk), net::redirect_error(use_awaitable, ec));
      if (ec || n == 0) break;
      last_byte_ = std::chrono::steady_clock::now();
      co_await net::async_write(to, net::buffer(chunk.data(), n), net::redirect_error(use_awaitable, ec));
      if (ec) break;
      last_byte_ = std::chrono::steady_clock::now();
    }
    // Pass the end on (a half close), so the other direction can finish what it sends; a reset
    // ends the whole connection.
    beast::error_code ignored;
    to.socket().shutdown(net::socket_base::shutdown_send, ignored);
    if (ec && ec != net::error::eof) Close();
  }

  static awaitable<void> PumpUp(std::shared_ptr<PortConnection> self) { co_await self->Pump(self->client_, self->upstream_); }

  std::shared_ptr<PortProxy> proxy_;
  std::shared_ptr<ServerCore> core_;
  Stream client_;
  beast::flat_buffer buffer_;
  Request header_;
  Peer peer_;
  uint64_t id_;
  std::unique_ptr<ConnectionSlot> slot_;
  std::string request_id_;
  PortRoute route_;
  beast::tcp_stream upstream_;
  beast::flat_buffer upstream_buffer_;
  net::steady_timer watchdog_;
  std::chrono::steady_clock::time_point last_byte_;
  bool counted_ = false;
  bool closed_ = false;
  bool by_token_ = false;
  bool strip_authorization_ = false;
  std::string header_token_;
  AuthContext header_auth_;
  std::string token_;
  AuthContext auth_;
  std::string set_cookie_;
  int64_t cookie_exp_ = 0;
};

PortProxy::PortProxy(net::io_context& io, supervisor::SandboxManager& manager, supervisor::PortsConfig config)
    : io_(io), manager_(manager), config_(std::move(config)) {}

bool PortProxy::Take(Takeover& takeover) {
  auto host = takeover.header.find(http::field::host);
  auto route = MatchPortRoute(SV(takeover.header.method_string()),
                              host == takeover.header.end() ? std::string_view() : SV(host->value()),
                              SV(takeover.header.target()), config_.domain);
  if (!route) return false;
  takeover.stream.expires_never();
  auto connection = std::make_shared<PortConnection>(shared_from_this(), takeover, std::move(*route));
  takeover.core->Register(takeover.id, connection);
  connection->Start();
  return true;
}

void PortProxy::CloseConnections(const std::string& sandbox_id, int64_t port) {
  std::vector<PortConnection*> closing;
  for (auto& [key, connections] : open_) {
    if (key.first == sandbox_id && (port == 0 || key.second == port)) {
      closing.insert(closing.end(), connections.begin(), connections.end());
    }
  }
  // Close() ends the sockets and the watch; each connection leaves open_ when its coroutines end.
  for (PortConnection* connection : closing) connection->Close();
}

}  // namespace corral::api::internal

namespace corral::api {

void ServePorts(Server& server, boost::asio::io_context& io, supervisor::SandboxManager& manager,
                const supervisor::DaemonConfig& config) {
  auto proxy = std::make_shared<internal::PortProxy>(io, manager, config.ports);
  manager.SetPortsClosed([weak = std::weak_ptr<internal::PortProxy>(proxy)](const std::string& id, int64_t port) {
    if (auto taker = weak.lock()) taker->CloseConnections(id, port);
  });
  server.SetConnectionTaker(std::move(proxy));
}

}  // namespace corral::api
