// The model relay: the Anthropic Messages API as a sandbox sees it.
//
// Each sandbox's ANTHROPIC_BASE_URL is http://127.0.0.1:<port> on its own loopback, where the
// sandbox's init holds a listening socket that the daemon accepts on (LoopbackServices). The
// agent inside authenticates with a per-session placeholder key; the relay
//   1. finds the session that key belongs to (RelayAuthority), in this sandbox only;
//   2. refuses, in the API's own error format, when the user's AI budget for the current window
//      is spent (the ledger's sum), or when the model has no price (nothing goes unmetered);
//   3. forwards the request to the upstream with the operator's real key (which never enters a
//      sandbox), over TLS with certificate and host name verification (plain HTTP only to a
//      loopback upstream, for tests);
//   4. streams the answer back as it comes while reading its usage (server-sent events, or the
//      whole JSON body), prices it and writes one ledger row per request, also when the agent
//      hangs up halfway (what was used is paid for).
// A budget check is a read of the ledger before the request and the debit a write after it (the
// cost is known only at the end). So that concurrent requests at the edge of a budget do not all
// overspend, each admitted call holds its most possible cost (every request byte an input token,
// max_tokens of output) until it is priced; a call that what is left might not cover together
// with those in flight waits (the API's own 429; the CLI retries). One call always goes ahead.
//
// The holds are the fleet's: a row each in the store (Store::AdmitBudgetHold), which every node
// sharing it reads. The admission is one transaction that takes the user's turn (a row lock on
// PostgreSQL, the write lock on SQLite), reads the user's spending in the window and every
// node's holds, decides (DecideHold) and inserts the hold; the debit is one transaction that
// deletes the hold and writes the ledger row; a call that ends without a price deletes its hold.
// So a user's admissions on all nodes happen in one order, each seeing the holds and debits
// before it, as on one host, and the bound is one host's. With
// every call costing at most what it holds: a call admitted beside others in flight fits, at its
// most, within the budget (spent + held + its most <= limit), and a call admitted with none in
// flight needs spent < limit; so once the window's calls are priced,
//   spent <= limit - 1 + the cost of the last call admitted with none in flight,
// and spent <= limit when that call was not the last admitted: a user overspends by less than
// one call, however many nodes and calls.
// A hold of a node that died with calls in flight is released when that node starts again
// (Recover), and lapses after HoldLifetimeSeconds: a call lasts relay.max_call_s at most, so a
// hold that old belongs to no live call, and no node counts it (the admission deletes it).
// Calls that node's death cut off are never priced (as on one host).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "common/status.h"
#include "common/unique_fd.h"
#include "supervisor/relay/budget.h"
#include "supervisor/loopback_services.h"
#include "supervisor/relay/relay_config.h"
#include "supervisor/store/store.h"
#include "supervisor/relay/upstream_url.h"
#include "supervisor/webhooks/webhook_outbox.h"

namespace corral::supervisor {

// Who a placeholder key belongs to.
struct RelayClient {
  std::string session_id;
  std::string sandbox_id;
  std::string iss;
  std::string sub;
  Budget budget;
};

// What the relay asks of the sessions (SessionRunner), and tells them.
class RelayAuthority {
 public:
  virtual ~RelayAuthority() = default;
  virtual std::optional<RelayClient> FindKey(std::string_view placeholder_key) = 0;
  // After each metered request (the ledger row is written).
  virtual void OnUsage(const RelayClient& client, const ModelUsage& usage, int64_t cost_micro_usd) = 0;
  // A request was refused because the AI budget is spent.
  virtual void OnBudgetExhausted(const RelayClient& client) = 0;
};

// What came of one request to the relay, for metrics.
enum class RelayResult {
  kForwarded,        // the upstream's answer (whatever its status) reached the agent whole
  kUpstreamError,    // the upstream could not be reached, gave no answer, or cut it short
  kClientGone,       // the agent hung up during the answer (what was used is still paid for)
  kRefusedBudget,    // the AI budget is spent, or the session's token carries none
  kRefusedInFlight,  // the budget is nearly spent and calls are in flight: told to retry
  kRefusedRate,      // above relay.requests_per_minute
  kRefusedUnpriced,  // the model has no price in relay.prices
  kRefusedInvalid,   // not POST /v1/messages[/count_tokens], no model, or larger than allowed
  kRefusedKey,       // a key of no session of this sandbox
  kError,            // the relay's own trouble: no upstream or key configured, the ledger unreadable
};
std::string_view RelayResultName(RelayResult result);  // "forwarded", "refused_budget", ...

// Counters the API turns into metrics; called on the event loop. Budget refusals (ai,
// ai_in_flight, rate) come through BudgetObserver as well as in the request's result.
class RelayObserver : public BudgetObserver {
 public:
  virtual void OnModelRequest(RelayResult result) = 0;
  // A metered call: `price_key` is the price table's key that the answer's model falls under
  // (PriceTable::KeyFor), or "" when it has none (it was priced as the model asked for).
  virtual void OnModelUsage(const std::string& price_key, const ModelUsage& usage, int64_t cost_micro_usd) = 0;
  // From sending a request upstream to its answer's status line and headers.
  virtual void OnUpstreamLatency(double seconds) = 0;
};

// How long a budget hold counts: the longest call (relay.max_call_s) and five minutes for the
// nodes' clocks to disagree and a debit to be written.
inline constexpr int64_t kHoldSlackSeconds = 300;
inline int64_t HoldLifetimeSeconds(const RelayConfig& config) {
  return static_cast<int64_t>(config.max_call_s) + kHoldSlackSeconds;
}

class ModelRelay : public LoopbackServices {
 public:
  ModelRelay(boost::asio::io_context& io, RelayConfig config, Store& store, RelayAuthority& authority);
  ~ModelRelay() override;

  std::vector<uint16_t> Ports() const override { return {static_cast<uint16_t>(config_.port)}; }
  void Serve(const std::string& sandbox_id, std::vector<UniqueFd> listeners) override;
  void Forget(const std::string& sandbox_id) override;

  // At the daemon's start, before any sandbox is served: releases the budget holds this node's
  // previous run left in the store (its calls in flight died with it).
  Status Recover();

  // A config reload (on the event loop): the price table and the per-user rate of model calls
  // for the calls that start from now on.
  void Reload(PriceTable prices, uint64_t requests_per_minute);

  // Where requests' results, usage and latency are reported (nullptr: nowhere). Set at start.
  void SetObserver(RelayObserver* observer);
  // Where a refusal for an AI budget spent is recorded as budget.exhausted (once per user and
  // window; null: nowhere).
  void SetWebhooks(WebhookOutbox* webhooks);

  // For metrics and tests.
  uint64_t requests() const { return requests_; }
  size_t open_connections() const;

  struct Impl;

 private:
  RelayConfig config_;
  std::shared_ptr<Impl> impl_;
  uint64_t requests_ = 0;
};

}  // namespace corral::supervisor
