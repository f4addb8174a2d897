// The webhook deliverer: sends the outbox's due rows (webhook_outbox.h) to their URLs, on a
// thread of its own with its own event loop, so that a slow or dead receiver never holds up
// corrald's. Each attempt is an HTTP/1.1 POST of the row's body, unchanged, from corrald's own
// network namespace (never through a sandbox's egress proxy), with
//   Content-Type: application/json
//   Corral-Webhook-Id: wh_...          the same on every attempt: the receiver's idempotency key
//   Corral-Webhook-Timestamp: <t>      unix seconds of this attempt
//   Corral-Webhook-Attempt: <n>        1 for the first
//   Corral-Signature: t=<t>,v1=<hex>   webhook_body.h's WebhookSignature
// https:// receivers are verified against the system's trust store (and webhooks.ca_file), with
// the host name checked. A 2xx answer is a delivery; anything else (another status, a timeout,
// a refused connection, a TLS failure) fails the attempt, which is tried again after
// WebhookRetryDelay, until the row is webhooks.max_age old: then it is given up (recorded with
// its last error, logged, counted), never dropped silently. Delivered rows are pruned after
// webhooks.keep.
//
// In a fleet every node sends any node's rows: a row is leased to one node at a time
// (Store::ClaimOutbox) for the attempt's time and more, so a node that dies mid-attempt leaves
// its rows to the others once its leases end. Delivery is at least once: a receiver dedupes by
// the id.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "common/status.h"
#include "supervisor/store/store.h"
#include "supervisor/webhooks/webhooks_config.h"

namespace corral::supervisor {

// Counters for /metrics; called on the deliverer's thread.
class WebhookObserver {
 public:
  virtual ~WebhookObserver() = default;
  virtual void OnWebhookDelivered() = 0;
  virtual void OnWebhookAttemptFailed() = 0;
  virtual void OnWebhookGivenUp() = 0;
};

class WebhookDeliverer {
 public:
  // `config.secret` signs; `config.urls` may be empty (rows written before a reload emptied it
  // are still sent).
  WebhookDeliverer(Store& store, WebhooksConfig config, WebhookObserver* observer = nullptr);
  ~WebhookDeliverer();  // Stop()
  WebhookDeliverer(const WebhookDeliverer&) = delete;
  WebhookDeliverer& operator=(const WebhookDeliverer&) = delete;

  // Loads the trust store (EINVAL: webhooks.ca_file does not load), releases this node's leases
  // of a previous run and starts the thread, which sends what is due from then on.
  Status Start();
  // Look now (an event was just recorded); any thread.
  void Wake();
  // Rows neither delivered nor given up (every node's), for /metrics.
  StatusOr<int64_t> Depth() const { return store_.OutboxDepth(); }
  // Ends the thread: attempts under way are abandoned (their rows due again) and this node's
  // leases released. Idempotent.
  void Stop();

 private:
  class Loop;
  Store& store_;
  WebhooksConfig config_;
  WebhookObserver* observer_;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace corral::supervisor
