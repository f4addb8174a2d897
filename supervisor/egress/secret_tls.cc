#include "supervisor/egress/secret_tls.h"

#include <arpa/inet.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <strings.h>

#include <algorithm>
#include <chrono>

#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "supervisor/proxy_names.h"

// GCC 12 takes asio's awaitable frames, which come from their own operator new and go to their
// own operator delete, for a mismatch once these coroutines are inlined into one another (a
// false positive: GCC bug 109224).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace corral::supervisor {
namespace {

using Clock = std::chrono::steady_clock;
using TlsStream = asio::ssl::stream<beast::tcp_stream&>;

constexpr size_t kMaxHeadBytes = 64 * 1024;
constexpr size_t kTlsChunk = 64 * 1024;
constexpr auto kHandshakeTimeout = std::chrono::seconds(15);
constexpr auto kCloseTimeout = std::chrono::seconds(2);

bool EqualNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

std::string WithoutTrailingDot(std::string_view host) {
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  return std::string(host);
}

// Whether a Host header's value names host (and port, if it has one).
bool HostHeaderNames(std::string_view value, std::string_view host, uint16_t port) {
  std::string_view name = value;
  std::string_view port_text;
  if (!name.empty() && name.front() == '[') {
    const size_t close = name.find(']');
    if (close == std::string_view::npos) return false;
    port_text = name.substr(close + 1);
    name = name.substr(1, close - 1);
    if (!port_text.empty() && port_text.front() != ':') return false;
    if (!port_text.empty()) port_text.remove_prefix(1);
  } else if (const size_t colon = name.find(':'); colon != std::string_view::npos) {
    port_text = name.substr(colon + 1);
    name = name.substr(0, colon);
  }
  if (!port_text.empty() && port_text != std::to_string(port)) return false;
  return EqualNoCase(WithoutTrailingDot(name), WithoutTrailingDot(host));
}

void ReplaceAll(std::string& text, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

// The head as it goes to the server: the request line, every field (hop-by-hop ones but an
// upgrade's dropped), and Connection: close unless it is an upgrade.
std::string SerializeHead(const http::request<http::empty_body>& request) {
  const bool upgrade = request.find(http::field::upgrade) != request.end();
  std::string head = std::string(request.method_string()) + " " + std::string(request.target()) +
                     (request.version() == 10 ? " HTTP/1.0\r\n" : " HTTP/1.1\r\n");
  for (const auto& field : request) {
    const std::string name(field.name_string());
    const bool hop = EqualNoCase(name, "Proxy-Connection") || EqualNoCase(name, "Proxy-Authorization") ||
                     EqualNoCase(name, "Keep-Alive") || (!upgrade && EqualNoCase(name, "Connection"));
    if (hop) continue;
    head += name + ": " + std::string(field.value()) + "\r\n";
  }
  if (!upgrade) head += "Connection: close\r\n";
  return head + "\r\n";
}

// Set when a pump ends; its timer is cancelled then, which wakes whoever waits on it.
struct Finished {
  explicit Finished(const asio::any_io_executor& executor) : timer(executor, Clock::time_point::max()) {}
  bool finished = false;
  asio::steady_timer timer;
};

bool EndOfStream(const boost::system::error_code& ec) {
  return ec == asio::error::eof || ec == asio::ssl::error::stream_truncated;
}

// Relays `from` to `to` until `from` ends (or either fails), through the hooks.
// `end_both` (when set and true as `from` ends): the whole connection ends with it.
awaitable<void> Pump(TlsStream& from, TlsStream& to, bool up, SecretTlsHooks& hooks, uint64_t idle_timeout_s,
                     std::shared_ptr<Finished> done, std::shared_ptr<bool> end_both) {
  struct Signal {
    std::shared_ptr<Finished> done;
    ~Signal() {
      if (!done) return;
      done->finished = true;
      done->timer.cancel();
    }
  } signal{done};
  std::vector<char> chunk(kTlsChunk);
  boost::system::error_code ec;
  for (;;) {
    from.next_layer().expires_after(std::chrono::seconds(idle_timeout_s));
    const size_t n = co_await from.async_read_some(asio::buffer(chunk), asio::redirect_error(use_awaitable, ec));
    if (ec || n == 0) break;
    if (!co_await hooks.relayed(up, n)) break;
    to.next_layer().expires_after(std::chrono::seconds(idle_timeout_s));
    co_await asio::async_write(to, asio::buffer(chunk.data(), n), asio::redirect_error(use_awaitable, ec));
    if (ec) break;
  }
  if ((ec && !EndOfStream(ec)) || (end_both && *end_both)) {
    // A reset or a timeout, or the sandbox gone once it had its answer: the whole connection is over.
    boost::system::error_code ignored;
    from.next_layer().socket().shutdown(tcp::socket::shutdown_both, ignored);
    to.next_layer().socket().shutdown(tcp::socket::shutdown_both, ignored);
  }
}

// The server's answer head(s) to the sandbox: an interim 1xx as it is, then the final head with
// `Connection: close` (a 101's as it is: the connection is the upgrade's from then on), then what
// came with it. False when the server's side ended or failed first.
awaitable<bool> ForwardResponseHead(TlsStream& server, TlsStream& sandbox, SecretTlsHooks& hooks,
                                    uint64_t idle_timeout_s) {
  beast::flat_buffer buffer;
  boost::system::error_code ec;
  for (;;) {
    http::response_parser<http::empty_body> parser;
    parser.header_limit(kMaxHeadBytes);
    parser.eager(false);
    server.next_layer().expires_after(std::chrono::seconds(idle_timeout_s));
    co_await http::async_read_header(server, buffer, parser, asio::redirect_error(use_awaitable, ec));
    if (ec) co_return false;
    const http::response<http::empty_body>& response = parser.get();
    const unsigned status = response.result_int();
    const bool interim = status >= 100 && status < 200 && status != 101;
    std::string head = std::string(response.version() == 10 ? "HTTP/1.0 " : "HTTP/1.1 ") + std::to_string(status) +
                       " " + std::string(response.reason()) + "\r\n";
    for (const auto& field : response) {
      const std::string name(field.name_string());
      if (!interim && status != 101 && (EqualNoCase(name, "Connection") || EqualNoCase(name, "Keep-Alive"))) continue;
      head += name + ": " + std::string(field.value()) + "\r\n";
    }
    if (!interim && status != 101) head += "Connection: close\r\n";
    head += "\r\n";
    if (!co_await hooks.relayed(false, head.size())) co_return false;
    sandbox.next_layer().expires_after(std::chrono::seconds(idle_timeout_s));
    co_await asio::async_write(sandbox, asio::buffer(head), asio::redirect_error(use_awaitable, ec));
    if (ec) co_return false;
    if (interim) continue;
    if (buffer.size() > 0) {
      if (!co_await hooks.relayed(false, buffer.size())) co_return false;
      co_await asio::async_write(sandbox, buffer.data(), asio::redirect_error(use_awaitable, ec));
      if (ec) co_return false;
    }
    co_return true;
  }
}

// TLS with the server, its certificate verified for `host` (a name, with SNI, or an address):
// "" or why not.
awaitable<std::string> VerifiedHandshake(TlsStream& server, const std::string& host, uint16_t port) {
  SSL* ssl = server.native_handle();
  unsigned char address[16];
  const bool literal = inet_pton(AF_INET, host.c_str(), address) == 1 || inet_pton(AF_INET6, host.c_str(), address) == 1;
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  const bool named = literal ? X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) == 1
                             : (SSL_set_tlsext_host_name(ssl, host.c_str()) == 1 &&
                                X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size()) == 1);
  if (!named) co_return "TLS set-up for " + host + " failed";
  boost::system::error_code ec;
  server.next_layer().expires_after(kHandshakeTimeout);
  co_await server.async_handshake(asio::ssl::stream_base::client, asio::redirect_error(use_awaitable, ec));
  if (!ec) co_return std::string();
  const long verify = SSL_get_verify_result(ssl);
  co_return "TLS with " + host + " port " + std::to_string(port) + " failed: " +
      (verify != X509_V_OK ? std::string("its certificate does not verify (") + X509_verify_cert_error_string(verify) + ")"
                           : ec.message());
}

}  // namespace

