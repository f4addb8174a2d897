#include "api/api_metrics.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace corral::api {

ApiMetrics::ApiMetrics(Metrics& metrics, supervisor::SandboxManager* manager)
    : commands_(metrics.AddCounterFamily("corral_commands_total", "Commands that ended, by outcome", {"outcome"})),
      bytes_(metrics.AddCounterFamily("corral_stream_bytes_total",
                                      "Bytes of command output (out) and input (in) streamed", {"direction"})),
      manager_(manager) {
  metrics.AddGaugeCallback("corral_sandboxes", "Sandboxes by state", {"state"}, [this] {
    std::vector<std::pair<std::vector<std::string>, double>> values;
    if (manager_ == nullptr) return values;
    for (const auto& [state, count] : manager_->CountByState()) {
      values.push_back({{state}, static_cast<double>(count)});
    }
    return values;
  });
  // The "pooled" sandboxes above include those still starting; these are the ones a create
  // can claim now.
  metrics.AddGaugeCallback("corral_pool_ready", "Pooled sandboxes started and waiting for a create to claim them", {},
                           [this] {
                             std::vector<std::pair<std::vector<std::string>, double>> values;
                             values.push_back({{}, manager_ ? static_cast<double>(manager_->pool_ready()) : 0.0});
                             return values;
                           });
  metrics.AddGaugeCallback("corral_commands_running", "Commands running now", {}, [this] {
    std::vector<std::pair<std::vector<std::string>, double>> values;
    values.push_back({{}, manager_ ? static_cast<double>(manager_->running_commands()) : 0.0});
    return values;
  });
  // Up to the moment of the scrape: what the meter debited plus what running sandboxes counted
  // since. The highest value shown is kept: a stop's last few milliseconds, between the sandbox
  // leaving the running ones and its last debit, must not look like a counter reset.
  metrics.AddCounterCallback(
      "corral_compute_cpu_seconds_total",
      "CPU-seconds of the sandboxes' cgroups, debited to their users' compute or counted since the last debit",
      {}, [this] {
        if (manager_ != nullptr) compute_shown_ms_ = std::max(compute_shown_ms_, manager_->ComputeCountedMs());
        std::vector<std::pair<std::vector<std::string>, double>> values;
        values.push_back({{}, static_cast<double>(compute_shown_ms_) / 1000.0});
        return values;
      });
}

void ApiMetrics::OnCommandFinished(const supervisor::Outcome& outcome) {
  commands_.WithLabels({supervisor::OutcomeName(outcome.kind)}).Increment();
}
void ApiMetrics::OnOutputBytes(size_t bytes) { bytes_.WithLabels({"out"}).Increment(bytes); }
void ApiMetrics::OnInputBytes(size_t bytes) { bytes_.WithLabels({"in"}).Increment(bytes); }

}  // namespace corral::api
