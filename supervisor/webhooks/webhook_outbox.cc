#include "supervisor/webhooks/webhook_outbox.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <utility>

#include "supervisor/webhooks/webhook_body.h"

namespace corral::supervisor {

WebhookOutbox::WebhookOutbox(const WebhooksConfig& config, std::string node) : node_(std::move(node)) {
  Reload(config);
}

void WebhookOutbox::Reload(const WebhooksConfig& config) {
  std::lock_guard lock(mu_);
  urls_ = config.urls;
  events_ = config.events;
}

void WebhookOutbox::SetWake(std::function<void()> wake) {
  std::lock_guard lock(mu_);
  wake_ = std::move(wake);
}

std::vector<OutboxRow> WebhookOutbox::RowsOf(WebhookEvent event) const {
  std::vector<std::string> urls;
  {
    std::lock_guard lock(mu_);
    if (!events_.empty() && std::find(events_.begin(), events_.end(), event.type) == events_.end()) return {};
    urls = urls_;
  }
  if (urls.empty()) return {};
  if (event.at == 0) event.at = static_cast<int64_t>(time(nullptr));
  const std::string id = WebhookEventId(event);
  const std::string body = WebhookBody(event, id, node_);
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  std::vector<OutboxRow> rows;
  for (const std::string& url : urls) {
    OutboxRow row;
    row.id = id;
    row.url = url;
    row.type = std::string(WebhookEventName(event.type));
    row.body = body;
    row.created_at = event.at;
    row.next_attempt_ms = now_ms;
    rows.push_back(std::move(row));
  }
  return rows;
}

StatusOr<int64_t> WebhookOutbox::AppendEvent(Store& store, const std::string& sandbox_id, const std::string& type,
                                             const std::string& data_json, const WebhookEvent& event) {
  const std::vector<OutboxRow> rows = RowsOf(event);
  StatusOr<int64_t> seq = store.AppendEvent(sandbox_id, type, data_json, rows);
  Woken(seq.ok() && !rows.empty());
  return seq;
}

Status WebhookOutbox::Record(Store& store, const WebhookEvent& event, const std::function<Status()>& with) {
  if (!event.once_key.empty()) {
    std::lock_guard lock(mu_);
    if (once_recorded_.count(event.once_key) > 0) return with ? with() : Status();
  }
  const std::vector<OutboxRow> rows = RowsOf(event);
  if (rows.empty()) return with ? with() : Status();
  Status recorded = store.InTransaction([&]() -> Status {
    if (with) RETURN_IF_ERROR(with());
    return store.InsertOutbox(rows);
  });
  if (recorded.ok() && !event.once_key.empty()) {
    std::lock_guard lock(mu_);
    if (once_recorded_.size() >= 4096) once_recorded_.clear();
    once_recorded_.insert(event.once_key);
  }
  Woken(recorded.ok());
  return recorded;
}

void WebhookOutbox::Woken(bool recorded) const {
  if (!recorded) return;
  std::function<void()> wake;
  {
    std::lock_guard lock(mu_);
    wake = wake_;
  }
  if (wake) wake();
}

StatusOr<int64_t> AppendEvent(Store& store, WebhookOutbox* outbox, const std::string& sandbox_id,
                              const std::string& type, const std::string& data_json, const WebhookEvent& event) {
  if (outbox == nullptr) return store.AppendEvent(sandbox_id, type, data_json);
  return outbox->AppendEvent(store, sandbox_id, type, data_json, event);
}

Status RecordWebhook(Store& store, WebhookOutbox* outbox, const WebhookEvent& event,
                     const std::function<Status()>& with) {
  if (outbox == nullptr) return with ? with() : Status();
  return outbox->Record(store, event, with);
}

}  // namespace corral::supervisor
