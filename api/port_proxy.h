// Preview URLs (docs/PROTOCOL.md "Ports"): HTTP/1.1 requests and WebSocket upgrades to a port a
// sandbox shows, passed through to what listens on 127.0.0.1:PORT in the sandbox's own network.
//
// Two forms, on the API's own TCP listener:
//   host  Host: PORT-sb-XXXX.<ports.domain> (or PORT-sb_XXXX.): the app sees the Host as sent,
//         the target as sent (corral's query parameters taken out).
//   path  /v1/sandboxes/{id}/ports/{port}/REST: the app sees /REST and Host: localhost:PORT, and
//         X-Forwarded-Prefix: the prefix it is served under. POST .../ports/{port}/signed-url is
//         the API's.
// Who may: the owner's token (Authorization: Bearer, or ?token=), a signature (?corral_sig=&
// corral_exp=, port_urls.h), the cookie a signature sets (corral_port, HttpOnly, SameSite=Lax,
// scoped to the host or the path prefix) or nobody for a public port. Everything else, and a port
// or sandbox that does not exist, is the same 404. The token, corral's parameters and cookie never
// reach the app. A request is passed on with Connection: close and its bytes spliced both ways
// until either side ends (a WebSocket's too); at most ports.max_connections_per_port at once,
// each ended after ports.idle_timeout without a byte.
//
// The socket is made in the sandbox's network namespace by a short-lived thread of the daemon
// (SandboxManager::PortSocket) and connected from the event loop; nothing runs in the sandbox.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "api/port_http.h"
#include "api/server_core.h"
#include "supervisor/config.h"
#include "supervisor/sandboxes/sandbox_manager.h"

namespace corral::api::internal {

class PortConnection;

class PortProxy : public ConnectionTaker, public std::enable_shared_from_this<PortProxy> {
 public:
  PortProxy(net::io_context& io, supervisor::SandboxManager& manager, supervisor::PortsConfig config);
  bool Take(Takeover& takeover) override;

  // Ends the open connections to a port that closed or stopped being public (`port` 0: every
  // port of the sandbox).
  void CloseConnections(const std::string& sandbox_id, int64_t port);

 private:
  friend class PortConnection;
  net::io_context& io_;
  supervisor::SandboxManager& manager_;
  const supervisor::PortsConfig config_;
  // Open connections by (sandbox, port), at most ports.max_connections_per_port each; a
  // connection takes itself out when it ends.
  std::map<std::pair<std::string, int64_t>, std::set<PortConnection*>> open_;
};

}  // namespace corral::api::internal
