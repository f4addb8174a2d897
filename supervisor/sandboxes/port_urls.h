// Signed port URLs (docs/PROTOCOL.md "Ports"): what lets a browser tab reach one port of one
// sandbox without a token, until a time. The signature is HMAC-SHA256, under the daemon's port
// URL key (the store's, the same on every node), over the sandbox, the port, the expiry and the
// sandbox's owner; base64url without padding. Changing any of them, or using it after `exp`,
// fails; it never stands for another port or sandbox.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace corral::supervisor {

// What a signed port URL names.
struct PortGrant {
  std::string sandbox_id;
  int64_t port = 0;
  int64_t exp = 0;  // unix seconds: the last second it is good in
  std::string iss;  // the sandbox's owner
  std::string sub;
};

// The signature of `grant` under `key` (43 base64url characters).
std::string SignPortGrant(std::string_view key, const PortGrant& grant);

// True when `signature` is SignPortGrant(key, grant) (compared in constant time) and `now` is at
// or before grant.exp.
bool VerifyPortGrant(std::string_view key, const PortGrant& grant, std::string_view signature, int64_t now);

// A port a sandbox may show: 1..65535 and none of corral's own loopback services there (the
// model relay, the tool bridge, the egress proxy: a URL to one would let a browser speak to
// corral as the sandbox).
bool IsShowablePort(int64_t port, uint64_t relay_port, uint64_t egress_port);

}  // namespace corral::supervisor
