// The webhook outbox's writer: which URLs take an event (webhooks.urls and webhooks.events, both
// changed by a reload), the event's body and id, and its rows recorded in the store in the same
// transaction as what the event is about, so that an event that happened is never missing from
// the outbox (and none is there that did not happen). webhook_deliverer.h sends them.
//
//   outbox.AppendEvent(store, sandbox_id, "sandbox.stopped", "{}", event)  // the event log's row too
//   outbox.Record(store, event, [&] { return store.UpdateSession(row); })  // with another write
//
// The services hold a WebhookOutbox* that may be null (no [webhooks]): the free functions below
// then write what they would have written without it.
#pragma once

#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "supervisor/store/store.h"
#include "supervisor/webhooks/webhook_event.h"
#include "supervisor/webhooks/webhooks_config.h"

namespace corral::supervisor {

class WebhookOutbox {
 public:
  // `node`: the store's node id, named in every body.
  WebhookOutbox(const WebhooksConfig& config, std::string node);

  // webhooks.urls and webhooks.events (a reload): events from now on. Rows already in the outbox
  // keep the URL they were written for.
  void Reload(const WebhooksConfig& config);
  // Told after each event recorded with rows (the deliverer's Wake); any thread.
  void SetWake(std::function<void()> wake);

  // One row per URL that takes the event's type (none when no URL does), due now, with the same
  // id and body. `event.at` 0 becomes now.
  std::vector<OutboxRow> RowsOf(WebhookEvent event) const;

  // The event log's row (Store::AppendEvent) and the event's outbox rows, in one transaction.
  StatusOr<int64_t> AppendEvent(Store& store, const std::string& sandbox_id, const std::string& type,
                                const std::string& data_json, const WebhookEvent& event);
  // The event's outbox rows, and `with` (when set: the write the event is about) in the same
  // transaction. On PostgreSQL `with` may run more than once (Store::InTransaction).
  Status Record(Store& store, const WebhookEvent& event, const std::function<Status()>& with = {});

 private:
  void Woken(bool recorded) const;

  const std::string node_;
  mutable std::mutex mu_;
  std::vector<std::string> urls_;
  std::vector<WebhookEventType> events_;  // empty: all
  std::function<void()> wake_;
  // The once_keys recorded lately: a refused call after the first of a spent budget's window
  // writes nothing (the store would keep the first in any case).
  std::set<std::string> once_recorded_;
};

// With an outbox, outbox->AppendEvent; without, the store's own AppendEvent.
StatusOr<int64_t> AppendEvent(Store& store, WebhookOutbox* outbox, const std::string& sandbox_id,
                              const std::string& type, const std::string& data_json, const WebhookEvent& event);
// With an outbox, outbox->Record(event, with); without, `with` alone (OK when it is unset).
Status RecordWebhook(Store& store, WebhookOutbox* outbox, const WebhookEvent& event,
                     const std::function<Status()>& with = {});

}  // namespace corral::supervisor
