#include "supervisor/relay/relay_keys.h"

#include <openssl/rand.h>
#include <openssl/sha.h>

#include <cstdlib>

#include "common/base64.h"

namespace corral::supervisor {
namespace {

std::string Sha256(std::string_view text) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  return std::string(reinterpret_cast<const char*>(digest), sizeof(digest));
}

}  // namespace

std::string RelayKeys::Issue(const RelayClient& client) {
  Revoke(client.session_id);
  unsigned char random[32];
  if (RAND_bytes(random, sizeof(random)) != 1) abort();  // no entropy: nothing safe to hand out
  std::string key = "sk-corral-" + Base64UrlEncode({reinterpret_cast<const char*>(random), sizeof(random)});
  const std::string hash = Sha256(key);
  by_hash_[hash] = client;
  hash_by_session_[client.session_id] = hash;
  return key;
}

void RelayKeys::Revoke(const std::string& session_id) {
  auto it = hash_by_session_.find(session_id);
  if (it == hash_by_session_.end()) return;
  by_hash_.erase(it->second);
  hash_by_session_.erase(it);
}

void RelayKeys::UpdateBudget(const std::string& session_id, const Budget& budget) {
  auto it = hash_by_session_.find(session_id);
  if (it == hash_by_session_.end()) return;
  by_hash_[it->second].budget = budget;
}

std::optional<RelayClient> RelayKeys::FindKey(std::string_view placeholder_key) {
  auto it = by_hash_.find(Sha256(placeholder_key));
  if (it == by_hash_.end()) return std::nullopt;
  return it->second;
}

void RelayKeys::OnUsage(const RelayClient& client, const ModelUsage& usage, int64_t cost_micro_usd) {
  if (on_usage_) on_usage_(client, usage, cost_micro_usd);
}

void RelayKeys::OnBudgetExhausted(const RelayClient& client) {
  if (on_exhausted_) on_exhausted_(client);
}

}  // namespace corral::supervisor
