// A lifecycle event for the operator's webhooks ([webhooks] in corrald.toml): a value that the
// services make where the event happens (sandboxes/, sessions/, relay/), which webhook_body.h
// turns into the JSON body a receiver gets and webhook_outbox.h records in the store's outbox, in
// the same transaction as what the event is about. No JSON crosses from the services to here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "supervisor/relay/budget.h"

namespace corral::supervisor {

enum class WebhookEventType {
  kSandboxCreated,     // "sandbox.created"
  kSandboxStarted,     // "sandbox.started"
  kSandboxStopped,     // "sandbox.stopped", with its StopReason
  kSandboxDestroyed,   // "sandbox.destroyed"
  kSessionEnded,       // "session.ended": an agent session's process ended (outcome, turns, cost, usage)
  kExecutionFinished,  // "execution.finished": a headless execution's record is final
  kBudgetExhausted,    // "budget.exhausted": a user's AI or compute budget of a window is spent
};
inline constexpr WebhookEventType kAllWebhookEventTypes[] = {
    WebhookEventType::kSandboxCreated,  WebhookEventType::kSandboxStarted,    WebhookEventType::kSandboxStopped,
    WebhookEventType::kSandboxDestroyed, WebhookEventType::kSessionEnded,     WebhookEventType::kExecutionFinished,
    WebhookEventType::kBudgetExhausted};
std::string_view WebhookEventName(WebhookEventType type);
std::optional<WebhookEventType> WebhookEventOfName(std::string_view name);

// Why a sandbox stopped.
enum class StopReason {
  kRequest,        // "request": its user (or the operator) asked, or it was destroyed running
  kIdle,           // "idle": its idle timeout
  kComputeBudget,  // "compute_budget": its user's compute budget was spent
  kShutdown,       // "shutdown": corrald stopped it on its way down (corrald leaves sandboxes
                   // running when it stops; this is for a stop it makes itself, none today)
  kNodeFailure,    // "node_failure": corrald found it dead at its start (the host restarted, or
                   // its init died while no daemon ran)
};
std::string_view StopReasonName(StopReason reason);

// Tokens of a session's model calls, as the relay metered them.
struct WebhookUsage {
  int64_t calls = 0;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  int64_t cache_creation_input_tokens = 0;
  int64_t cache_read_input_tokens = 0;
};

struct SessionEnd {
  std::string session_id;
  std::string state;       // idle|completed|failed|aborted
  std::string outcome;     // completed|stopped|aborted|agent_exited|agent_hung|budget_exhausted|...
  int64_t turns = 0;
  int64_t cost_micro_usd = 0;
  WebhookUsage usage;
};

struct ExecutionEnd {
  std::string execution_id;
  std::string state;       // completed|failed
  std::string outcome;     // its session's outcome; "" when the agent never ran
  std::string session_id;
  std::string error;       // "" when all went well
  std::string base_commit;
  std::string head_commit;
  int64_t cost_micro_usd = 0;
  int64_t files_changed = 0;
};

struct BudgetSpent {
  std::string kind;        // "ai" (micro-dollars) or "compute" (CPU milliseconds)
  std::string window;      // hour|day|week|month
  int64_t window_start = 0;  // unix seconds
  int64_t window_end = 0;
  int64_t limit = 0;       // the budget, in the kind's unit
  int64_t spent = 0;
};

struct WebhookEvent {
  WebhookEventType type = WebhookEventType::kSandboxCreated;
  int64_t at = 0;          // unix seconds; 0: when it is recorded
  std::string iss;
  std::string sub;
  std::string sandbox_id;  // "" for an event of a user's (budget.exhausted)
  std::string source;      // sandbox.created: the snapshot or sandbox it was made from; ""
  StopReason reason = StopReason::kRequest;  // sandbox.stopped
  std::optional<SessionEnd> session;         // session.ended
  std::optional<ExecutionEnd> execution;     // execution.finished
  std::optional<BudgetSpent> budget;         // budget.exhausted
  // "" for an event that happens once. Otherwise events with the same key are one event: it is
  // recorded once, whichever node records it first (budget.exhausted: one per user, kind and
  // window, however many calls are refused).
  std::string once_key;
};

// budget.exhausted of a user's `kind` ("ai" or "compute") budget in the window of `budget` that
// holds `now`: one event per user, kind and window (its once_key), whoever notices it first.
WebhookEvent BudgetExhaustedEvent(const std::string& iss, const std::string& sub, const std::string& sandbox_id,
                                  const std::string& kind, const Budget& budget, int64_t limit, int64_t spent,
                                  int64_t now);

}  // namespace corral::supervisor
