// The placeholder keys that sessions hand their agents (ANTHROPIC_API_KEY inside the sandbox),
// and whom each belongs to: the model relay's RelayAuthority.
//
// A key is "sk-corral-" and 43 characters of base64url (32 random bytes). Only its SHA-256 is
// kept here, so the daemon's memory holds no key a sandbox could replay elsewhere; a key is
// good only on the relay of its own sandbox (the relay checks) and only while its session
// lives (Revoke).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "supervisor/relay/model_relay.h"

namespace corral::supervisor {

class RelayKeys : public RelayAuthority {
 public:
  using UsageFn = std::function<void(const RelayClient&, const ModelUsage&, int64_t cost_micro_usd)>;
  using ExhaustedFn = std::function<void(const RelayClient&)>;

  // A fresh key for `client`, returned once. A session that already had one loses it.
  std::string Issue(const RelayClient& client);
  void Revoke(const std::string& session_id);
  // The budget of a session's key changes (the user came back with a newer token).
  void UpdateBudget(const std::string& session_id, const Budget& budget);
  size_t size() const { return by_hash_.size(); }

  // Where the relay's reports go (the session runner).
  void OnUsageCall(UsageFn fn) { on_usage_ = std::move(fn); }
  void OnExhaustedCall(ExhaustedFn fn) { on_exhausted_ = std::move(fn); }

  std::optional<RelayClient> FindKey(std::string_view placeholder_key) override;
  void OnUsage(const RelayClient& client, const ModelUsage& usage, int64_t cost_micro_usd) override;
  void OnBudgetExhausted(const RelayClient& client) override;

 private:
  std::map<std::string, RelayClient> by_hash_;         // SHA-256 (raw bytes) -> whose
  std::map<std::string, std::string> hash_by_session_;
  UsageFn on_usage_;
  ExhaustedFn on_exhausted_;
};

}  // namespace corral::supervisor
