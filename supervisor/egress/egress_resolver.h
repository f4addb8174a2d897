// Name lookups for the egress proxy (egress_proxy.h): the system's resolver, or one DNS server
// asked with c-ares (egress.resolver). Both block: the proxy runs them on a thread pool.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "supervisor/egress/egress_policy.h"

namespace corral::supervisor {

// A resolution's addresses, or why there are none.
struct Resolved {
  std::vector<IpAddress> addresses;
  std::string error;
};

// getaddrinfo: IPv4 and IPv6 addresses, each once.
Resolved SystemResolve(const std::string& host);
// One lookup with c-ares against `server` (DNS only: not the daemon's /etc/hosts), run to its end
// on the calling thread; ares_library_init must have run.
Resolved AresResolve(const std::string& host, const ServerAddress& server, uint64_t timeout_s);

}  // namespace corral::supervisor
