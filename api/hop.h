// The mark of a request one node of the fleet forwards to another (api/forwarding.h): the header
//   X-Corral-Hop: v1 <from node> <unix ms> <hex HMAC-SHA256>
// whose MAC, under the fleet's cluster secret (node.cluster_secret_file), covers
//   "corral-hop-v1\n" from "\n" ms "\n" method "\n" target "\n" SHA-256(authorization)
// `target` is the request's (path and query, as sent) and `authorization` its Authorization
// header, the client's own token, which the forwarded request still carries and the receiving
// node still verifies: the mark adds
// no authority. It says the request has been forwarded once (so it is never forwarded again,
// whatever the catalogs say: no loops), and that it was counted against the user's request rate
// by the node that took it (so it is not counted twice). A mark is good for kMaxSkew either way
// of the receiver's clock, for that method, target and token only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace corral::api {

inline constexpr char kHopHeader[] = "X-Corral-Hop";
inline constexpr char kHopHeaderLower[] = "x-corral-hop";

class HopSigner {
 public:
  static constexpr int64_t kMaxSkewMs = 60'000;

  // `secret`: at least 32 bytes (EINVAL otherwise).
  static StatusOr<HopSigner> Create(std::string node_id, std::string secret);

  std::string Sign(std::string_view method, std::string_view target, std::string_view authorization,
                   int64_t now_ms) const;
  // The node the mark says it came from, when the mark verifies; EKEYREJECTED otherwise (the
  // reason in the message, for the log only).
  StatusOr<std::string> Verify(std::string_view header, std::string_view method, std::string_view target,
                               std::string_view authorization, int64_t now_ms) const;

  const std::string& node_id() const { return node_id_; }

 private:
  HopSigner(std::string node_id, std::string secret) : node_id_(std::move(node_id)), secret_(std::move(secret)) {}
  std::string Mac(std::string_view from, int64_t ms, std::string_view method, std::string_view target,
                  std::string_view authorization) const;

  std::string node_id_;
  std::string secret_;
};

}  // namespace corral::api
