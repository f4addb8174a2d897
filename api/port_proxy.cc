#include "api/port_proxy.h"

#include <netinet/in.h>

#include <chrono>
#include <ctime>
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

namespace corral::api::internal {

namespace {

using net::awaitable;
using net::use_awaitable;
using tcp = net::ip::tcp;

constexpr char kCookie[] = "corral_port";
constexpr size_t kMaxResponseHead = 64 << 10;
constexpr size_t kChunk = 16 << 10;
constexpr std::chrono::seconds kConnectTimeout{10};

bool AllDigits(std::string_view s) {
  if (s.empty() || s.size() > 5) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

int64_t Now() { return static_cast<int64_t>(time(nullptr)); }

// A unix time of at most 12 digits, or nullopt.
std::optional<int64_t> Seconds(std::string_view s) {
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

std::optional<PortRoute> MatchPortRoute(std::string_view method, std::string_view host, std::string_view target,
                                        std::string_view domain) {
  if (!domain.empty()) {
    std::string name = ToLower(host.substr(0, host.rfind(':') == std::string_view::npos ? host.size() : host.rfind(':')));
    const std::string suffix = "." + std::string(domain);
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      std::string label = name.substr(0, name.size() - suffix.size());
      size_t dash = label.find('-');
      if (dash != std::string::npos && AllDigits(label.substr(0, dash)) && label.size() > dash + 3 &&
          label.compare(dash + 1, 2, "sb") == 0 && (label[dash + 3] == '_' || label[dash + 3] == '-')) {
        PortRoute route;
        route.by_host = true;
        route.port = std::stoll(label.substr(0, dash));
        route.sandbox_id = "sb_" + label.substr(dash + 4);
        route.rest = std::string(target);
        return route;
      }
    }
  }
  static constexpr std::string_view kStart = "/v1/sandboxes/";
  if (target.substr(0, kStart.size()) != kStart) return std::nullopt;
  std::string_view after = target.substr(kStart.size());
  size_t slash = after.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  std::string_view id = after.substr(0, slash);
  after.remove_prefix(slash);
  static constexpr std::string_view kPorts = "/ports/";
  if (after.substr(0, kPorts.size()) != kPorts) return std::nullopt;
  after.remove_prefix(kPorts.size());
  slash = after.find('/');
  if (slash == std::string_view::npos || !AllDigits(after.substr(0, slash))) return std::nullopt;
  PortRoute route;
  route.sandbox_id = std::string(id);
  route.port = std::stoll(std::string(after.substr(0, slash)));
  route.rest = std::string(after.substr(slash));
  route.prefix = std::string(target.substr(0, target.size() - route.rest.size()));
  // The API's own route below the prefix.
  if (method == "POST" && route.rest == "/signed-url") return std::nullopt;
  return route;
}

std::string StripCorralParams(std::string_view target, std::map<std::string, std::string>& found) {
  size_t question = target.find('?');
  if (question == std::string_view::npos) return std::string(target);
  std::string out(target.substr(0, question));
  std::string_view query = target.substr(question + 1);
  std::string kept;
  while (!query.empty()) {
    size_t amp = std::min(query.find('&'), query.size());
    std::string_view pair = query.substr(0, amp);
    query.remove_prefix(std::min(amp + 1, query.size()));
    std::string_view name = pair.substr(0, pair.find('='));
    if (name == "token" || name == "corral_sig" || name == "corral_exp") {
      std::string_view value = pair.size() > name.size() ? pair.substr(name.size() + 1) : std::string_view();
      found[std::string(name)] = PercentDecode(value, true).value_or("");
      continue;
    }
    kept += (kept.empty() ? "" : "&") + std::string(pair);
  }
  return kept.empty() ? out : out + "?" + kept;
}

std::string StripCookie(std::string_view cookies, std::string_view name, std::string& value) {
  std::string kept;
  while (!cookies.empty()) {
    size_t semi = std::min(cookies.find(';'), cookies.size());
    std::string_view pair = cookies.substr(0, semi);
    cookies.remove_prefix(std::min(semi + 1, cookies.size()));
    while (!pair.empty() && pair.front() == ' ') pair.remove_prefix(1);
    if (pair.empty()) continue;
    if (pair.substr(0, pair.find('=')) == name) {
      value = std::string(pair.size() > name.size() ? pair.substr(name.size() + 1) : std::string_view());
      continue;
    }
    kept += (kept.empty() ? "" : "; ") + std::string(pair);
  }
  return kept;
}

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
        upstream_(proxy_->io_) {}

  ~PortConnection() override {
    if (counted_) {
      auto it = proxy_->open_.find({route_.sandbox_id, route_.port});
      if (it != proxy_->open_.end() && --it->second == 0) proxy_->open_.erase(it);
    }
    core_->Unregister(id_);
  }

  void Start() {
    net::co_spawn(proxy_->io_, Serve(shared_from_this()), net::detached);
  }

  void Shutdown() override { Close(); }

  void Recheck(const std::function<bool(const AuthContext&)>& which) override {
    if (!by_token_ || closed_ || !which(auth_)) return;
    auto verified = core_->Authenticate(token_, peer_, "");
    if (verified.ok() && verified->iss == auth_.iss && verified->sub == auth_.sub) return;
    Close();
  }

 private:
  void Close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ignored;
    client_.socket().shutdown(net::socket_base::shutdown_both, ignored);
    client_.close();
    upstream_.socket().shutdown(net::socket_base::shutdown_both, ignored);
    upstream_.close();
  }

