#include "api/supervisor_metrics.h"

#include <utility>
#include <vector>

namespace corral::api {

namespace {

constexpr uint64_t kMicroPerUsd = 1000000;

// Seconds to the first byte of a model's answer: tenths of a second to a minute or two.
std::vector<double> LatencyBounds() { return {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}; }

}  // namespace

SupervisorMetrics::SupervisorMetrics(Metrics& metrics)
    : sessions_ended_(metrics.AddCounterFamily("corral_sessions_total", "Agent sessions that ended, by outcome",
                                               {"outcome"})),
      model_requests_(metrics.AddCounterFamily("corral_model_requests_total",
                                               "Requests to the model relay, by result", {"result"})),
      model_tokens_(metrics.AddCounterFamily(
          "corral_model_tokens_total",
          "Model tokens metered by the relay, by the price table's model key (other: none) and kind",
          {"model", "kind"})),
      model_cost_(metrics.AddScaledCounterFamily("corral_model_cost_usd_total",
                                                 "Dollars of model use charged to the ledger, by the price "
                                                 "table's model key (other: none)",
                                                 {"model"}, kMicroPerUsd)),
      upstream_latency_(metrics.AddHistogram("corral_model_upstream_latency_seconds",
                                             "Seconds from a model request sent upstream to its answer's headers",
                                             LatencyBounds())),
      budget_refusals_(metrics.AddCounterFamily(
          "corral_budget_refusals_total",
          "Model calls and sandbox starts refused, and sandboxes stopped, by a budget or the model call rate",
          {"kind"})),
      egress_decisions_(metrics.AddCounterFamily("corral_egress_decisions_total",
                                                 "Connections through the egress proxy, by decision and reason",
                                                 {"decision", "reason"})),
      egress_bytes_(metrics.AddCounterFamily("corral_egress_bytes_total",
                                             "Bytes relayed by the egress proxy: up from sandboxes, down to them",
                                             {"direction"})),
      webhook_attempts_(metrics.AddCounterFamily("corral_webhook_attempts_total",
                                                 "Webhook deliveries tried, by result: delivered (a 2xx), failed",
                                                 {"result"})),
      webhook_given_up_(metrics.AddCounter("corral_webhook_given_up_total",
                                           "Webhook deliveries given up: not delivered within webhooks.max_age")) {
  metrics.AddGaugeCallback("corral_webhook_outbox_pending",
                           "Webhook deliveries neither made nor given up, of every node", {}, [this] {
                             std::vector<std::pair<std::vector<std::string>, double>> values;
                             if (webhooks_ == nullptr) {
                               values.push_back({{}, 0.0});  // no [webhooks]: nothing waits
                               return values;
                             }
                             if (auto depth = webhooks_->Depth(); depth.ok()) {
                               values.push_back({{}, static_cast<double>(*depth)});
                             }
                             return values;
                           });
  webhook_attempts_.WithLabels({"delivered"});
  webhook_attempts_.WithLabels({"failed"});
  metrics.AddGaugeCallback("corral_sessions_running", "Agent sessions whose agent runs now, by state", {"state"},
                           [this] {
                             std::vector<std::pair<std::vector<std::string>, double>> values;
                             if (sessions_ == nullptr) return values;
                             for (const auto& [state, count] : sessions_->CountByState()) {
                               values.push_back({{state}, static_cast<double>(count)});
                             }
                             return values;
                           });
  // The fixed label values are there from the start, at 0: a rate() needs the series before
  // its first increment.
  for (const char* outcome : {"completed", "stopped", "aborted", "agent_exited", "agent_hung", "budget_exhausted",
                              "start_failed", "daemon_restarted"}) {
    sessions_ended_.WithLabels({outcome});
  }
  using supervisor::RelayResult;
  for (RelayResult result :
       {RelayResult::kForwarded, RelayResult::kUpstreamError, RelayResult::kClientGone, RelayResult::kRefusedBudget,
        RelayResult::kRefusedInFlight, RelayResult::kRefusedRate, RelayResult::kRefusedUnpriced,
        RelayResult::kRefusedInvalid, RelayResult::kRefusedKey, RelayResult::kError}) {
    model_requests_.WithLabels({std::string(supervisor::RelayResultName(result))});
  }
  using supervisor::BudgetRefusal;
  for (BudgetRefusal kind : {BudgetRefusal::kAi, BudgetRefusal::kAiInFlight, BudgetRefusal::kRate,
                             BudgetRefusal::kCompute, BudgetRefusal::kComputeStop}) {
    budget_refusals_.WithLabels({std::string(supervisor::BudgetRefusalName(kind))});
  }
  egress_bytes_.WithLabels({"up"});
  egress_bytes_.WithLabels({"down"});
}

void SupervisorMetrics::OnSessionEnded(std::string_view outcome) {
  sessions_ended_.WithLabels({std::string(outcome)}).Increment();
}

void SupervisorMetrics::OnModelRequest(supervisor::RelayResult result) {
  model_requests_.WithLabels({std::string(supervisor::RelayResultName(result))}).Increment();
}

void SupervisorMetrics::OnModelUsage(const std::string& price_key, const supervisor::ModelUsage& usage,
                                     int64_t cost_micro_usd) {
  const std::string model = price_key.empty() ? "other" : price_key;
  const std::pair<const char*, int64_t> kinds[] = {{"input", usage.input_tokens},
                                                   {"output", usage.output_tokens},
                                                   {"cache_write", usage.cache_creation_input_tokens},
                                                   {"cache_read", usage.cache_read_input_tokens}};
  // The upstream's numbers: a negative one (which no real answer has) counts as none.
  for (const auto& [kind, tokens] : kinds) {
    Counter& counter = model_tokens_.WithLabels({model, kind});
    if (tokens > 0) counter.Increment(static_cast<uint64_t>(tokens));
  }
  Counter& cost = model_cost_.WithLabels({model});
  if (cost_micro_usd > 0) cost.Increment(static_cast<uint64_t>(cost_micro_usd));
}

void SupervisorMetrics::OnUpstreamLatency(double seconds) { upstream_latency_.Observe(seconds); }

void SupervisorMetrics::OnBudgetRefusal(supervisor::BudgetRefusal kind) {
  budget_refusals_.WithLabels({std::string(supervisor::BudgetRefusalName(kind))}).Increment();
}

void SupervisorMetrics::OnEgressDecision(std::string_view decision, std::string_view reason) {
  egress_decisions_.WithLabels({std::string(decision), std::string(reason)}).Increment();
}

void SupervisorMetrics::OnEgressBytes(bool up, uint64_t bytes) {
  egress_bytes_.WithLabels({up ? "up" : "down"}).Increment(bytes);
}

void SupervisorMetrics::OnWebhookDelivered() { webhook_attempts_.WithLabels({"delivered"}).Increment(); }
void SupervisorMetrics::OnWebhookAttemptFailed() { webhook_attempts_.WithLabels({"failed"}).Increment(); }
void SupervisorMetrics::OnWebhookGivenUp() { webhook_given_up_.Increment(); }

}  // namespace corral::api
