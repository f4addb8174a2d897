#include "api/peer_http.h"

#include <cerrno>
#include <memory>
#include <optional>
#include <set>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "api/http_text.h"
#include "api/server_core.h"
#include "common/log.h"
#include "common/unix_time.h"

namespace corral::api {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

// Headers that are the connection's, not the request's (RFC 9110 7.6.1), or that each hop sets
// itself.
bool HopByHop(std::string_view lower) {
  static const std::set<std::string, std::less<>> kNames = {
      "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
      "host", "content-length", "expect", "x-corral-hop"};
  return kNames.count(lower) != 0;
}

// What the answering node's server sets on every answer, and the node that forwards sets again.
bool ServerOwned(std::string_view lower) {
  return HopByHop(lower) || lower == "content-type" || lower == "server" || lower == "date" ||
         lower == "x-request-id" || lower.substr(0, 28) == "access-control-allow-origin" ||
         lower == "vary" || lower == "x-corral-node";
}

HttpResponse Unreachable(const std::string& node, const std::string& address, std::string_view why) {
  HttpResponse response = internal::ErrorResponse(
      503, "unavailable", "node " + node + " (" + address + ") did not answer: " + std::string(why));
  response.headers.emplace_back("Retry-After", "1");
  return response;
}

class Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(net::io_context& io, std::string node, std::string address, Responder respond)
      : resolver_(io), stream_(io), node_(std::move(node)), address_(std::move(address)),
        respond_(std::move(respond)) {}

  void Start(http::request<http::string_body> request, const std::string& host, const std::string& port) {
    request_ = std::move(request);
    stream_.expires_after(PeerHttp::kConnectTimeout);
    resolver_.async_resolve(host, port, [self = shared_from_this()](beast::error_code ec, tcp::resolver::results_type r) {
      if (ec) return self->Fail("resolve", ec);
      self->stream_.async_connect(r, [self](beast::error_code connect_ec, const tcp::endpoint&) {
        if (connect_ec) return self->Fail("connect", connect_ec);
        beast::error_code ignored;
        self->stream_.socket().set_option(tcp::no_delay(true), ignored);
        self->Send();
      });
    });
  }

 private:
  void Send() {
    stream_.expires_after(PeerHttp::kAnswerTimeout);
    http::async_write(stream_, request_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->Fail("write", ec);
      self->parser_.body_limit(PeerHttp::kMaxAnswerBytes);
      http::async_read(self->stream_, self->buffer_, self->parser_, [self](beast::error_code read_ec, size_t) {
        if (read_ec) return self->Fail("read", read_ec);
        self->Answer();
      });
    });
  }

  void Answer() {
    http::response<http::string_body> answer = parser_.release();
    HttpResponse response;
    response.status = static_cast<int>(answer.result_int());
    auto type = answer.find(http::field::content_type);
    response.content_type = type == answer.end() ? std::string() : std::string(type->value());
    for (const auto& field : answer) {
      const std::string name(field.name_string());
      if (!ServerOwned(ToLower(name))) response.headers.emplace_back(name, std::string(field.value()));
    }
    response.headers.emplace_back("X-Corral-Node", node_);
    response.body = std::move(answer.body());
    Done(std::move(response));
  }

  void Fail(std::string_view step, const beast::error_code& ec) {
    std::string why = std::string(step) + ": " + ec.message();
    if (ec == beast::error::timeout) why = std::string(step) + ": timed out";
    if (ec == http::error::body_limit) why = "its answer is larger than a forwarded answer may be";
    LogWarn("fleet", "forwarding failed", {{"node", node_}, {"address", address_}, {"error", why}});
    Done(Unreachable(node_, address_, why));
  }

  void Done(HttpResponse response) {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    if (respond_) {
      Responder respond = std::move(respond_);
      respond_ = nullptr;
      respond(std::move(response));
    }
  }

  tcp::resolver resolver_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> request_;
  http::response_parser<http::string_body> parser_;
  std::string node_;
  std::string address_;
  Responder respond_;
};

}  // namespace

StatusOr<std::pair<std::string, std::string>> SplitHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return Status::Error("expected host:port: '" + address + "'", EINVAL);
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return std::make_pair(host, address.substr(colon + 1));
}

void PeerHttp::Forward(const std::string& node, const std::string& address, const HttpRequest& request,
                       Responder respond) {
  auto host_port = SplitHostPort(address);
  if (!host_port.ok()) return respond(Unreachable(node, address, host_port.status().message()));
  http::request<http::string_body> out;
  out.version(11);
  out.method_string(request.method);
  out.target(request.target);
  for (const auto& [name, value] : request.headers) {
    if (!HopByHop(name)) out.set(name, value);
  }
  out.set(http::field::host, address);
  out.set(http::field::connection, "close");
  auto authorization = request.headers.find("authorization");
  out.set(kHopHeader, signer_.Sign(request.method, request.target,
                                   authorization == request.headers.end() ? "" : authorization->second,
                                   UnixNowMs()));
  out.body() = request.body;
  out.prepare_payload();
  auto exchange = std::make_shared<Exchange>(io_, node, address, std::move(respond));
  exchange->Start(std::move(out), host_port->first, host_port->second);
}

}  // namespace corral::api
