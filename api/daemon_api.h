// The protocol of docs/PROTOCOL.md on top of the server: the wiring of the route registrars
// (routes.h), the WebSocket protocol (ws_api.h) and the per-user request rate. No Beast here
// (server.h hides it) and no kernel work (the supervisor does it).
#pragma once

#include <cstdint>
#include <functional>

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include "api/server.h"
#include "supervisor/config.h"
#include "supervisor/relay/ledger.h"
#include "supervisor/sandboxes/sandbox_events.h"
#include "supervisor/sandboxes/sandbox_manager.h"
#include "supervisor/sessions/session_runner.h"

namespace corral::api {

inline constexpr char kVersion[] = "0.1.0";
inline constexpr int kProtocolVersion = 1;

// Registers every route (but the executions': RegisterExecuteRoutes), GET /healthz, the request
// gate of api.requests_per_minute and the WebSocket endpoint, whose watchers `events` tells of
// every event appended. Returns what a config reload calls (on the event loop) with the new
// api.requests_per_minute.
std::function<void(uint64_t requests_per_minute)> RegisterApi(
    Server& server, boost::asio::io_context& io, boost::asio::thread_pool& pool, supervisor::SandboxManager& manager,
    supervisor::SessionRunner& sessions, supervisor::SandboxEvents& events, const supervisor::Ledger& ledger,
    const supervisor::DaemonConfig& config);

}  // namespace corral::api
