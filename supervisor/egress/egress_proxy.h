// The egress proxy: the one way out of a sandbox to the network (DESIGN.md §3 Network).
//
// A sandbox's network namespace holds only `lo`. On its 127.0.0.1:<egress.port> the sandbox's
// init holds a listening socket that the daemon accepts on (LoopbackServices), announced inside
// as HTTP_PROXY / HTTPS_PROXY (and lower case), with NO_PROXY for the sandbox's own loopback.
// For each connection the proxy
//   1. reads one request head: `CONNECT host:port` (TLS, and anything else tunnelled), or a plain
//      HTTP request in absolute form (`GET http://host/path`), which it forwards with
//      `Connection: close` (one request per connection, so every request is decided);
//   2. decides on host and port against the sandbox's rules (egress_policy.h) as the sandbox
//      manager last handed them (SetRules), so a rule changed through the API applies from the
//      next connection;
//   3. resolves the name (the system's resolver, or the DNS server egress.resolver names, on a
//      thread pool, never on the event loop), refuses every address that is not public unless a
//      CIDR rule names it, and connects to an address it checked: there is no second lookup for
//      a rebinding DNS server to answer differently;
//   4. relays bytes both ways, within the sandbox's bandwidth (egress.bandwidth) and connection
//      (egress.max_connections) limits, closing a connection idle for egress.idle_timeout.
// A CONNECT to a host one of the sandbox's secrets is bound to is intercepted instead of
// tunnelled (secret_tls.h), and each secret added is an event of its own (type "secret": name,
// host, port, method; never the value).
// A refusal is an HTTP error whose text names the rule ("corral egress: denied: evil.test is not
// in this sandbox's egress domains [...]"), so the agent can tell why. Every decision (allowed
// with bytes each way and duration when the connection ends, denied or failed at once) is a row
// of the store's events (type "egress") for the sandbox, and with that an event on its stream.
//
// Outbound connections are made in the network namespace egress.netns when one is set (a
// namespace of the operator's with its own routes and firewall; the tests' fake internet);
// names are resolved from the daemon's own.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>

#include "common/status.h"
#include "common/unique_fd.h"
#include "supervisor/egress/egress_policy.h"
#include "supervisor/loopback_ports.h"
#include "supervisor/loopback_services.h"
#include "supervisor/secrets/secret_vault.h"
#include "supervisor/store/store.h"

namespace corral::supervisor {

class InterceptCa;

struct EgressProxyConfig {
  uint16_t port = kEgressProxyPort;
  std::string netns;                      // path of a network namespace; "" = the daemon's
  std::optional<ServerAddress> resolver;  // nullopt = the system's (getaddrinfo)
  uint64_t max_connections = 64;          // per sandbox
  uint64_t bandwidth = 0;                 // bytes per second per sandbox, both ways; 0 = no limit
  uint64_t connect_timeout_s = 10;
  uint64_t idle_timeout_s = 300;
};

// The proxy variables a command in a sandbox gets (http_proxy, HTTPS_PROXY, NO_PROXY, ...).
std::vector<std::string> EgressProxyEnvironment(uint16_t port);

// Counters the API turns into metrics; called on the event loop.
class EgressObserver {
 public:
  virtual ~EgressObserver() = default;
  // One per connection, when it is decided: `decision` is allowed, denied or failed (as in the
  // egress event). `reason` for a refusal is the event's: bad_request, connections, port,
  // address, domain, private_address, resolve, connect or tls; for an allowed connection, the kind
  // of rule that allowed it: domain or cidr.
  virtual void OnEgressDecision(std::string_view decision, std::string_view reason) = 0;
  // Bytes relayed, as they go: `up` from the sandbox, else to it (the event's bytes_up and
  // bytes_down, summed).
  virtual void OnEgressBytes(bool up, uint64_t bytes) = 0;
};

class EgressProxy : public LoopbackServices {
 public:
  // Opens egress.netns (an error names it when it cannot be).
  static StatusOr<std::unique_ptr<EgressProxy>> Create(boost::asio::io_context& io, EgressProxyConfig config,
                                                       Store& store);
  ~EgressProxy() override;

  std::vector<uint16_t> Ports() const override { return {config_.port}; }
  // Accepts on the sandbox's listener. Its connections are decided by the rules SetRules gave;
  // a sandbox given none has no rules (nothing leaves).
  void Serve(const std::string& sandbox_id, std::vector<UniqueFd> listeners) override;
  // Closes the sandbox's listener and connections, and drops its rules.
  void Forget(const std::string& sandbox_id) override;

  // A running sandbox's rules: handed by the sandbox manager before Serve (when the sandbox starts
  // or is adopted), and again each time they change; its next connection is decided by these.
  // The proxy never reads them from the store.
  void SetRules(const std::string& sandbox_id, EgressRules rules);

  // Secrets (secret_tls.h): CONNECTs to the hosts a sandbox's secrets are bound to are
  // intercepted with `ca`'s certificates and their requests given the secrets; the servers are
  // verified with `upstream_tls`. Set at start; without it, every CONNECT is a tunnel.
  void EnableSecrets(SecretVault& vault, InterceptCa& ca, std::unique_ptr<boost::asio::ssl::context> upstream_tls);
  // The secrets a running sandbox of (iss, sub) may use, by name: handed like its rules (none:
  // nothing intercepted). The proxy opens them from the vault at each CONNECT, so a secret
  // changed or deleted applies from the next connection.
  void SetSecrets(const std::string& sandbox_id, const std::string& iss, const std::string& sub,
                  std::vector<std::string> names);

  // Where decisions and bytes are reported (nullptr: nowhere). Set at start.
  void SetObserver(EgressObserver* observer);

  // For metrics and tests.
  size_t open_connections() const;
  uint64_t decisions() const;

  struct Impl;

 private:
  EgressProxy(boost::asio::io_context& io, EgressProxyConfig config, Store& store, UniqueFd netns, UniqueFd own_netns);

  EgressProxyConfig config_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace corral::supervisor
