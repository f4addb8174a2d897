// The supervisor's counters as /metrics shows them: what each observer call adds, and that the
// fixed label values are there at 0 before anything happens.
#include "api/supervisor_metrics.h"

#include <gtest/gtest.h>

#include <string>

namespace corral::api {
namespace {

using supervisor::BudgetRefusal;
using supervisor::ModelUsage;
using supervisor::RelayResult;

bool Has(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST(SupervisorMetricsTest, FixedLabelValuesStartAtZero) {
  Metrics metrics;
  SupervisorMetrics supervisor_metrics(metrics);
  const std::string text = metrics.Render();
  for (const char* line : {"corral_sessions_total{outcome=\"completed\"} 0",
                           "corral_sessions_total{outcome=\"budget_exhausted\"} 0",
                           "corral_model_requests_total{result=\"forwarded\"} 0",
                           "corral_model_requests_total{result=\"refused_budget\"} 0",
                           "corral_model_requests_total{result=\"refused_rate\"} 0",
                           "corral_budget_refusals_total{kind=\"ai\"} 0",
                           "corral_budget_refusals_total{kind=\"ai_in_flight\"} 0",
                           "corral_budget_refusals_total{kind=\"rate\"} 0",
                           "corral_budget_refusals_total{kind=\"compute\"} 0",
                           "corral_budget_refusals_total{kind=\"compute_stop\"} 0",
                           "corral_egress_bytes_total{direction=\"down\"} 0",
                           "corral_egress_bytes_total{direction=\"up\"} 0",
                           "corral_model_upstream_latency_seconds_count 0"}) {
    EXPECT_TRUE(Has(text, line)) << line << "\n" << text;
  }
  // Families whose label values come with use are declared, without samples.
  for (const char* line : {"# TYPE corral_model_tokens_total counter", "# TYPE corral_model_cost_usd_total counter",
                           "# TYPE corral_egress_decisions_total counter", "# TYPE corral_sessions_running gauge"}) {
    EXPECT_TRUE(Has(text, line)) << line;
  }
  EXPECT_EQ(text.find("corral_model_tokens_total{"), std::string::npos);
  // Without a session runner, no running sessions are made up.
  EXPECT_EQ(text.find("corral_sessions_running{"), std::string::npos);
}

TEST(SupervisorMetricsTest, UsageCountsTokensByKindAndDollarsExactly) {
  Metrics metrics;
  SupervisorMetrics supervisor_metrics(metrics);
  ModelUsage usage;
  usage.model = "claude-sonnet-4-5-20250929";
  usage.input_tokens = 1000;
  usage.output_tokens = 500;
  usage.cache_creation_input_tokens = 2000;
  usage.cache_read_input_tokens = 10000;
  supervisor_metrics.OnModelUsage("claude-sonnet-4-5", usage, 21000);
  supervisor_metrics.OnModelUsage("claude-sonnet-4-5", usage, 21000);
  ModelUsage small;
  small.input_tokens = 7;
  supervisor_metrics.OnModelUsage("", small, 21);  // no key: "other", never the model's own id
  const std::string text = metrics.Render();
  EXPECT_TRUE(Has(text, "corral_model_tokens_total{model=\"claude-sonnet-4-5\",kind=\"input\"} 2000")) << text;
  EXPECT_TRUE(Has(text, "corral_model_tokens_total{model=\"claude-sonnet-4-5\",kind=\"output\"} 1000"));
  EXPECT_TRUE(Has(text, "corral_model_tokens_total{model=\"claude-sonnet-4-5\",kind=\"cache_write\"} 4000"));
  EXPECT_TRUE(Has(text, "corral_model_tokens_total{model=\"claude-sonnet-4-5\",kind=\"cache_read\"} 20000"));
  EXPECT_TRUE(Has(text, "corral_model_cost_usd_total{model=\"claude-sonnet-4-5\"} 0.042"));
  EXPECT_TRUE(Has(text, "corral_model_tokens_total{model=\"other\",kind=\"input\"} 7"));
  EXPECT_TRUE(Has(text, "corral_model_tokens_total{model=\"other\",kind=\"output\"} 0"));
  EXPECT_TRUE(Has(text, "corral_model_cost_usd_total{model=\"other\"} 0.000021"));
  EXPECT_EQ(text.find("20250929"), std::string::npos);
}

TEST(SupervisorMetricsTest, RequestsRefusalsSessionsAndLatency) {
  Metrics metrics;
  SupervisorMetrics supervisor_metrics(metrics);
  supervisor_metrics.OnModelRequest(RelayResult::kForwarded);
  supervisor_metrics.OnModelRequest(RelayResult::kForwarded);
  supervisor_metrics.OnModelRequest(RelayResult::kRefusedBudget);
  supervisor_metrics.OnBudgetRefusal(BudgetRefusal::kAi);
  supervisor_metrics.OnBudgetRefusal(BudgetRefusal::kCompute);
  supervisor_metrics.OnBudgetRefusal(BudgetRefusal::kCompute);
  supervisor_metrics.OnSessionEnded("completed");
  supervisor_metrics.OnUpstreamLatency(0.3);
  const std::string text = metrics.Render();
  EXPECT_TRUE(Has(text, "corral_model_requests_total{result=\"forwarded\"} 2")) << text;
  EXPECT_TRUE(Has(text, "corral_model_requests_total{result=\"refused_budget\"} 1"));
  EXPECT_TRUE(Has(text, "corral_model_requests_total{result=\"upstream_error\"} 0"));
  EXPECT_TRUE(Has(text, "corral_budget_refusals_total{kind=\"ai\"} 1"));
  EXPECT_TRUE(Has(text, "corral_budget_refusals_total{kind=\"compute\"} 2"));
  EXPECT_TRUE(Has(text, "corral_budget_refusals_total{kind=\"rate\"} 0"));
  EXPECT_TRUE(Has(text, "corral_sessions_total{outcome=\"completed\"} 1"));
  EXPECT_TRUE(Has(text, "corral_model_upstream_latency_seconds_bucket{le=\"0.25\"} 0"));
  EXPECT_TRUE(Has(text, "corral_model_upstream_latency_seconds_bucket{le=\"0.5\"} 1"));
  EXPECT_TRUE(Has(text, "corral_model_upstream_latency_seconds_count 1"));
}

TEST(SupervisorMetricsTest, EgressDecisionsByReasonAndBytesEachWay) {
  Metrics metrics;
  SupervisorMetrics supervisor_metrics(metrics);
  supervisor_metrics.OnEgressDecision("allowed", "domain");
  supervisor_metrics.OnEgressDecision("denied", "domain");
  supervisor_metrics.OnEgressDecision("denied", "domain");
  supervisor_metrics.OnEgressDecision("denied", "private_address");
  supervisor_metrics.OnEgressBytes(true, 100);
  supervisor_metrics.OnEgressBytes(false, 4000);
  supervisor_metrics.OnEgressBytes(false, 96);
  const std::string text = metrics.Render();
  EXPECT_TRUE(Has(text, "corral_egress_decisions_total{decision=\"allowed\",reason=\"domain\"} 1")) << text;
  EXPECT_TRUE(Has(text, "corral_egress_decisions_total{decision=\"denied\",reason=\"domain\"} 2"));
  EXPECT_TRUE(Has(text, "corral_egress_decisions_total{decision=\"denied\",reason=\"private_address\"} 1"));
  EXPECT_TRUE(Has(text, "corral_egress_bytes_total{direction=\"up\"} 100"));
  EXPECT_TRUE(Has(text, "corral_egress_bytes_total{direction=\"down\"} 4096"));
}

}  // namespace
}  // namespace corral::api
