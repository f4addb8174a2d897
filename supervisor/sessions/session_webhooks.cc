// A session's end as the store and the operator's webhooks record it (SessionRunner::SaveEnded):
// the final row and session.ended, in one transaction.
#include "common/log.h"
#include "supervisor/sessions/session_runner.h"

namespace corral::supervisor {

void SessionRunner::SaveEnded(const SessionRow& row, const std::string& outcome) {
  WebhookEvent event;
  event.type = WebhookEventType::kSessionEnded;
  event.at = row.ended_at;
  event.iss = row.iss;
  event.sub = row.sub;
  event.sandbox_id = row.sandbox_id;
  SessionEnd end{row.id, row.state, outcome, row.turns, row.cost_micro_usd, {}};
  if (webhooks_ != nullptr) {
    // What the relay metered for it, every run of it (as its cost is).
    auto usage = store_.SessionUsage(row.id);
    if (usage.ok()) {
      end.usage = WebhookUsage{usage->id, usage->input_tokens, usage->output_tokens, usage->cache_write_tokens,
                               usage->cache_read_tokens};
    }
  }
  event.session = std::move(end);
  Status saved = RecordWebhook(store_, webhooks_, event, [&] { return store_.UpdateSession(row); });
  if (!saved.ok()) LogError("session", "cannot store its end", {{"session", row.id}, {"error", saved.ToString()}});
  Ended(outcome);
}

}  // namespace corral::supervisor
