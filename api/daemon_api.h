// The protocol of docs/PROTOCOL.md on top of the server: HTTP routes and the WebSocket
// session, translating between JSON and the supervisor's calls. No Beast here (server.h hides
// it) and no kernel work (the supervisor does it).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include "api/error_codes.h"
#include "api/metrics.h"
#include "api/server.h"
#include "supervisor/config.h"
#include "supervisor/ledger.h"
#include "supervisor/sandbox_events.h"
#include "supervisor/sandbox_manager.h"
#include "supervisor/session_runner.h"

namespace corral::api {

inline constexpr char kVersion[] = "0.1.0";
inline constexpr int kProtocolVersion = 1;

// The API error for a supervisor Status (by its errno; see sandbox_manager.h).
ErrorCode ErrorCodeFor(const Status& status);

// Counts commands, their outcomes, the bytes streamed and the compute counted for /metrics.
class ApiMetrics : public supervisor::CommandObserver {
 public:
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

// Registers every route and the WebSocket endpoint.
// Returns what a config reload calls (on the event loop) with the new api.requests_per_minute.
std::function<void(uint64_t requests_per_minute)> RegisterApi(
    Server& server, boost::asio::io_context& io, boost::asio::thread_pool& pool, supervisor::SandboxManager& manager,
    supervisor::SessionRunner& sessions, supervisor::SandboxEvents& events, const supervisor::Ledger& ledger,
    const supervisor::DaemonConfig& config);

}  // namespace corral::api