  std::chrono::seconds Idle() const { return std::chrono::seconds(proxy_->config_.idle_timeout_s); }

  // The connection ends when the app's side does (or a refusal is written).
  static awaitable<void> Serve(std::shared_ptr<PortConnection> self) {
    co_await self->Run();
    self->Close();
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

  awaitable<void> NotFound() { co_await Answer(404, "not_found", "no sandbox " + route_.sandbox_id + " for this user"); }

  // Who may: sets by_token_/cookie_ and returns true, or false for the 404.
  bool Allowed(const supervisor::SandboxManager::PortTarget& target, std::map<std::string, std::string>& params,
               std::string& cookie_value) {
    if (target.port.is_public) return true;
    auto authorization = header_.find(http::field::authorization);
    std::string token = authorization == header_.end() ? std::string() : BearerTokenOf(SV(authorization->value()));
    bool token_in_header = !token.empty();
    if (token.empty()) token = params["token"];
    if (!token.empty()) {
      auto auth = core_->Authenticate(token, peer_, request_id_);
      if (auth.ok() && auth->iss == target.sandbox.iss && auth->sub == target.sandbox.sub) {
        by_token_ = true;
        strip_authorization_ = token_in_header;
        token_ = token;
        auth_ = std::move(*auth);
        return true;
      }
    }
    if (!params["corral_sig"].empty()) {
      std::optional<int64_t> exp = Seconds(params["corral_exp"]);
      if (!exp || !proxy_->manager_.VerifyPortSignature(target, *exp, params["corral_sig"])) return false;
      set_cookie_ = std::to_string(*exp) + "." + params["corral_sig"];
      cookie_exp_ = *exp;
      return true;
    }
    size_t dot = cookie_value.find('.');
    std::optional<int64_t> exp = Seconds(std::string_view(cookie_value).substr(0, dot));
    return dot != std::string::npos && exp &&
           proxy_->manager_.VerifyPortSignature(target, *exp, std::string_view(cookie_value).substr(dot + 1));
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
      head += std::string(field.name_string()) + ": " + std::string(field.value()) + "\r\n";
    }
    head += "Host: " + (route_.by_host ? original_host : "localhost:" + std::to_string(route_.port)) + "\r\n";
    if (!cookies.empty()) head += "Cookie: " + cookies + "\r\n";
    const std::string address = peer_.name.substr(0, peer_.name.rfind(':'));
    head += "X-Forwarded-For: " + address + "\r\nX-Forwarded-Host: " + original_host + "\r\n";
    if (!route_.by_host) head += "X-Forwarded-Prefix: " + route_.prefix + "\r\n";
    if (!upgrade) head += "Connection: close\r\n";
    return head + "\r\n";
  }

  std::string CookieHeader() const {
    std::string path = route_.by_host ? "/" : route_.prefix + "/";
    auto proto = header_.find("X-Forwarded-Proto");
    const bool secure = proto != header_.end() && IEquals(SV(proto->value()), "https");
    return std::string(kCookie) + "=" + set_cookie_ + "; Path=" + path + "; Max-Age=" +
           std::to_string(std::max<int64_t>(0, cookie_exp_ - Now())) + "; HttpOnly; SameSite=Lax" +
           (secure ? "; Secure" : "");
  }

