// relay.upstream, the model API the relay forwards to: parsed once by the configuration (so a
// bad URL is an error at start, naming the key) and again by the relay.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace corral::supervisor {

// The upstream, parsed. Errors name what is wrong ("plain http only to a loopback host").
struct UpstreamUrl {
  bool tls = true;
  std::string host;
  std::string port;
};
// https://host[:port] (any host) or http://host[:port] (loopback hosts only, for tests); no path.
StatusOr<UpstreamUrl> ParseUpstream(std::string_view url);

}  // namespace corral::supervisor
