// The commands' counters in /metrics, and the sandboxes' gauges:
//
//   corral_commands_total{outcome}           commands that ended, by outcome
//   corral_stream_bytes_total{direction}     command output (out) and input (in) streamed
//   corral_sandboxes{state}                  sandboxes by state
//   corral_commands_running                  commands running now
//   corral_compute_cpu_seconds_total         CPU-seconds debited or counted since the last debit
#pragma once

#include <cstddef>
#include <cstdint>

#include "api/metrics.h"
#include "supervisor/commands/command.h"
#include "supervisor/sandboxes/sandbox_manager.h"

namespace corral::api {

class ApiMetrics : public supervisor::CommandObserver {
 public:
  // `manager` may be set later (the manager takes this observer when it is made).
  ApiMetrics(Metrics& metrics, supervisor::SandboxManager* manager);
  void OnCommandFinished(const supervisor::Outcome& outcome) override;
  void OnOutputBytes(size_t bytes) override;
  void OnInputBytes(size_t bytes) override;
  void SetManager(supervisor::SandboxManager* manager) { manager_ = manager; }

 private:
  Family<Counter>& commands_;
  Family<Counter>& bytes_;
  supervisor::SandboxManager* manager_;
  int64_t compute_shown_ms_ = 0;  // corral_compute_cpu_seconds_total never goes down
};

}  // namespace corral::api