  awaitable<void> Run() {
    auto& manager = proxy_->manager_;
    std::map<std::string, std::string> params;
    const std::string target = StripCorralParams(route_.rest, params);
    std::string cookie_value;
    auto cookie = header_.find(http::field::cookie);
    const std::string cookies =
        cookie == header_.end() ? std::string() : StripCookie(SV(cookie->value()), kCookie, cookie_value);
    // No such sandbox or port, another node's sandbox, or one not running (its ports close
    // when it stops): the same 404 as for a caller who may not.
    auto found = manager.FindPort(route_.sandbox_id, route_.port);
    if (!found.ok()) co_return co_await NotFound();
    if (!Allowed(*found, params, cookie_value)) co_return co_await NotFound();
    auto& count = proxy_->open_[{route_.sandbox_id, route_.port}];
    if (count >= proxy_->config_.max_connections_per_port) {
      if (count == 0) proxy_->open_.erase({route_.sandbox_id, route_.port});
      LogWarn(kLog, "port connections at the limit", {{"sandbox", route_.sandbox_id}, {"port", std::to_string(route_.port)}});
      co_return co_await Answer(503, "unavailable", "too many connections to this port");
    }
    ++count;
    counted_ = true;
    auto socket = manager.PortSocket(route_.sandbox_id);
    if (!socket.ok()) co_return co_await Answer(502, "bad_gateway", "the sandbox's port cannot be reached");
    beast::error_code ec;
    upstream_.socket().assign(tcp::v4(), socket->release(), ec);
    if (!ec) {
      upstream_.expires_after(kConnectTimeout);
      co_await upstream_.async_connect(tcp::endpoint(net::ip::address_v4::loopback(), static_cast<uint16_t>(route_.port)),
                                       net::redirect_error(use_awaitable, ec));
    }
    if (ec) {
      co_return co_await Answer(502, "bad_gateway",
                                "nothing answers on port " + std::to_string(route_.port) + " in the sandbox");
    }
    LogInfo(kLog, "port connection",
            {{"sandbox", route_.sandbox_id}, {"port", std::to_string(route_.port)}, {"remote", peer_.name},
             {"request_id", request_id_}, {"by", by_token_ ? "token" : found->port.is_public ? "public" : "signature"}});
    const std::string head = Head(target, cookies);
    upstream_.expires_after(Idle());
    co_await net::async_write(upstream_, net::buffer(head), net::redirect_error(use_awaitable, ec));
    if (!ec && buffer_.size() > 0) {
      co_await net::async_write(upstream_, buffer_.data(), net::redirect_error(use_awaitable, ec));
      buffer_.consume(buffer_.size());
    }
    if (ec) co_return;
    std::string added;
    if (!set_cookie_.empty()) added += "Set-Cookie: " + CookieHeader() + "\r\n";
    if (!route_.by_host) added += kPathFormPolicy;
    if (!added.empty() && !co_await PassResponseHead(added)) co_return;
    // Both ways at once; the app's side ending ends the connection (its answer is complete).
    net::co_spawn(proxy_->io_, PumpUp(shared_from_this()), net::detached);
    co_await Pump(upstream_, client_);
  }

  // Reads the app's response head and passes it on with `added` header lines after the status
  // line: corral's cookie (a first request with a signature: the app's subresources and
  // WebSocket then carry it), the path form's policy.
  awaitable<bool> PassResponseHead(const std::string& added) {
    std::string head;
    beast::error_code ec;
    std::vector<char> chunk(kChunk);
    size_t end = std::string::npos;
    while (end == std::string::npos && head.size() < kMaxResponseHead) {
      upstream_.expires_after(Idle());
      size_t n = co_await upstream_.async_read_some(net::buffer(chunk), net::redirect_error(use_awaitable, ec));
      if (ec || n == 0) break;
      head.append(chunk.data(), n);
      end = head.find("\r\n\r\n");
    }
    size_t line = head.find("\r\n");
    if (line != std::string::npos && end != std::string::npos) {
      head.insert(line + 2, added);
    }
    if (head.empty()) co_return false;
    client_.expires_after(Idle());
    co_await net::async_write(client_, net::buffer(head), net::redirect_error(use_awaitable, ec));
    co_return !ec;
  }

  template <typename From, typename To>
  awaitable<void> Pump(From& from, To& to) {
    std::vector<char> chunk(kChunk);
    beast::error_code ec;
    while (!closed_) {
      from.expires_after(Idle());
      const size_t n = co_await from.async_read_some(net::buffer(chunk), net::redirect_error(use_awaitable, ec));
      if (ec || n == 0) break;
      to.expires_after(Idle());
      co_await net::async_write(to, net::buffer(chunk.data(), n), net::redirect_error(use_awaitable, ec));
      if (ec) break;
    }
    // Pass the end on (a half close), so the other direction can finish what it sends; a reset
    // or a timeout ends the whole connection.
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
  bool counted_ = false;
  bool closed_ = false;
  bool by_token_ = false;
  bool strip_authorization_ = false;
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

size_t PortProxy::connections(const std::string& sandbox_id, int64_t port) const {
  auto it = open_.find({sandbox_id, port});
  return it == open_.end() ? 0 : it->second;
}

}  // namespace corral::api::internal

namespace corral::api {

void ServePorts(Server& server, boost::asio::io_context& io, supervisor::SandboxManager& manager,
                const supervisor::DaemonConfig& config) {
  server.SetConnectionTaker(std::make_shared<internal::PortProxy>(io, manager, config.ports));
}

}  // namespace corral::api