bool SecretsBoundTo(const std::vector<SandboxSecret>& secrets, std::string_view host, uint16_t port) {
  return std::any_of(secrets.begin(), secrets.end(), [&](const SandboxSecret& secret) {
    return std::any_of(secret.bindings.begin(), secret.bindings.end(),
                       [&](const SecretBinding& binding) { return BindingCovers(binding, host, port); });
  });
}

std::vector<std::string> InjectSecrets(http::request<http::empty_body>& request, std::string_view host, uint16_t port,
                                       const std::vector<SandboxSecret>& secrets) {
  const std::string target(request.target());
  if (target.empty() || target[0] != '/') return {};
  if (request.count(http::field::host) != 1) return {};
  const auto host_header = request[http::field::host];
  if (!HostHeaderNames(std::string_view(host_header.data(), host_header.size()), host, port)) return {};
  const std::string method(request.method_string());
  std::vector<const SandboxSecret*> matched;
  std::vector<std::pair<std::string, std::string>> headers;
  for (const SandboxSecret& secret : secrets) {
    for (const SecretBinding& binding : secret.bindings) {
      if (!BindingMatches(binding, host, port, method, target)) continue;
      matched.push_back(&secret);
      headers.push_back(BindingHeader(binding, secret.value));
      break;
    }
  }
  if (matched.empty()) return {};
  // Placeholders first, in every field's value (the fields written again in their order: a
  // name may come more than once); then the bindings' own headers over them.
  std::vector<std::pair<std::string, std::string>> fields;
  bool replaced = false;
  for (const auto& field : request) {
    std::string value(field.value());
    const size_t before = value.size();
    for (const SandboxSecret* secret : matched) ReplaceAll(value, secret->placeholder, secret->value);
    replaced = replaced || value.size() != before || value != std::string_view(field.value().data(), field.value().size());
    fields.emplace_back(std::string(field.name_string()), std::move(value));
  }
  if (replaced) {
    for (const auto& field : fields) request.erase(field.first);
    for (const auto& [name, value] : fields) request.insert(name, value);
  }
  for (const auto& [name, value] : headers) request.set(name, value);
  std::vector<std::string> names;
  for (const SandboxSecret* secret : matched) names.push_back(secret->name);
  std::sort(names.begin(), names.end());
  return names;
}

