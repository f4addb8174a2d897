#include "api/ws_api.h"

#include <cerrno>
#include <optional>
#include <utility>

#include "api/auth_mapping.h"
#include "api/error_codes.h"
#include "api/protocol_json.h"
#include "api/ws_frames.h"
#include "common/base64.h"
#include "common/log.h"

namespace corral::api {
namespace {

using nlohmann::json;
using supervisor::Caller;

// A stream subscriber that sends to one connection: full while the connection's queue is.
class ConnectionSubscriber : public supervisor::StreamSubscriber {
 public:
  explicit ConnectionSubscriber(std::weak_ptr<WsConnection> ws) : ws_(std::move(ws)) {}
  bool StreamFull() const override {
    auto ws = ws_.lock();
    return ws && ws->full();
  }

 protected:
  // The connection, or nullptr once it is gone or closing.
  std::shared_ptr<WsConnection> Open() const {
    auto ws = ws_.lock();
    return ws && !ws->closed() ? ws : nullptr;
  }

 private:
  std::weak_ptr<WsConnection> ws_;
};

// One command attached to one connection.
class Attachment : public ConnectionSubscriber {
 public:
  Attachment(std::weak_ptr<WsConnection> ws, std::shared_ptr<supervisor::Command> command, uint32_t channel,
             bool binary)
      : ConnectionSubscriber(std::move(ws)), command_(std::move(command)), channel_(channel), binary_(binary) {}

  void OnStreamEvent(const supervisor::StreamEvent& event) override {
    auto ws = Open();
    if (!ws) return;
    if (event.kind == supervisor::StreamEvent::Kind::kOutput) {
      if (binary_) {
        ws->SendBinary(EncodeOutputFrame(channel_, static_cast<uint8_t>(event.fd), event.seq, event.data));
      } else {
        ws->SendText(json{{"event", "output"},
                          {"command", command_->id()},
                          {"channel", channel_},
                          {"seq", event.seq},
                          {"fd", event.fd},
                          {"data", Base64Encode(event.data)}}
                         .dump());
      }
      return;
    }
    ws->SendText(json{{"event", "exit"},
                      {"command", command_->id()},
                      {"channel", channel_},
                      {"seq", event.seq},
                      {"outcome", json::parse(event.data, nullptr, false)}}
                     .dump());
  }
  supervisor::Command& command() { return *command_; }

 private:
  std::shared_ptr<supervisor::Command> command_;
  uint32_t channel_;
  bool binary_;
};

// A connection attached to an agent session's events: each is a text frame
// {"event": "session", "session", "seq", "kind", ...} and the last {"event": "session_end", ...}.
class AgentAttachment : public ConnectionSubscriber {
 public:
  AgentAttachment(std::weak_ptr<WsConnection> ws, std::shared_ptr<supervisor::AgentSession> session)
      : ConnectionSubscriber(std::move(ws)), session_(std::move(session)) {}

  void OnStreamEvent(const supervisor::StreamEvent& event) override {
    auto ws = Open();
    if (!ws) return;
    if (event.kind == supervisor::StreamEvent::Kind::kOutput) {
      json out = json::parse(event.data, nullptr, false);
      if (!out.is_object()) return;
      out["event"] = "session";
      out["session"] = session_->id();
      out["seq"] = event.seq;
      ws->SendText(out.dump());
      return;
    }
    ws->SendText(json{{"event", "session_end"},
                      {"session", session_->id()},
                      {"seq", event.seq},
                      {"state", session_->row().state},
                      {"outcome", json::parse(event.data, nullptr, false)}}
                     .dump());
  }
  supervisor::AgentSession& session() { return *session_; }

