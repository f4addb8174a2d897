// The WebSocket protocol of docs/PROTOCOL.md ("WebSocket", on /v1/ws): requests
// {"id", "op", ...} answered {"id", "ok", "result" | "error"}, and the streams a connection is
// attached to, each event after the reply that started it.
//
//   ping, auth {token}                         the connection itself (auth renews its token)
//   exec {sandbox, argv, ...}, attach {command, after_seq?, output?}
//                                              a command's output on a channel: binary frames
//                                              (ws_frames.h) or {"event": "output"} (base64)
//   stdin {command, data}, close_stdin, signal, resize, detach
//                                              an attached command (binary stdin frames too)
//   session.attach {session, after_seq?}, session.detach, session.send, session.tool_result,
//   session.permission, session.interrupt, session.abort, session.close
//                                              an agent session's events and answers
//   sandbox.watch {sandbox, after_seq?}, sandbox.unwatch
//                                              a sandbox's event log, replayed then live
//
// Ops count against the user's api.requests_per_minute, but for the stream's own traffic (stdin,
// close_stdin, resize, ping). Everything runs on the event loop.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "api/server_types.h"
#include "common/status.h"
#include "supervisor/relay/rate_limiter.h"
#include "supervisor/sandboxes/sandbox_events.h"
#include "supervisor/sandboxes/sandbox_manager.h"
#include "supervisor/sessions/session_runner.h"

namespace corral::api {

class WsApi : public WsHandler {
 public:
  WsApi(supervisor::SandboxManager& manager, supervisor::SessionRunner& agents, supervisor::SandboxEvents& events,
        std::shared_ptr<supervisor::RateLimiter> limiter);
  ~WsApi() override;

  // An event appended to the store (on the event loop): to every connection watching its sandbox.
  void Publish(const supervisor::EventRow& event);

  void OnOpen(const std::shared_ptr<WsConnection>& connection) override;
  void OnClose(const std::shared_ptr<WsConnection>& connection) override;
  void OnBinary(const std::shared_ptr<WsConnection>& connection, std::string message) override;
  void OnText(const std::shared_ptr<WsConnection>& connection, std::string message) override;

 private:
  struct Connection;  // what one connection is attached to (ws_api.cc)
  using Json = nlohmann::json;

  StatusOr<Json> Dispatch(const std::shared_ptr<WsConnection>& connection, const std::string& op, const Json& request);
  // stdin, close_stdin, signal, resize, detach: on a command attached here.
  StatusOr<Json> CommandOp(const std::shared_ptr<WsConnection>& connection, Connection& attached,
                           const AuthContext& auth, const std::string& op, const Json& request);
  StatusOr<Json> WatchOp(const std::shared_ptr<WsConnection>& connection, Connection& attached,
                         const AuthContext& auth, const std::string& op, const Json& request);
  StatusOr<Json> AgentOp(const std::shared_ptr<WsConnection>& connection, Connection& attached,
                         const AuthContext& auth, const std::string& op, const Json& request);
  StatusOr<Json> AttachAgent(const std::shared_ptr<WsConnection>& connection, Connection& attached,
                             const supervisor::Caller& caller, const std::string& id, const Json& request);
  StatusOr<Json> AnswerAgent(const supervisor::Caller& caller, const std::string& id, const std::string& op,
                             const Json& request);
  StatusOr<Json> Exec(const std::shared_ptr<WsConnection>& connection, Connection& attached, const AuthContext& auth,
                      const Json& request);
  StatusOr<Json> Attach(const std::shared_ptr<WsConnection>& connection, Connection& attached,
                        const AuthContext& auth, const Json& request);
  uint32_t AttachTo(const std::shared_ptr<WsConnection>& connection, Connection& attached,
                    const std::shared_ptr<supervisor::Command>& command, bool binary);
  // The replay of sandbox.watch: the stored events after the last one sent, then Publish's.
  void Replay(const std::weak_ptr<WsConnection>& weak, const std::string& sandbox_id);

  supervisor::SandboxManager& manager_;
  supervisor::SessionRunner& agents_;
  supervisor::SandboxEvents& events_;
  std::shared_ptr<supervisor::RateLimiter> limiter_;
  std::map<uint64_t, std::unique_ptr<Connection>> connections_;
  // Set by an op whose events follow its reply (exec, attach, session.attach, sandbox.watch).
  std::function<void()> pending_;
};

}  // namespace corral::api