StatusOr<std::unique_ptr<asio::ssl::context>> UpstreamTlsContext(const std::string& ca_file) {
  auto context = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(context->native_handle(), TLS1_2_VERSION);
  boost::system::error_code ec;
  context->set_default_verify_paths(ec);
  if (ec) return Status::Error("secrets: the system's CAs: " + ec.message(), EIO);
  if (!ca_file.empty()) {
    context->load_verify_file(ca_file, ec);
    if (ec) return Status::Error("secrets.ca_file: " + ca_file + ": " + ec.message(), EINVAL);
  }
  context->set_verify_mode(asio::ssl::verify_peer);
  return context;
}

awaitable<SecretTlsResult> InterceptWithSecrets(beast::tcp_stream& client, beast::flat_buffer& buffer,
                                                beast::tcp_stream& upstream, std::string host, uint16_t port,
                                                std::shared_ptr<asio::ssl::context> server_tls,
                                                asio::ssl::context& upstream_tls, std::vector<SandboxSecret> secrets,
                                                uint64_t idle_timeout_s, SecretTlsHooks hooks) {
  SecretTlsResult result;
  boost::system::error_code ec;
  // 1. The server, verified for the host.
  TlsStream server(upstream, upstream_tls);
  result.upstream_error = co_await VerifiedHandshake(server, host, port);
  if (!result.upstream_error.empty()) co_return result;
  // 2. The sandbox's side, with the CA's certificate for the host.
  client.expires_after(kHandshakeTimeout);
  co_await asio::async_write(client, asio::buffer(hooks.established), asio::redirect_error(use_awaitable, ec));
  if (ec) {
    result.client_error = "the sandbox went away";
    co_return result;
  }
  TlsStream sandbox(client, *server_tls);
  client.expires_after(kHandshakeTimeout);
  // What the sandbox sent after its CONNECT (its ClientHello, when it did not wait) goes first.
  const size_t early = co_await sandbox.async_handshake(asio::ssl::stream_base::server, buffer.data(),
                                                         asio::redirect_error(use_awaitable, ec));
  buffer.consume(early);
  if (ec) {
    result.client_error = "the sandbox's TLS handshake failed (does it trust corral's CA?): " + ec.message();
    co_return result;
  }
  // 3. The first request's head, rewritten.
  beast::flat_buffer head_buffer;
  http::request_parser<http::empty_body> parser;
  parser.header_limit(kMaxHeadBytes);
  parser.eager(false);
  client.expires_after(std::chrono::seconds(std::min<uint64_t>(idle_timeout_s, 60)));
  co_await http::async_read_header(sandbox, head_buffer, parser, asio::redirect_error(use_awaitable, ec));
  if (ec) {
    if (!EndOfStream(ec)) result.client_error = "the sandbox's request over TLS is not HTTP/1: " + ec.message();
    co_return result;
  }
  http::request<http::empty_body>& request = parser.get();
  const std::vector<std::string> names = InjectSecrets(request, host, port, secrets);
  for (SandboxSecret& secret : secrets) {
    std::fill(secret.value.begin(), secret.value.end(), '\0');  // not kept past the rewrite
  }
  if (!names.empty()) hooks.injected(names, std::string(request.method_string()));
  std::string head = SerializeHead(request);
  bool go_on = co_await hooks.relayed(true, head.size());
  if (go_on) {
    upstream.expires_after(std::chrono::seconds(idle_timeout_s));
    co_await asio::async_write(server, asio::buffer(head), asio::redirect_error(use_awaitable, ec));
    std::fill(head.begin(), head.end(), '\0');
    go_on = !ec;
  }
  if (go_on && head_buffer.size() > 0) {
    // The start of a body that came with the head.
    go_on = co_await hooks.relayed(true, head_buffer.size());
    if (go_on) {
      co_await asio::async_write(server, head_buffer.data(), asio::redirect_error(use_awaitable, ec));
      go_on = !ec;
    }
  }
  if (go_on) {
    auto up_done = std::make_shared<Finished>(client.get_executor());
    // Once the answer's head has gone, the sandbox closing its side ends the connection: a server
    // that keeps it open (whatever Connection: close said) is not waited for.
    auto answered_head = std::make_shared<bool>(false);
    asio::co_spawn(client.get_executor(),
                   Pump(sandbox, server, /*up=*/true, hooks, idle_timeout_s, up_done, answered_head), asio::detached);
    // The answer's head says the connection closes too (a server that keeps it open would
    // otherwise let the client reuse it for a request the proxy never reads); then the rest.
    const bool answered = co_await ForwardResponseHead(server, sandbox, hooks, idle_timeout_s);
    *answered_head = answered;  // (a sandbox side that ended before the answer: the answer still goes)
    std::shared_ptr<Finished> no_one_waits;  // named: no temporary among a co_await's arguments (GCC 12)
    std::shared_ptr<bool> not_both;
    if (answered) co_await Pump(server, sandbox, /*up=*/false, hooks, idle_timeout_s, no_one_waits, not_both);
    // The server is done: tell the sandbox (close_notify, briefly), and end its side.
    client.expires_after(kCloseTimeout);
    co_await sandbox.async_shutdown(asio::redirect_error(use_awaitable, ec));
    boost::system::error_code ignored;
    client.socket().shutdown(tcp::socket::shutdown_both, ignored);
    if (!up_done->finished) co_await up_done->timer.async_wait(asio::redirect_error(use_awaitable, ec));
  }
  co_return result;
}

}  // namespace corral::supervisor