 private:
  std::shared_ptr<supervisor::AgentSession> session_;
};

// Input the command has not read yet piles up: read nothing more from this client until it has
// (TCP carries the push-back to the client; nothing is dropped).
void PushBackOnInput(const std::shared_ptr<WsConnection>& connection, supervisor::Command& command) {
  if (!command.stdin_full()) return;
  connection->PauseReading();
  std::weak_ptr<WsConnection> weak = connection;
  command.OnStdinDrained([weak] {
    if (auto ws = weak.lock()) ws->ResumeReading();
  });
}

// "output": "binary" (the default) or "json".
StatusOr<bool> OutputMode(const json& request) {
  if (!request.contains("output")) return true;
  if (request["output"] == "binary") return true;
  if (request["output"] == "json") return false;
  return Status::Error("output: \"binary\" or \"json\"", EINVAL);
}

// A required string field naming what the op acts on.
StatusOr<std::string> IdField(const json& request, const char* key, const char* what) {
  if (!request.contains(key) || !request[key].is_string()) {
    return Status::Error(std::string(key) + ": expected a " + what, EINVAL);
  }
  return request[key].get<std::string>();
}

// ERANGE when events after `after_seq` were dropped from a stream's replay buffer.
Status CheckReplay(uint64_t after_seq, uint64_t first_seq, uint64_t last_seq) {
  if (after_seq + 1 < first_seq && after_seq < last_seq) {
    return Status::Error("events after " + std::to_string(after_seq) + " were dropped; the oldest held is " +
                             std::to_string(first_seq),
                         ERANGE);
  }
  return Status();
}

}  // namespace

struct WsApi::Connection {
  uint32_t next_channel = 1;
  std::map<uint32_t, std::unique_ptr<Attachment>> channels;
  std::map<std::string, uint32_t> by_command;
  std::map<std::string, std::unique_ptr<AgentAttachment>> agents;  // by session id
  std::weak_ptr<WsConnection> ws;
  std::map<std::string, int64_t> watches;  // sandbox.watch: sandbox id -> the last event seq sent
};

WsApi::WsApi(supervisor::SandboxManager& manager, supervisor::SessionRunner& agents,
             supervisor::SandboxEvents& events, std::shared_ptr<supervisor::RateLimiter> limiter)
    : manager_(manager), agents_(agents), events_(events), limiter_(std::move(limiter)) {}

WsApi::~WsApi() = default;

void WsApi::Publish(const supervisor::EventRow& event) {
  for (auto& [connection_id, attached] : connections_) {
    auto watch = attached->watches.find(event.sandbox_id);
    if (watch == attached->watches.end() || event.seq <= watch->second) continue;
    auto ws = attached->ws.lock();
    if (!ws) continue;
    watch->second = event.seq;
    ws->SendText(SandboxEventJson(event).dump());
  }
}

void WsApi::OnOpen(const std::shared_ptr<WsConnection>& connection) {
  connections_[connection->id()] = std::make_unique<Connection>();
  connections_[connection->id()]->ws = connection;
  std::weak_ptr<WsConnection> weak = connection;
  connection->SetOnDrain([this, weak] {
    auto ws = weak.lock();
    if (!ws) return;
    auto it = connections_.find(ws->id());
    if (it == connections_.end()) return;
    for (auto& [channel, attachment] : it->second->channels) attachment->command().ResumeOutput();
  });
}

void WsApi::OnClose(const std::shared_ptr<WsConnection>& connection) {
  auto it = connections_.find(connection->id());
  if (it == connections_.end()) return;
  for (auto& [channel, attachment] : it->second->channels) {
    attachment->command().stream().Unsubscribe(attachment.get());
    // The slow subscriber is gone: its command may read again.
    attachment->command().ResumeOutput();
  }
  for (auto& [id, attachment] : it->second->agents) attachment->session().events().Unsubscribe(attachment.get());
  connections_.erase(it);
}

void WsApi::OnBinary(const std::shared_ptr<WsConnection>& connection, std::string message) {
  auto frame = DecodeFrame(message);
  if (!frame.ok() || frame->header.type != FrameType::kStdin) {
    connection->Close(1002, "bad binary frame");
    return;
  }
  Connection& attached = *connections_[connection->id()];
  auto it = attached.channels.find(frame->header.channel);
  if (it == attached.channels.end()) {
    connection->SendText(json{{"event", "error"},
                              {"error", {{"code", "not_found"}, {"message", "no such channel"}}}}
                             .dump());
    return;
  }
  supervisor::Command& command = it->second->command();
  Status written = command.WriteStdin(std::string(frame->data));
  if (written.ok()) PushBackOnInput(connection, command);
  if (!written.ok()) {
    connection->SendText(json{{"event", "error"},
                              {"channel", frame->header.channel},
                              {"error", {{"code", ErrorCodeName(ErrorCodeFor(written))}, {"message", written.message()}}}}
                             .dump());
  }
}

void WsApi::OnText(const std::shared_ptr<WsConnection>& connection, std::string message) {
  json request = json::parse(message, nullptr, false);
  json id = nullptr;
  if (request.is_object() && request.contains("id")) id = request["id"];
  auto reply_error = [&](const Status& status) {
    ErrorCode code = ErrorCodeFor(status);
    json error = {{"code", ErrorCodeName(code)},
                  {"message", code == ErrorCode::kInternal ? "internal error" : status.message()}};
    if (code == ErrorCode::kInternal) LogError("api", "internal error", {{"error", status.ToString()}});
    connection->SendText(json{{"id", id}, {"ok", false}, {"error", error}}.dump());
  };
  if (!request.is_object() || !request.contains("op") || !request["op"].is_string()) {
    return reply_error(Status::Error("a request is a JSON object with an \"op\"", EINVAL));
  }
  const std::string op = request["op"].get<std::string>();
  // Input, resizes and pings are the stream itself, not requests: only the rest is counted.
  const bool counted = op != "stdin" && op != "resize" && op != "ping" && op != "close_stdin";
  if (counted && !connection->auth().admin && !limiter_->Allow(connection->auth().UserKey())) {
    return reply_error(RateLimitedError(*limiter_, connection->auth()));
  }
  auto result = Dispatch(connection, op, request);
  if (!result.ok()) {
    if (result.status().error_number() == ERANGE) {
      // stream_gap: say what is still held.
      json error = {{"code", "stream_gap"}, {"message", result.status().message()}};
      auto command = manager_.FindCommand(CallerOfToken(connection->auth()), request.contains("command") && request["command"].is_string() ? request["command"].get<std::string>() : std::string());
      if (command.ok()) error["first_seq"] = (*command)->stream().first_seq();
      connection->SendText(json{{"id", id}, {"ok", false}, {"error", error}}.dump());
      return;
    }
    return reply_error(result.status());
  }
  connection->SendText(json{{"id", id}, {"ok", true}, {"result", *result}}.dump());
  // Replay and live events follow the reply.
  if (pending_) {
    auto pending = std::move(pending_);
    pending();
  }
}

StatusOr<json> WsApi::Dispatch(const std::shared_ptr<WsConnection>& connection, const std::string& op,
                               const json& request) {
  const AuthContext& auth = connection->auth();
  Connection& attached = *connections_[connection->id()];
  if (op == "ping") return json::object();
  if (op == "auth") {
    // A fresh token for this connection (same user): it stays open past the old one's expiry.
    if (!request.contains("token") || !request["token"].is_string()) {
      return Status::Error("token: expected a string", EINVAL);
    }
    ASSIGN_OR_RETURN(int64_t exp, connection->Renew(request["token"].get<std::string>()));
    return json{{"exp", exp}};
  }
  if (op == "exec") return Exec(connection, attached, auth, request);
  if (op == "attach") return Attach(connection, attached, auth, request);
  if (op.rfind("session.", 0) == 0) return AgentOp(connection, attached, auth, op, request);
  if (op == "sandbox.watch" || op == "sandbox.unwatch") return WatchOp(connection, attached, auth, op, request);
  return CommandOp(connection, attached, auth, op, request);
}

StatusOr<json> WsApi::CommandOp(const std::shared_ptr<WsConnection>& connection, Connection& attached,
                                const AuthContext& auth, const std::string& op, const json& request) {
  ASSIGN_OR_RETURN(const std::string command_id, IdField(request, "command", "command id"));
  auto found = attached.by_command.find(command_id);
  if (found == attached.by_command.end()) {
    // Not attached here: it must still be the caller's.
    RETURN_IF_ERROR(manager_.FindCommand(CallerOfToken(auth), command_id).status());
    return Status::Error("command " + command_id + " is not attached on this connection", EBUSY);
  }
  Attachment& attachment = *attached.channels[found->second];
  supervisor::Command& command = attachment.command();
  if (op == "detach") {
    command.stream().Unsubscribe(&attachment);
    command.ResumeOutput();
    attached.channels.erase(found->second);
    attached.by_command.erase(found);
  } else if (op == "stdin") {
    if (!request.contains("data") || !request["data"].is_string()) {
      return Status::Error("data: expected base64 text", EINVAL);
    }
    auto data = Base64DecodeEither(request["data"].get<std::string>());
    if (!data) return Status::Error("data: not valid base64", EINVAL);
    RETURN_IF_ERROR(command.WriteStdin(std::move(*data)));
    PushBackOnInput(connection, command);
  } else if (op == "close_stdin") {
    RETURN_IF_ERROR(command.CloseStdin());
  } else if (op == "signal") {
    int signal = request.contains("signal") ? SignalNumber(request["signal"]) : -1;
    if (signal < 0) return Status::Error("signal: expected a name like \"TERM\" or a number", EINVAL);
    RETURN_IF_ERROR(command.Signal(signal));
  } else if (op == "resize") {
    std::optional<uint64_t> rows, cols;
    RETURN_IF_ERROR(OptionalUint(request, "rows", rows));
    RETURN_IF_ERROR(OptionalUint(request, "cols", cols));
    if (!rows || !cols || *rows == 0 || *cols == 0 || *rows > 10000 || *cols > 10000) {
      return Status::Error("resize: rows and cols between 1 and 10000", EINVAL);
    }
    RETURN_IF_ERROR(command.Resize(static_cast<uint16_t>(*rows), static_cast<uint16_t>(*cols)));
  } else {
    return Status::Error("unknown op \"" + op + "\"", EINVAL);
  }
  return json::object();
}

// sandbox.watch: the sandbox's event log from after_seq on (replayed from the store), then its
// events as they are appended. sandbox.unwatch ends that.
StatusOr<json> WsApi::WatchOp(const std::shared_ptr<WsConnection>& connection, Connection& attached,
                              const AuthContext& auth, const std::string& op, const json& request) {
  ASSIGN_OR_RETURN(const std::string id, IdField(request, "sandbox", "sandbox id"));
  if (op == "sandbox.unwatch") {
    if (attached.watches.erase(id) == 0) return Status::Error("sandbox " + id + " is not watched here", EBUSY);
    return json::object();
  }
  std::optional<uint64_t> after;
  RETURN_IF_ERROR(OptionalUint(request, "after_seq", after));
  ASSIGN_OR_RETURN(supervisor::SandboxRow row, manager_.Get(CallerOfToken(auth), id));
  if (attached.watches.count(id)) return Status::Error("sandbox " + id + " is already watched here", EBUSY);
  attached.watches[id] = static_cast<int64_t>(after.value_or(0));
  std::weak_ptr<WsConnection> weak = connection;
  pending_ = [this, weak, id] { Replay(weak, id); };
  return json{{"sandbox", row.id}};
}

void WsApi::Replay(const std::weak_ptr<WsConnection>& weak, const std::string& id) {
  // Replayed here, on the event loop, where Publish runs too: an event appended meanwhile comes
  // after these (Publish skips what was already sent).
  auto ws = weak.lock();
  auto it = ws ? connections_.find(ws->id()) : connections_.end();
  if (it == connections_.end()) return;
  for (;;) {
    auto watch = it->second->watches.find(id);
    if (watch == it->second->watches.end()) return;
    auto events = events_.List(id, watch->second, 500);
    if (!events.ok()) {
      LogError("api", "cannot replay a sandbox's events", {{"sandbox", id}, {"error", events.status().ToString()}});
      return;
    }
    for (const auto& event : *events) {
      watch->second = event.seq;
      ws->SendText(SandboxEventJson(event).dump());
    }
    if (events->size() < 500) return;
  }
}

// session.attach {session, after_seq?}, session.detach, session.send {session, text},
// session.tool_result, session.permission, session.interrupt, session.abort, session.close.
StatusOr<json> WsApi::AgentOp(const std::shared_ptr<WsConnection>& connection, Connection& attached,
                              const AuthContext& auth, const std::string& op, const json& request) {
  if (!TokenHasScope(auth, kScopeSessions)) return ScopeError(kScopeSessions);
  ASSIGN_OR_RETURN(const std::string id, IdField(request, "session", "session id"));
  const Caller caller = CallerOfToken(auth);
  if (op == "session.attach") return AttachAgent(connection, attached, caller, id, request);
  if (op == "session.detach") {
    auto it = attached.agents.find(id);
    if (it == attached.agents.end()) return Status::Error("session " + id + " is not attached here", EBUSY);
    it->second->session().events().Unsubscribe(it->second.get());
    attached.agents.erase(it);
    return json::object();
  }
  if (op == "session.send") {
    if (!request.contains("text") || !request["text"].is_string()) return Status::Error("text: expected a string", EINVAL);
    RETURN_IF_ERROR(agents_.Send(caller, id, request["text"].get<std::string>()));
    return json::object();
  }
  if (op == "session.tool_result" || op == "session.permission") return AnswerAgent(caller, id, op, request);
  if (op == "session.interrupt") RETURN_IF_ERROR(agents_.Interrupt(caller, id));
  else if (op == "session.abort") RETURN_IF_ERROR(agents_.Abort(caller, id));
  else if (op == "session.close") RETURN_IF_ERROR(agents_.Close(caller, id));
  else return Status::Error("unknown op \"" + op + "\"", EINVAL);
  return json::object();
}

StatusOr<json> WsApi::AttachAgent(const std::shared_ptr<WsConnection>& connection, Connection& attached,
                                  const Caller& caller, const std::string& id, const json& request) {
  std::optional<uint64_t> after;
  RETURN_IF_ERROR(OptionalUint(request, "after_seq", after));
  ASSIGN_OR_RETURN(auto agent, agents_.Find(caller, id));
  auto existing = attached.agents.find(id);
  if (existing != attached.agents.end()) {
    // Attached to a run of the session that has ended (it was resumed since): that attachment
    // has nothing more to say, the new run takes its place.
    if (&existing->second->session() == agent.get() || !existing->second->session().ended()) {
      return Status::Error("session " + id + " is already attached here", EBUSY);
    }
    existing->second->session().events().Unsubscribe(existing->second.get());
    attached.agents.erase(existing);
  }
  const uint64_t after_seq = after.value_or(0);
  RETURN_IF_ERROR(CheckReplay(after_seq, agent->events().first_seq(), agent->events().last_seq()));
  auto attachment = std::make_unique<AgentAttachment>(connection, agent);
  AgentAttachment* raw = attachment.get();
  attached.agents[id] = std::move(attachment);
  pending_ = [raw, agent, after_seq] { (void)agent->events().Subscribe(raw, after_seq); };
  return json{{"session", SessionJson(agent->row())}, {"first_seq", agent->events().first_seq()}};
}

// session.tool_result {call, content | text, is_error?}; session.permission {call, allow,
// message?, updated_input?}.
StatusOr<json> WsApi::AnswerAgent(const Caller& caller, const std::string& id, const std::string& op,
                                  const json& request) {
  if (!request.contains("call") || !request["call"].is_string()) return Status::Error("call: expected a call id", EINVAL);
  const std::string call = request["call"].get<std::string>();
  if (op == "session.tool_result") {
    json result = {{"isError", false}};
    if (request.contains("content")) {
      result["content"] = request["content"];
    } else if (request.contains("text") && request["text"].is_string()) {
      result["content"] = json::array({{{"type", "text"}, {"text", request["text"]}}});
    } else {
      return Status::Error("content or text: the tool's result", EINVAL);
    }
    if (request.contains("is_error")) result["isError"] = request["is_error"];
    RETURN_IF_ERROR(agents_.AnswerTool(caller, id, call, std::move(result)));
    return json::object();
  }
  if (!request.contains("allow") || !request["allow"].is_boolean()) {
    return Status::Error("allow: expected true or false", EINVAL);
  }
  const std::string message = request.contains("message") && request["message"].is_string()
                                  ? request["message"].get<std::string>()
                                  : std::string();
  const json updated = request.contains("updated_input") ? request["updated_input"] : json();
  if (!updated.is_null() && !updated.is_object()) return Status::Error("updated_input: expected an object", EINVAL);
  RETURN_IF_ERROR(agents_.AnswerPermission(caller, id, call, request["allow"].get<bool>(), message, updated));
  return json::object();
}

StatusOr<json> WsApi::Exec(const std::shared_ptr<WsConnection>& connection, Connection& attached,
                           const AuthContext& auth, const json& request) {
  ASSIGN_OR_RETURN(supervisor::ExecSpec spec, ParseExecSpec(request));
  const char* scope = spec.pty ? kScopeTerminal : kScopeExec;
  if (!TokenHasScope(auth, scope)) return ScopeError(scope);
  ASSIGN_OR_RETURN(bool binary, OutputMode(request));
  ASSIGN_OR_RETURN(auto command, manager_.Exec(CallerOfToken(auth), CapsOfToken(auth), spec));
  uint32_t channel = AttachTo(connection, attached, command, binary);
  Attachment* attachment = attached.channels[channel].get();
  pending_ = [attachment, command] { (void)command->stream().Subscribe(attachment, 0); };
  return json{{"command", command->id()}, {"channel", channel}};
}

StatusOr<json> WsApi::Attach(const std::shared_ptr<WsConnection>& connection, Connection& attached,
                             const AuthContext& auth, const json& request) {
  ASSIGN_OR_RETURN(const std::string command_id, IdField(request, "command", "command id"));
  std::optional<uint64_t> after;
  RETURN_IF_ERROR(OptionalUint(request, "after_seq", after));
  ASSIGN_OR_RETURN(bool binary, OutputMode(request));
  ASSIGN_OR_RETURN(auto command, manager_.FindCommand(CallerOfToken(auth), command_id));
  const uint64_t after_seq = after.value_or(0);
  RETURN_IF_ERROR(CheckReplay(after_seq, command->stream().first_seq(), command->stream().last_seq()));
  if (attached.by_command.count(command->id())) {
    return Status::Error("command " + command->id() + " is already attached on this connection", EBUSY);
  }
  uint32_t channel = AttachTo(connection, attached, command, binary);
  Attachment* attachment = attached.channels[channel].get();
  pending_ = [attachment, command, after_seq] { (void)command->stream().Subscribe(attachment, after_seq); };
  return json{{"command", command->id()},
              {"channel", channel},
              {"first_seq", command->stream().first_seq()},
              {"state", command->ended() ? "exited" : "running"}};
}

uint32_t WsApi::AttachTo(const std::shared_ptr<WsConnection>& connection, Connection& attached,
                         const std::shared_ptr<supervisor::Command>& command, bool binary) {
  uint32_t channel = attached.next_channel++;
  attached.channels[channel] = std::make_unique<Attachment>(connection, command, channel, binary);
  attached.by_command[command->id()] = channel;
  return channel;
}

}  // namespace corral::api
