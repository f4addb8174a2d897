// Secrets at the egress proxy (issue 21; docs/PROTOCOL.md "Secrets"): a CONNECT to a host:port
// that one of the sandbox's secrets is bound to is not an opaque tunnel. The proxy
//   1. makes its own TLS connection to the server, verifying its certificate for the host asked
//      (the system's CAs and secrets.ca_file; SNI the host; TLS 1.2 at least), and refuses the
//      CONNECT (502, "tls") when that fails, so the sandbox never talks to an unverified server
//      through it;
//   2. answers the CONNECT and ends the sandbox's TLS with a certificate for the host from its own
//      CA (intercept_ca.h), which the sandbox's trust store holds (sandboxes/trust_bundle.h);
//   3. reads the first request's head and rewrites it (InjectSecrets): each secret with a
//      binding matching it is added (its header set, its placeholder replaced by its value in
//      the other headers), the connection made to close after this request (so each request is
//      decided: the client opens a new one for the next; the answer's head says so to the client
//      too, whatever the server said), and relays everything after it both ways as it is.
// Every other CONNECT stays an opaque tunnel, and plain http:// requests never get a secret.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>  // before asio's awaitable.hpp, which uses std::exchange without it
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>

#include "supervisor/secrets/secret_vault.h"

namespace corral::supervisor {

// Whether any of the secrets is bound to host:port (whatever the request): the CONNECT is then
// intercepted.
bool SecretsBoundTo(const std::vector<SandboxSecret>& secrets, std::string_view host, uint16_t port);

// Rewrites the head of a request the sandbox sends over TLS to host:port (CONNECT's): for each
// secret with a binding that matches its method and path, its placeholder in any header value is
// replaced by its value and the binding's header is set (any header of that name replaced).
// Nothing is added unless the target is a path ("/..."), the request has one Host header and
// it names `host` (and `port`, when it has one). Returns the names of the secrets added, sorted.
std::vector<std::string> InjectSecrets(boost::beast::http::request<boost::beast::http::empty_body>& request,
                                       std::string_view host, uint16_t port,
                                       const std::vector<SandboxSecret>& secrets);

// What the proxy lends the interception.
struct SecretTlsHooks {
  // Each chunk relayed, before it is written on: counts it and waits for the sandbox's bandwidth.
  // False: stop (the sandbox went away).
  std::function<boost::asio::awaitable<bool>(bool up, size_t bytes)> relayed;
  // The secrets added to a request (names only), with its method.
  std::function<void(const std::vector<std::string>& names, const std::string& method)> injected;
  // The CONNECT's answer, written to the sandbox's connection (in clear) once the server is verified.
  std::string established = "HTTP/1.1 200 Connection established\r\n\r\n";
};

struct SecretTlsResult {
  // Set when the server's TLS failed: nothing was answered to the sandbox yet, the proxy refuses.
  std::string upstream_error;
  // Set when the sandbox's side failed after the answer (its TLS handshake, a head that is not
  // HTTP): the record's message.
  std::string client_error;
};

// Steps 1-3 on a connected `upstream`; `buffer` holds what the sandbox sent after its CONNECT.
boost::asio::awaitable<SecretTlsResult> InterceptWithSecrets(
    boost::beast::tcp_stream& client, boost::beast::flat_buffer& buffer, boost::beast::tcp_stream& upstream,
    std::string host, uint16_t port, std::shared_ptr<boost::asio::ssl::context> server_tls,
    boost::asio::ssl::context& upstream_tls, std::vector<SandboxSecret> secrets, uint64_t idle_timeout_s,
    SecretTlsHooks hooks);

// A TLS client context for the bound hosts: the system's CAs, and `ca_file`'s (PEM) when set.
StatusOr<std::unique_ptr<boost::asio::ssl::context>> UpstreamTlsContext(const std::string& ca_file);

}  // namespace corral::supervisor
