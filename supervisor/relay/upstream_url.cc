#include "supervisor/relay/upstream_url.h"

#include <arpa/inet.h>

#include <cerrno>

namespace corral::supervisor {
namespace {

bool IsLoopbackHost(std::string_view host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  struct in_addr address;
  const std::string text(host);
  return inet_pton(AF_INET, text.c_str(), &address) == 1 && (ntohl(address.s_addr) >> 24) == 127;
}

}  // namespace

StatusOr<UpstreamUrl> ParseUpstream(std::string_view url) {
  UpstreamUrl out;
  std::string_view rest;
  if (url.substr(0, 8) == "https://") {
    rest = url.substr(8);
  } else if (url.substr(0, 7) == "http://") {
    out.tls = false;
    rest = url.substr(7);
  } else {
    return Status::Error("relay.upstream: expected https://HOST[:PORT], not \"" + std::string(url) + "\"", EINVAL);
  }
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find('/') != std::string_view::npos) {
    return Status::Error("relay.upstream: a host and port only, without a path: \"" + std::string(url) + "\"", EINVAL);
  }
  size_t colon = rest.rfind(':');
  if (!rest.empty() && rest.front() == '[') {  // [v6]:port
    size_t close = rest.find(']');
    if (close == std::string_view::npos) return Status::Error("relay.upstream: bad IPv6 host", EINVAL);
    colon = rest.find(':', close);
  }
  out.host = std::string(colon == std::string_view::npos ? rest : rest.substr(0, colon));
  out.port = colon == std::string_view::npos ? (out.tls ? "443" : "80") : std::string(rest.substr(colon + 1));
  if (out.host.empty() || out.port.empty() || out.port.find_first_not_of("0123456789") != std::string::npos) {
    return Status::Error("relay.upstream: expected https://HOST[:PORT], not \"" + std::string(url) + "\"", EINVAL);
  }
  if (!out.tls && !IsLoopbackHost(out.host)) {
    return Status::Error("relay.upstream: plain http only to a loopback host (a test upstream); use https", EINVAL);
  }
  return out;
}

}  // namespace corral::supervisor
