// The trust store of a sandbox that uses secrets (issue 21; docs/PROTOCOL.md "Secrets").
//
// For the hosts a secret is bound to, the egress proxy ends the sandbox's TLS itself, with a
// certificate of the daemon's own CA (egress/intercept_ca.h), so that it can add the secret to
// the request. A sandbox that names secrets therefore trusts that CA, and only such a sandbox:
// at its start the daemon writes <run_dir>/trust/<id>.pem, its image's CA bundle (the host's for
// the host image; for an image, the top-most of its layers that has one) with the CA appended,
// and binds it read-only
//   - at /etc/ssl/certs/ca-certificates.crt, when the root has that file (Debian's and Alpine's
//     place, which OpenSSL, GnuTLS, curl and git read), never creating it, and
//   - at /run/corral/tls/ca-certificates.crt, which the variables of Environment() name for the
//     programs that keep a list of their own (Node's NODE_EXTRA_CA_CERTS, pip, requests, ...).
// The host's own trust store is never touched. The file goes when the sandbox stops.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "isolation/sandbox_spec.h"

namespace corral::supervisor {

inline constexpr char kTrustBundleInSandbox[] = "/run/corral/tls/ca-certificates.crt";
inline constexpr char kSystemTrustBundle[] = "/etc/ssl/certs/ca-certificates.crt";

class TrustBundles {
 public:
  // `ca_pem`: the certificate the sandboxes are to trust beside their image's.
  TrustBundles(std::string run_dir, std::string ca_pem) : run_dir_(std::move(run_dir)), ca_pem_(std::move(ca_pem)) {}

  // Writes sandbox `id`'s bundle; `image_layers` are its image's layer directories, top first
  // (none: the host image). Returns the binds that put it in place.
  StatusOr<std::vector<isolation::BindMount>> Prepare(const std::string& id,
                                                      const std::vector<std::string>& image_layers) const;
  void Remove(const std::string& id) const;
  // Whether sandbox `id` has its bundle (it started naming secrets and runs).
  bool Bound(const std::string& id) const;

  // SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, ... naming kTrustBundleInSandbox.
  static std::vector<std::string> Environment();

 private:
  std::string Path(const std::string& id) const;

  std::string run_dir_;
  std::string ca_pem_;
};

// The CA bundle of an image: the top-most layer (of `layers`, top first) with
// etc/ssl/certs/ca-certificates.crt, read inside that layer's directory (nothing in it can lead
// out of it); a whiteout there ends the search. "" when no layer has one; at most 8 MiB.
StatusOr<std::string> ImageTrustBundle(const std::vector<std::string>& layers);

}  // namespace corral::supervisor
