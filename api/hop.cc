#include "api/hop.h"

#include <openssl/crypto.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

#include "api/jwt_internal.h"
#include "common/hex.h"
#include "common/parse.h"
#include "common/sha256.h"

namespace corral::api {
namespace {

std::vector<std::string_view> Fields(std::string_view text) {
  std::vector<std::string_view> fields;
  while (!text.empty()) {
    const size_t space = text.find(' ');
    fields.push_back(text.substr(0, space));
    if (space == std::string_view::npos) break;
    text.remove_prefix(space + 1);
  }
  return fields;
}

Status Rejected(std::string why) { return Status::Error("hop mark: " + std::move(why), EKEYREJECTED); }

}  // namespace

StatusOr<HopSigner> HopSigner::Create(std::string node_id, std::string secret) {
  if (secret.size() < 32) return Status::Error("the cluster secret must be at least 32 bytes", EINVAL);
  if (node_id.empty() || node_id.find(' ') != std::string::npos) {
    return Status::Error("a node id for the hop mark: non-empty, no spaces", EINVAL);
  }
  return HopSigner(std::move(node_id), std::move(secret));
}

std::string HopSigner::Mac(std::string_view from, int64_t ms, std::string_view method, std::string_view target,
                           std::string_view authorization) const {
  std::string input = "corral-hop-v1\n";
  input.append(from).append("\n").append(std::to_string(ms)).append("\n");
  input.append(method).append("\n").append(target).append("\n").append(Sha256Hex(authorization));
  std::optional<std::string> mac = internal::HmacSha256(secret_, input);
  return mac ? HexLower(*mac) : std::string();
}

std::string HopSigner::Sign(std::string_view method, std::string_view target, std::string_view authorization,
                            int64_t now_ms) const {
  return "v1 " + node_id_ + " " + std::to_string(now_ms) + " " + Mac(node_id_, now_ms, method, target, authorization);
}

StatusOr<std::string> HopSigner::Verify(std::string_view header, std::string_view method, std::string_view target,
                                        std::string_view authorization, int64_t now_ms) const {
  const std::vector<std::string_view> fields = Fields(header);
  if (fields.size() != 4 || fields[0] != "v1" || fields[1].empty()) return Rejected("malformed");
  StatusOr<uint64_t> ms = ParseUint(fields[2]);
  if (!ms.ok() || *ms > static_cast<uint64_t>(INT64_MAX)) return Rejected("malformed time");
  const int64_t at = static_cast<int64_t>(*ms);
  if (at < now_ms - kMaxSkewMs || at > now_ms + kMaxSkewMs) return Rejected("outside the allowed clock skew");
  const std::string expected = Mac(fields[1], at, method, target, authorization);
  if (expected.empty() || fields[3].size() != expected.size() ||
      CRYPTO_memcmp(fields[3].data(), expected.data(), expected.size()) != 0) {
    return Rejected("the MAC does not match");
  }
  return std::string(fields[1]);
}

}  // namespace corral::api
