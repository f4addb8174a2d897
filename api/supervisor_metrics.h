// The supervisor's counters in /metrics: agent sessions, the model relay (requests, tokens,
// dollars, upstream latency), budget refusals and the egress proxy's decisions and bytes.
//
//   api::SupervisorMetrics supervisor_metrics(metrics);  // registers its metrics, all at once
//   relay.SetObserver(&supervisor_metrics);              // and the egress proxy, the sessions,
//   supervisor_metrics.SetSessions(&sessions);           // the sandbox manager's budget refusals
//
// No label holds a user, sandbox or session id: the values of every label are a fixed list
// (outcomes, results, kinds, reasons) or the keys of the operator's price table, with "other"
// for a model that falls under none.
//
//   corral_sessions_running{state}           gauge: sessions whose agent runs, by state
//   corral_sessions_total{outcome}           sessions that ended, by outcome
//   corral_model_requests_total{result}      requests to the model relay, by result
//   corral_model_tokens_total{model,kind}    tokens metered: input, output, cache_write, cache_read
//   corral_model_cost_usd_total{model}       dollars charged to the ledger (exact to the micro-dollar)
//   corral_model_upstream_latency_seconds    histogram: a request sent upstream to its answer's headers
//   corral_budget_refusals_total{kind}       ai, ai_in_flight, rate, compute, compute_stop
//   corral_egress_decisions_total{decision,reason}
//   corral_egress_bytes_total{direction}     up (from sandboxes), down (to them)
//   corral_webhook_attempts_total{result}    webhook deliveries tried: delivered, failed
//   corral_webhook_given_up_total            webhook deliveries given up (older than webhooks.max_age)
//   corral_webhook_outbox_pending            gauge: deliveries neither made nor given up (every node's)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "api/metrics.h"
#include "supervisor/relay/budget.h"
#include "supervisor/egress/egress_proxy.h"
#include "supervisor/relay/model_relay.h"
#include "supervisor/sessions/session_runner.h"
#include "supervisor/webhooks/webhook_deliverer.h"

namespace corral::api {

class SupervisorMetrics : public supervisor::RelayObserver,
                          public supervisor::EgressObserver,
                          public supervisor::SessionObserver,
                          public supervisor::WebhookObserver {
 public:
  explicit SupervisorMetrics(Metrics& metrics);
  // The runner whose live sessions corral_sessions_running counts (nullptr: none yet).
  void SetSessions(const supervisor::SessionRunner* sessions) { sessions_ = sessions; }
  // The deliverer whose outbox corral_webhook_outbox_pending counts (nullptr: none, 0).
  void SetWebhooks(const supervisor::WebhookDeliverer* webhooks) { webhooks_ = webhooks; }

  // supervisor::SessionObserver
  void OnSessionEnded(std::string_view outcome) override;
  // supervisor::RelayObserver (and BudgetObserver, which the sandbox manager reports to too)
  void OnModelRequest(supervisor::RelayResult result) override;
  void OnModelUsage(const std::string& price_key, const supervisor::ModelUsage& usage,
                    int64_t cost_micro_usd) override;
  void OnUpstreamLatency(double seconds) override;
  void OnBudgetRefusal(supervisor::BudgetRefusal kind) override;
  // supervisor::EgressObserver
  void OnEgressDecision(std::string_view decision, std::string_view reason) override;
  void OnEgressBytes(bool up, uint64_t bytes) override;
  // supervisor::WebhookObserver (the deliverer's thread)
  void OnWebhookDelivered() override;
  void OnWebhookAttemptFailed() override;
  void OnWebhookGivenUp() override;

 private:
  const supervisor::SessionRunner* sessions_ = nullptr;
  const supervisor::WebhookDeliverer* webhooks_ = nullptr;
  Family<Counter>& sessions_ended_;
  Family<Counter>& model_requests_;
  Family<Counter>& model_tokens_;
  Family<Counter>& model_cost_;
  Histogram& upstream_latency_;
  Family<Counter>& budget_refusals_;
  Family<Counter>& egress_decisions_;
  Family<Counter>& egress_bytes_;
  Family<Counter>& webhook_attempts_;
  Counter& webhook_given_up_;
};

}  // namespace corral::api
