// The egress proxy's own certificate authority (issue 21): for a host a sandbox's secret is bound
// to, the proxy ends the sandbox's TLS itself, with a certificate for that host signed here, so
// that it can add the secret to the request before it goes on, over a TLS connection of its own
// that verifies the real server (egress/secret_tls.h).
//
// The CA is an EC P-256 key and a self-signed certificate (CA:TRUE, pathlen 0, keyCertSign only,
// ten years), kept in <dir>/ca.key (0600) and <dir>/ca.crt, made at the first start and read at
// every later one, so sandboxes that trust it keep trusting it across restarts. Only the
// sandboxes that name secrets have it in their trust store (sandboxes/trust_bundle.h); the
// host's trust store is never touched. Leaf certificates (one key for all, made at start; the
// host as the only subjectAltName, DNS or IP; serverAuth; valid from an hour ago for 7 days) are
// made on demand and kept, each in a TLS server context, up to kMaxCachedHosts hosts.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <boost/asio/ssl/context.hpp>

#include "common/status.h"

namespace corral::supervisor {

class InterceptCa {
 public:
  static constexpr size_t kMaxCachedHosts = 1024;

  // Reads the CA from `dir`, or makes it there (the directory made 0700 if missing). `label` goes
  // into its subject ("corral egress CA (<label>)"). A file that is there but does not load is an
  // error, never replaced.
  static StatusOr<std::unique_ptr<InterceptCa>> LoadOrCreate(const std::string& dir, const std::string& label);
  ~InterceptCa();

  // The CA's certificate, PEM: what a sandbox's trust store gets.
  const std::string& certificate_pem() const { return certificate_pem_; }

  // A TLS server context presenting a certificate for `host` (a DNS name, or an IPv4/IPv6
  // literal without brackets). Thread-safe.
  StatusOr<std::shared_ptr<boost::asio::ssl::context>> ServerContext(const std::string& host);

  struct Keys;

 private:
  InterceptCa(std::unique_ptr<Keys> keys, std::string certificate_pem);

  std::unique_ptr<Keys> keys_;
  std::string certificate_pem_;
  std::mutex mu_;
  struct Cached {
    std::shared_ptr<boost::asio::ssl::context> context;
    std::chrono::system_clock::time_point made;
  };
  std::map<std::string, Cached> cache_;
};

}  // namespace corral::supervisor
