// A node's HTTP client to the other nodes of its fleet (api/forwarding.h): a client's request,
// sent on as it came to the node that holds what it names, and that node's answer back.
//
// One connection per request (Connection: close), HTTP/1.1 over TCP to the node's node.address,
// on the event loop. What goes: the method, the target (path and query as the client sent them),
// the body, the client's Authorization and end-to-end headers (not the hop-by-hop ones, nor
// Host, nor a mark the client sent), and a fresh hop mark (api/hop.h). What comes back: the
// status, Content-Type, body and end-to-end headers, plus `X-Corral-Node: <node>` naming the node
// that answered. A node that cannot be reached (connect: kConnectTimeout), or answers nothing in
// kAnswerTimeout, or more than kMaxAnswerBytes, is 503 `unavailable` (with Retry-After: 1).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include <boost/asio/io_context.hpp>

#include "api/hop.h"
#include "api/server_types.h"

namespace corral::api {

class PeerHttp {
 public:
  static constexpr std::chrono::seconds kConnectTimeout{5};
  static constexpr std::chrono::seconds kAnswerTimeout{600};
  static constexpr size_t kMaxAnswerBytes = size_t{1} << 30;

  PeerHttp(boost::asio::io_context& io, HopSigner signer) : io_(io), signer_(std::move(signer)) {}

  // Calls `respond` once, on the event loop.
  void Forward(const std::string& node, const std::string& address, const HttpRequest& request, Responder respond);

  const HopSigner& signer() const { return signer_; }
  boost::asio::io_context& io() { return io_; }

 private:
  boost::asio::io_context& io_;
  HopSigner signer_;
};

// "host:port" or "[v6]:port" -> {host, port}; EINVAL otherwise.
StatusOr<std::pair<std::string, std::string>> SplitHostPort(const std::string& address);

}  // namespace corral::api
