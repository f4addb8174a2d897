#include "api/daemon_api.h"

#include <signal.h>
#include <time.h>

#include <cerrno>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <regex>
#include <string_view>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "api/api_json.h"
#include "api/auth_mapping.h"
#include "api/ws_frames.h"
#include "common/base64.h"
#include "common/log.h"
#include "supervisor/full_network.h"
#include "supervisor/ids.h"
#include "supervisor/rate_limiter.h"
#include "supervisor/sandbox_files.h"
#include "supervisor/store_backup.h"
#include "supervisor/usage.h"

namespace corral::api {
namespace {

using nlohmann::json;
using supervisor::Caller;
using supervisor::SandboxRow;
using supervisor::SnapshotRow;


// ---- JSON helpers ----

// A sandbox's egress rules as stored; one made before there were rules has none.
json EgressJson(const SandboxRow& row) {
  json rules = row.egress_json.empty() ? json::object() : json::parse(row.egress_json, nullptr, false);
  if (!rules.is_object()) rules = json::object();
  for (const char* key : {"domains", "ports", "cidrs"}) {
    if (!rules.contains(key)) rules[key] = json::array();
  }
  return rules;
}

json SandboxJson(const SandboxRow& row, bool with_owner) {
  json limits = json::object();
  auto parsed = supervisor::ParseLimits(row.limits_json);
  if (parsed.ok()) {
    limits = {{"memory_bytes", parsed->memory_bytes},
              {"cpus", static_cast<double>(parsed->cpu_millicores) / 1000.0},
              {"pids", parsed->pids},
              {"disk_bytes", parsed->disk_bytes}};
  }
  json j = {{"id", row.id},
            {"name", row.name},
            {"image", row.image},
            {"state", row.state},
            {"limits", limits},
            {"idle_timeout_s", row.idle_timeout_s},
            {"created_at", row.created_at},
            {"last_active_at", row.last_active_at},
            {"source", row.source},
            {"egress", EgressJson(row)},
            {"network", row.network}};
  if (with_owner) {
    j["iss"] = row.iss;
    j["sub"] = row.sub;
  }
  return j;
}

json CommandJson(const supervisor::CommandRow& row) {
  json j = {{"id", row.id},
            {"sandbox", row.sandbox_id},
            {"argv", json::parse(row.argv_json, nullptr, false)},
            {"pty", row.pty},
            {"state", row.state},
            {"created_at", row.created_at},
            {"ended_at", row.ended_at}};
  if (!row.outcome_json.empty()) j["outcome"] = json::parse(row.outcome_json, nullptr, false);
  return j;
}

// The token's meaning to the supervisor (api/auth_mapping.h), by shorter names.
supervisor::Budget BudgetOf(const AuthContext& auth) { return BudgetOfToken(auth); }
Caller CallerOf(const AuthContext& auth) { return CallerOfToken(auth); }
supervisor::UserCaps CapsOf(const AuthContext& auth) { return CapsOfToken(auth); }

Status RateLimited(supervisor::RateLimiter& limiter, const AuthContext& auth) {
  return Status::Error("rate limit: at most " + std::to_string(limiter.per_minute()) +
                           " requests a minute per user; retry in " +
                           std::to_string(limiter.RetryAfterSeconds(auth.UserKey())) + " s",
                       EUSERS);
}

bool HasScope(const AuthContext& auth, const char* scope) { return TokenHasScope(auth, scope); }

json SessionJson(const supervisor::SessionRow& row) {
  json j = {{"id", row.id},
            {"sandbox", row.sandbox_id},
            {"state", row.state},
            {"agent_session", row.agent_session},
            {"parent", row.parent_id},
            {"options", json::parse(row.options_json, nullptr, false)},
            {"turns", row.turns},
            {"cost_usd", supervisor::FormatMicroUsd(row.cost_micro_usd)},
            {"created_at", row.created_at},
            {"updated_at", row.updated_at},
            {"ended_at", row.ended_at}};
  j["outcome"] = row.outcome_json.empty() ? json() : json::parse(row.outcome_json, nullptr, false);
  return j;
}


StatusOr<supervisor::NewSession> ParseNewSession(const json& body) {
  supervisor::NewSession request;
  RETURN_IF_ERROR(RefuseUnknownFields(body, {"prompt", "model", "permission_mode", "cwd", "resume", "fork",
                                             "allowed_tools", "disallowed_tools", "partial", "tools"}));
  auto text = [&](const char* key, std::string& into) -> Status {
    if (!body.contains(key)) return Status();
    if (!body[key].is_string()) return Status::Error(std::string(key) + ": expected a string", EINVAL);
    into = body[key].get<std::string>();
    return Status();
  };
  auto list = [&](const char* key, std::vector<std::string>& into) -> Status {
    if (!body.contains(key)) return Status();
    if (!body[key].is_array()) return Status::Error(std::string(key) + ": expected a list of strings", EINVAL);
    for (const auto& item : body[key]) {
      if (!item.is_string()) return Status::Error(std::string(key) + ": expected a list of strings", EINVAL);
      into.push_back(item.get<std::string>());
    }
    return Status();
  };
  RETURN_IF_ERROR(text("prompt", request.prompt));
  RETURN_IF_ERROR(text("model", request.options.model));
  RETURN_IF_ERROR(text("permission_mode", request.options.permission_mode));
  RETURN_IF_ERROR(text("cwd", request.options.cwd));
  RETURN_IF_ERROR(text("resume", request.resume));
  RETURN_IF_ERROR(text("fork", request.fork));
  RETURN_IF_ERROR(list("allowed_tools", request.options.allowed_tools));
  RETURN_IF_ERROR(list("disallowed_tools", request.options.disallowed_tools));
  if (body.contains("partial")) {
    if (!body["partial"].is_boolean()) return Status::Error("partial: expected true or false", EINVAL);
    request.options.partial = body["partial"].get<bool>();
  }
  if (body.contains("tools")) {
    if (!body["tools"].is_array()) return Status::Error("tools: expected a list of tools", EINVAL);
    for (const auto& item : body["tools"]) {
      if (!item.is_object() || !item.contains("name") || !item["name"].is_string()) {
        return Status::Error("tools: each is {\"name\", \"description\"?, \"input_schema\"?}", EINVAL);
      }
      RETURN_IF_ERROR(RefuseUnknownFields(item, {"name", "description", "input_schema"}, "tools"));
      supervisor::ClientTool tool;
      tool.name = item["name"].get<std::string>();
      if (item.contains("description")) {
        if (!item["description"].is_string()) return Status::Error("tools: description: expected a string", EINVAL);
        tool.description = item["description"].get<std::string>();
      }
      if (item.contains("input_schema")) tool.input_schema = item["input_schema"];
      request.tools.push_back(std::move(tool));
    }
  }
  return request;
}

Status ScopeError(const char* scope) {
  return Status::Error(std::string("this token lacks the \"") + scope + "\" scope", EPERM);
}

json SnapshotJson(const SnapshotRow& row, bool with_owner) {
  json j = {{"id", row.id},           {"sandbox", row.sandbox_id}, {"image", row.image},
            {"created_at", row.created_at}, {"bytes", row.bytes}};
  auto limits = supervisor::ParseLimits(row.limits_json);
  if (limits.ok()) j["disk_bytes"] = limits->disk_bytes;
  if (with_owner) {
    j["iss"] = row.iss;
    j["sub"] = row.sub;
  }
  return j;
}



StatusOr<supervisor::CreateRequest> ParseCreate(const json& body) {
  supervisor::CreateRequest request;
  RETURN_IF_ERROR(RefuseUnknownFields(
      body, {"name", "image", "start", "snapshot", "idle_timeout_s", "limits", "egress", "network", "unsafe"}));
  if (body.contains("network")) {
    if (!body["network"].is_string()) return Status::Error("network: expected \"loopback\" or \"full\"", EINVAL);
    request.network = body["network"].get<std::string>();
  }
  // Dangerous options are named twice: the option itself, and an "unsafe" entry that says the
  // caller means it (and the token needs the matching unsafe: scope).
  bool unsafe_full_network = false;
  if (body.contains("unsafe")) {
    const json& unsafe = body["unsafe"];
    if (!unsafe.is_array()) return Status::Error("unsafe: expected an array like [\"full_network\"]", EINVAL);
    for (const json& entry : unsafe) {
      if (!entry.is_string() || entry.get<std::string>() != supervisor::kFullNetworkUnsafe) {
        return Status::Error("unsafe: " + entry.dump() + " is not an unsafe option (\"full_network\")", EINVAL);
      }
      unsafe_full_network = true;
    }
  }
  if (request.network == supervisor::kNetworkFull && !unsafe_full_network) {
    return Status::Error("network \"full\" gives the sandbox a real network interface: say so with \"unsafe\": [\"full_network\"]",
                         EINVAL);
  }
  if (unsafe_full_network && request.network != supervisor::kNetworkFull) {
    return Status::Error("unsafe: \"full_network\" without \"network\": \"full\"", EINVAL);
  }
  if (body.contains("egress")) {
    if (!body["egress"].is_object()) return Status::Error("egress: expected an object {\"domains\", \"ports\", \"cidrs\"}", EINVAL);
    request.egress_json = body["egress"].dump();
  }
  if (body.contains("name")) {
    if (!body["name"].is_string()) return Status::Error("name: expected a string", EINVAL);
    request.name = body["name"].get<std::string>();
  }
  if (body.contains("image")) {
    if (!body["image"].is_string()) return Status::Error("image: expected a string", EINVAL);
    request.image = body["image"].get<std::string>();
  }
  if (body.contains("start")) {
    if (!body["start"].is_boolean()) return Status::Error("start: expected true or false", EINVAL);
    request.start = body["start"].get<bool>();
  }
  if (body.contains("snapshot")) {
    if (!body["snapshot"].is_string()) return Status::Error("snapshot: expected a string", EINVAL);
    request.snapshot = body["snapshot"].get<std::string>();
  }
  RETURN_IF_ERROR(OptionalUint(body, "idle_timeout_s", request.idle_timeout_s));
  if (body.contains("limits")) {
    const json& limits = body["limits"];
    if (!limits.is_object()) return Status::Error("limits: expected an object", EINVAL);
    for (const auto& [key, value] : limits.items()) {
      if (key != "memory_bytes" && key != "cpus" && key != "pids" && key != "disk_bytes") {
        return Status::Error("limits: unknown limit \"" + key + "\"", EINVAL);
      }
    }
    RETURN_IF_ERROR(OptionalUint(limits, "memory_bytes", request.memory_bytes));
    RETURN_IF_ERROR(OptionalUint(limits, "pids", request.pids));
    RETURN_IF_ERROR(OptionalUint(limits, "disk_bytes", request.disk_bytes));
    if (limits.contains("cpus")) {
      if (!limits["cpus"].is_number() || limits["cpus"].get<double>() <= 0) {
        return Status::Error("limits.cpus: expected a positive number", EINVAL);
      }
      request.cpu_millicores = static_cast<uint64_t>(limits["cpus"].get<double>() * 1000 + 0.5);
    }
  }
  return request;
}

// ---- Files ----

json FileInfoJson(const supervisor::FileInfo& info) {
  char mode[8];
  snprintf(mode, sizeof(mode), "%04o", info.mode);
  return {{"name", info.name}, {"type", info.type}, {"size", info.size}, {"mode", mode}, {"mtime", info.mtime}};
}

// Query flags: "true"/"1" or "false"/"0"; absent: the default.
StatusOr<bool> QueryBool(const HttpRequest& request, const char* key, bool fallback) {
  auto it = request.query.find(key);
  if (it == request.query.end()) return fallback;
  if (it->second == "true" || it->second == "1") return true;
  if (it->second == "false" || it->second == "0") return false;
  return Status::Error(std::string(key) + ": expected true or false", EINVAL);
}

StatusOr<uint32_t> QueryMode(const HttpRequest& request, uint32_t fallback) {
  auto it = request.query.find("mode");
  if (it == request.query.end()) return fallback;
  char* end = nullptr;
  unsigned long mode = strtoul(it->second.c_str(), &end, 8);
  if (it->second.empty() || *end != '\0' || mode > 07777) return Status::Error("mode: expected octal like 0644", EINVAL);
  return static_cast<uint32_t>(mode);
}

StatusOr<std::string> QueryPath(const HttpRequest& request, const char* key = "path") {
  auto it = request.query.find(key);
  if (it == request.query.end() || it->second.empty()) {
    return Status::Error(std::string(key) + ": required (an absolute path inside the sandbox)", EINVAL);
  }
  return it->second;
}

// Runs one file operation on the worker pool (file I/O never blocks the event loop) with the
// sandbox's root and the agent's ids, then answers on the loop.
void FileOp(boost::asio::io_context& io, boost::asio::thread_pool& pool, supervisor::SandboxManager& manager,
            const supervisor::DaemonConfig& config, HttpRequest request, Responder respond,
            std::function<HttpResponse(const supervisor::SandboxFiles&, HttpRequest&)> op) {
  if (!HasScope(request.auth, kScopeFiles)) return respond(ErrorResponse(ScopeError(kScopeFiles)));
  auto access = manager.OpenFiles(CallerOf(request.auth), request.params["id"]);
  if (!access.ok()) return respond(ErrorResponse(access.status()));
  auto shared = std::make_shared<supervisor::FileAccess>(std::move(*access));
  auto req = std::make_shared<HttpRequest>(std::move(request));
  boost::asio::post(pool, [&io, shared, req, respond, op, max = config.max_file_bytes] {
    supervisor::SandboxFiles files(shared->root.get(), shared->uid, shared->gid, max);
    HttpResponse response = op(files, *req);
    boost::asio::post(io, [respond, response = std::move(response)]() mutable { respond(std::move(response)); });
  });
}

void RegisterFiles(Server& server, boost::asio::io_context& io, boost::asio::thread_pool& pool,
                   supervisor::SandboxManager& manager, const supervisor::DaemonConfig& config) {
  using Op = std::function<HttpResponse(const supervisor::SandboxFiles&, HttpRequest&)>;
  // Uploads (PUT) may be as large as a file may be.
  auto route = [&](const char* method, const char* op_name, Op op) {
    RouteOptions options;
    if (std::string_view(method) == "PUT") options.max_body_bytes = std::max(config.max_body_bytes, config.max_file_bytes);
    server.Route(method, std::string("/v1/sandboxes/{id}/fs/") + op_name, Auth::kRequired, options,
                 [&io, &pool, &manager, &config, op](HttpRequest request, Responder respond) {
                   FileOp(io, pool, manager, config, std::move(request), std::move(respond), op);
                 });
  };
  route("GET", "read", [](const supervisor::SandboxFiles& files, HttpRequest& request) {
    auto path = QueryPath(request);
    if (!path.ok()) return ErrorResponse(path.status());
    auto data = files.Read(*path);
    if (!data.ok()) return ErrorResponse(data.status());
    HttpResponse response;
    response.content_type = "application/octet-stream";
    response.body = std::move(*data);
    return response;
  });
  route("PUT", "write", [](const supervisor::SandboxFiles& files, HttpRequest& request) {
    auto path = QueryPath(request);
    auto append = QueryBool(request, "append", false);
    auto mode = QueryMode(request, 0644);
    if (!path.ok()) return ErrorResponse(path.status());
    if (!append.ok()) return ErrorResponse(append.status());
    if (!mode.ok()) return ErrorResponse(mode.status());
    auto size = files.Write(*path, request.body, *mode, *append);
    if (!size.ok()) return ErrorResponse(size.status());
    return JsonResponse(200, {{"path", *path}, {"size", *size}});
  });
  route("GET", "stat", [](const supervisor::SandboxFiles& files, HttpRequest& request) {
    auto path = QueryPath(request);
    if (!path.ok()) return ErrorResponse(path.status());
    auto info = files.Stat(*path);
    if (!info.ok()) return ErrorResponse(info.status());
    json j = FileInfoJson(*info);
    j["path"] = *path;
    return JsonResponse(200, j);
  });
  route("GET", "list", [](const supervisor::SandboxFiles& files, HttpRequest& request) {
    auto path = QueryPath(request);
    if (!path.ok()) return ErrorResponse(path.status());
    auto entries = files.List(*path);
    if (!entries.ok()) return ErrorResponse(entries.status());
    json list = json::array();
    for (const auto& entry : *entries) list.push_back(FileInfoJson(entry));
    return JsonResponse(200, {{"path", *path}, {"entries", list}});
  });
  route("POST", "mkdir", [](const supervisor::SandboxFiles& files, HttpRequest& request) {
    auto path = QueryPath(request);
    auto parents = QueryBool(request, "parents", false);
    auto mode = QueryMode(request, 0755);
    if (!path.ok()) return ErrorResponse(path.status());
    if (!parents.ok()) return ErrorResponse(parents.status());
    if (!mode.ok()) return ErrorResponse(mode.status());
    Status made = files.Mkdir(*path, *mode, *parents);
    if (!made.ok()) return ErrorResponse(made);
    return JsonResponse(200, {{"path", *path}});
  });
  route("POST", "remove", [](const supervisor::SandboxFiles& files, HttpRequest& request) {
    auto path = QueryPath(request);
    auto recursive = QueryBool(request, "recursive", false);
    if (!path.ok()) return ErrorResponse(path.status());
    if (!recursive.ok()) return ErrorResponse(recursive.status());
    Status removed = files.Remove(*path, *recursive);
    if (!removed.ok()) return ErrorResponse(removed);
    return JsonResponse(200, {{"path", *path}});
  });
  route("POST", "rename", [](const supervisor::SandboxFiles& files, HttpRequest& request) {
    auto from = QueryPath(request, "from");
    auto to = QueryPath(request, "to");
    if (!from.ok()) return ErrorResponse(from.status());
    if (!to.ok()) return ErrorResponse(to.status());
    Status renamed = files.Rename(*from, *to);
    if (!renamed.ok()) return ErrorResponse(renamed);
    return JsonResponse(200, {{"from", *from}, {"to", *to}});
  });
  route("GET", "tar", [](const supervisor::SandboxFiles& files, HttpRequest& request) {
    auto path = QueryPath(request);
    if (!path.ok()) return ErrorResponse(path.status());
    auto tar = files.TarDirectory(*path);
    if (!tar.ok()) return ErrorResponse(tar.status());
    HttpResponse response;
    response.content_type = "application/x-tar";
    response.body = std::move(*tar);
    return response;
  });
  route("PUT", "tar", [](const supervisor::SandboxFiles& files, HttpRequest& request) {
    auto path = QueryPath(request);
    if (!path.ok()) return ErrorResponse(path.status());
    auto entries = files.ExtractTar(*path, request.body);
    if (!entries.ok()) return ErrorResponse(entries.status());
    return JsonResponse(200, {{"path", *path}, {"entries", *entries}});
  });
}

// ---- WebSocket session ----

int SignalNumber(const json& value) {
  if (value.is_number_integer()) {
    int n = value.get<int>();
    return n > 0 && n < 65 ? n : -1;
  }
  if (!value.is_string()) return -1;
  std::string name = value.get<std::string>();
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  static const std::map<std::string, int> kNames = {
      {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"KILL", SIGKILL}, {"USR1", SIGUSR1},
      {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"CONT", SIGCONT}, {"STOP", SIGSTOP}, {"WINCH", SIGWINCH},
      {"ALRM", SIGALRM}, {"PIPE", SIGPIPE}};
  auto it = kNames.find(name);
  return it == kNames.end() ? -1 : it->second;
}

class WsApi;

// One command attached to one connection.
class Attachment : public supervisor::StreamSubscriber {
 public:
  Attachment(std::weak_ptr<WsConnection> ws, std::shared_ptr<supervisor::Command> command, uint32_t channel,
             bool binary)
      : ws_(std::move(ws)), command_(std::move(command)), channel_(channel), binary_(binary) {}

  void OnStreamEvent(const supervisor::StreamEvent& event) override {
    auto ws = ws_.lock();
    if (!ws || ws->closed()) return;
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
  bool StreamFull() const override {
    auto ws = ws_.lock();
    return ws && ws->full();
  }
  supervisor::Command& command() { return *command_; }
  const std::shared_ptr<supervisor::Command>& command_ptr() const { return command_; }

 private:
  std::weak_ptr<WsConnection> ws_;
  std::shared_ptr<supervisor::Command> command_;
  uint32_t channel_;
  bool binary_;
};

// A connection attached to an agent session's events: each is a text frame
// {"event": "session", "session", "seq", "kind", ...} and the last {"event": "session_end", ...}.
class AgentAttachment : public supervisor::StreamSubscriber {
 public:
  AgentAttachment(std::weak_ptr<WsConnection> ws, std::shared_ptr<supervisor::AgentSession> session)
      : ws_(std::move(ws)), session_(std::move(session)) {}

  void OnStreamEvent(const supervisor::StreamEvent& event) override {
    auto ws = ws_.lock();
    if (!ws || ws->closed()) return;
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
  bool StreamFull() const override {
    auto ws = ws_.lock();
    return ws && ws->full();
  }
  supervisor::AgentSession& session() { return *session_; }

 private:
  std::weak_ptr<WsConnection> ws_;
  std::shared_ptr<supervisor::AgentSession> session_;
};

struct Session {
  uint32_t next_channel = 1;
  std::map<uint32_t, std::unique_ptr<Attachment>> channels;
  std::map<std::string, uint32_t> by_command;
  std::map<std::string, std::unique_ptr<AgentAttachment>> agents;  // by session id
  std::weak_ptr<WsConnection> ws;
  std::map<std::string, int64_t> watches;  // sandbox.watch: sandbox id -> the last event seq sent
};

json SandboxEventJson(const supervisor::EventRow& event) {
  return {{"event", "sandbox"}, {"sandbox", event.sandbox_id}, {"seq", event.seq}, {"type", event.type},
          {"at", event.at}, {"data", json::parse(event.data_json, nullptr, false)}};
}

class WsApi : public WsHandler, public std::enable_shared_from_this<WsApi> {
 public:
  WsApi(supervisor::SandboxManager& manager, supervisor::SessionRunner& agents, supervisor::SandboxEvents& events,
        std::shared_ptr<supervisor::RateLimiter> limiter)
      : manager_(manager), agents_(agents), events_(events), limiter_(std::move(limiter)) {}

  // An event appended to the store (on the event loop): to every connection watching its sandbox.
  void Publish(const supervisor::EventRow& event) {
    for (auto& [connection_id, session] : sessions_) {
      auto watch = session->watches.find(event.sandbox_id);
      if (watch == session->watches.end() || event.seq <= watch->second) continue;
      auto ws = session->ws.lock();
      if (!ws) continue;
      watch->second = event.seq;
      ws->SendText(SandboxEventJson(event).dump());
    }
  }

  void OnOpen(const std::shared_ptr<WsConnection>& connection) override {
    sessions_[connection->id()] = std::make_unique<Session>();
    sessions_[connection->id()]->ws = connection;
    std::weak_ptr<WsConnection> weak = connection;
    connection->SetOnDrain([this, weak] {
      auto ws = weak.lock();
      if (!ws) return;
      auto it = sessions_.find(ws->id());
      if (it == sessions_.end()) return;
      for (auto& [channel, attachment] : it->second->channels) attachment->command().ResumeOutput();
    });
  }

  void OnClose(const std::shared_ptr<WsConnection>& connection) override {
    auto it = sessions_.find(connection->id());
    if (it == sessions_.end()) return;
    for (auto& [channel, attachment] : it->second->channels) {
      attachment->command().stream().Unsubscribe(attachment.get());
      // The slow subscriber is gone: its command may read again.
      attachment->command().ResumeOutput();
    }
    for (auto& [id, attachment] : it->second->agents) attachment->session().events().Unsubscribe(attachment.get());
    sessions_.erase(it);
  }

  void OnBinary(const std::shared_ptr<WsConnection>& connection, std::string message) override {
    auto frame = DecodeFrame(message);
    if (!frame.ok() || frame->header.type != FrameType::kStdin) {
      connection->Close(1002, "bad binary frame");
      return;
    }
    Session& session = *sessions_[connection->id()];
    auto it = session.channels.find(frame->header.channel);
    if (it == session.channels.end()) {
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

  void OnText(const std::shared_ptr<WsConnection>& connection, std::string message) override {
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
      return reply_error(RateLimited(*limiter_, connection->auth()));
    }
    auto result = Dispatch(connection, op, request);
    if (!result.ok()) {
      if (result.status().error_number() == ERANGE) {
        // stream_gap: say what is still held.
        json error = {{"code", "stream_gap"}, {"message", result.status().message()}};
        auto command = manager_.FindCommand(CallerOf(connection->auth()), request.contains("command") && request["command"].is_string() ? request["command"].get<std::string>() : std::string());
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

 private:
  // Input the command has not read yet piles up: read nothing more from this client until it
  // has (TCP carries the push-back to the client; nothing is dropped).
  static void PushBackOnInput(const std::shared_ptr<WsConnection>& connection, supervisor::Command& command) {
    if (!command.stdin_full()) return;
    connection->PauseReading();
    std::weak_ptr<WsConnection> weak = connection;
    command.OnStdinDrained([weak] {
      if (auto ws = weak.lock()) ws->ResumeReading();
    });
  }

  StatusOr<json> Dispatch(const std::shared_ptr<WsConnection>& connection, const std::string& op,
                          const json& request) {
    const AuthContext& auth = connection->auth();
    Session& session = *sessions_[connection->id()];
    if (op == "ping") return json::object();
    if (op == "auth") {
      // A fresh token for this connection (same user): it stays open past the old one's expiry.
      if (!request.contains("token") || !request["token"].is_string()) {
        return Status::Error("token: expected a string", EINVAL);
      }
      ASSIGN_OR_RETURN(int64_t exp, connection->Renew(request["token"].get<std::string>()));
      return json{{"exp", exp}};
    }
    if (op == "exec") return Exec(connection, session, auth, request);
    if (op == "attach") return Attach(connection, session, auth, request);
    if (op.rfind("session.", 0) == 0) return AgentOp(connection, session, auth, op, request);
    if (op == "sandbox.watch" || op == "sandbox.unwatch") return WatchOp(connection, session, auth, op, request);
    // The rest name an attached command.
    if (!request.contains("command") || !request["command"].is_string()) {
      return Status::Error("command: expected a command id", EINVAL);
    }
    const std::string command_id = request["command"].get<std::string>();
    auto found = session.by_command.find(command_id);
    if (found == session.by_command.end()) {
      // Not attached here: it must still be the caller's.
      RETURN_IF_ERROR(manager_.FindCommand(CallerOf(auth), command_id).status());
      return Status::Error("command " + command_id + " is not attached on this connection", EBUSY);
    }
    Attachment& attachment = *session.channels[found->second];
    supervisor::Command& command = attachment.command();
    if (op == "detach") {
      command.stream().Unsubscribe(&attachment);
      command.ResumeOutput();
      session.channels.erase(found->second);
      session.by_command.erase(found);
      return json::object();
    }
    if (op == "stdin") {
      if (!request.contains("data") || !request["data"].is_string()) {
        return Status::Error("data: expected base64 text", EINVAL);
      }
      auto data = Base64DecodeEither(request["data"].get<std::string>());
      if (!data) return Status::Error("data: not valid base64", EINVAL);
      RETURN_IF_ERROR(command.WriteStdin(std::move(*data)));
      PushBackOnInput(connection, command);
      return json::object();
    }
    if (op == "close_stdin") {
      RETURN_IF_ERROR(command.CloseStdin());
      return json::object();
    }
    if (op == "signal") {
      int signal = request.contains("signal") ? SignalNumber(request["signal"]) : -1;
      if (signal < 0) return Status::Error("signal: expected a name like \"TERM\" or a number", EINVAL);
      RETURN_IF_ERROR(command.Signal(signal));
      return json::object();
    }
    if (op == "resize") {
      std::optional<uint64_t> rows, cols;
      RETURN_IF_ERROR(OptionalUint(request, "rows", rows));
      RETURN_IF_ERROR(OptionalUint(request, "cols", cols));
      if (!rows || !cols || *rows == 0 || *cols == 0 || *rows > 10000 || *cols > 10000) {
        return Status::Error("resize: rows and cols between 1 and 10000", EINVAL);
      }
      RETURN_IF_ERROR(command.Resize(static_cast<uint16_t>(*rows), static_cast<uint16_t>(*cols)));
      return json::object();
    }
    return Status::Error("unknown op \"" + op + "\"", EINVAL);
  }

  // session.attach {session, after_seq?}, session.detach, session.send {session, text},
  // session.interrupt, session.abort, session.close.
  // sandbox.watch: the sandbox's event log from after_seq on (replayed from the store), then
  // its events as they are appended. sandbox.unwatch ends that.
  StatusOr<json> WatchOp(const std::shared_ptr<WsConnection>& connection, Session& session, const AuthContext& auth,
                         const std::string& op, const json& request) {
    if (!request.contains("sandbox") || !request["sandbox"].is_string()) {
      return Status::Error("sandbox: expected a sandbox id", EINVAL);
    }
    const std::string id = request["sandbox"].get<std::string>();
    if (op == "sandbox.unwatch") {
      if (session.watches.erase(id) == 0) return Status::Error("sandbox " + id + " is not watched here", EBUSY);
      return json::object();
    }
    std::optional<uint64_t> after;
    RETURN_IF_ERROR(OptionalUint(request, "after_seq", after));
    ASSIGN_OR_RETURN(SandboxRow row, manager_.Get(CallerOf(auth), id));
    if (session.watches.count(id)) return Status::Error("sandbox " + id + " is already watched here", EBUSY);
    session.watches[id] = static_cast<int64_t>(after.value_or(0));
    std::weak_ptr<WsConnection> weak = connection;
    pending_ = [this, weak, id] {
      // Replayed here, on the event loop, where Publish runs too: an event appended meanwhile
      // comes after these (Publish skips what was already sent).
      auto ws = weak.lock();
      auto it = ws ? sessions_.find(ws->id()) : sessions_.end();
      if (it == sessions_.end()) return;
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
    };
    return json{{"sandbox", row.id}};
  }

  StatusOr<json> AgentOp(const std::shared_ptr<WsConnection>& connection, Session& session, const AuthContext& auth,
                         const std::string& op, const json& request) {
    if (!HasScope(auth, kScopeSessions)) return ScopeError(kScopeSessions);
    if (!request.contains("session") || !request["session"].is_string()) {
      return Status::Error("session: expected a session id", EINVAL);
    }
    const std::string id = request["session"].get<std::string>();
    const Caller caller = CallerOf(auth);
    if (op == "session.attach") {
      std::optional<uint64_t> after;
      RETURN_IF_ERROR(OptionalUint(request, "after_seq", after));
      ASSIGN_OR_RETURN(auto agent, agents_.Find(caller, id));
      auto attached = session.agents.find(id);
      if (attached != session.agents.end()) {
        // Attached to a run of the session that has ended (it was resumed since): that
        // attachment has nothing more to say, the new run takes its place.
        if (&attached->second->session() == agent.get() || !attached->second->session().ended()) {
          return Status::Error("session " + id + " is already attached here", EBUSY);
        }
        attached->second->session().events().Unsubscribe(attached->second.get());
        session.agents.erase(attached);
      }
      const uint64_t after_seq = after.value_or(0);
      if (after_seq + 1 < agent->events().first_seq() && after_seq < agent->events().last_seq()) {
        return Status::Error("events after " + std::to_string(after_seq) + " were dropped; the oldest held is " +
                                 std::to_string(agent->events().first_seq()),
                             ERANGE);
      }
      auto attachment = std::make_unique<AgentAttachment>(connection, agent);
      AgentAttachment* raw = attachment.get();
      session.agents[id] = std::move(attachment);
      pending_ = [raw, agent, after_seq] { (void)agent->events().Subscribe(raw, after_seq); };
      return json{{"session", SessionJson(agent->row())}, {"first_seq", agent->events().first_seq()}};
    }
    if (op == "session.detach") {
      auto it = session.agents.find(id);
      if (it == session.agents.end()) return Status::Error("session " + id + " is not attached here", EBUSY);
      it->second->session().events().Unsubscribe(it->second.get());
      session.agents.erase(it);
      return json::object();
    }
    if (op == "session.send") {
      if (!request.contains("text") || !request["text"].is_string()) return Status::Error("text: expected a string", EINVAL);
      RETURN_IF_ERROR(agents_.Send(caller, id, request["text"].get<std::string>()));
      return json::object();
    }
    if (op == "session.tool_result") {
      if (!request.contains("call") || !request["call"].is_string()) return Status::Error("call: expected a call id", EINVAL);
      json result = {{"isError", false}};
      if (request.contains("content")) {
        result["content"] = request["content"];
      } else if (request.contains("text") && request["text"].is_string()) {
        result["content"] = json::array({{{"type", "text"}, {"text", request["text"]}}});
      } else {
        return Status::Error("content or text: the tool's result", EINVAL);
      }
      if (request.contains("is_error")) result["isError"] = request["is_error"];
      RETURN_IF_ERROR(agents_.AnswerTool(caller, id, request["call"].get<std::string>(), std::move(result)));
      return json::object();
    }
    if (op == "session.permission") {
      if (!request.contains("call") || !request["call"].is_string()) return Status::Error("call: expected a call id", EINVAL);
      if (!request.contains("allow") || !request["allow"].is_boolean()) {
        return Status::Error("allow: expected true or false", EINVAL);
      }
      const std::string message = request.contains("message") && request["message"].is_string()
                                      ? request["message"].get<std::string>()
                                      : std::string();
      const json updated = request.contains("updated_input") ? request["updated_input"] : json();
      if (!updated.is_null() && !updated.is_object()) return Status::Error("updated_input: expected an object", EINVAL);
      RETURN_IF_ERROR(agents_.AnswerPermission(caller, id, request["call"].get<std::string>(),
                                               request["allow"].get<bool>(), message, updated));
      return json::object();
    }
    if (op == "session.interrupt") RETURN_IF_ERROR(agents_.Interrupt(caller, id));
    else if (op == "session.abort") RETURN_IF_ERROR(agents_.Abort(caller, id));
    else if (op == "session.close") RETURN_IF_ERROR(agents_.Close(caller, id));
    else return Status::Error("unknown op \"" + op + "\"", EINVAL);
    return json::object();
  }

  StatusOr<json> Exec(const std::shared_ptr<WsConnection>& connection, Session& session, const AuthContext& auth,
                      const json& request) {
    supervisor::ExecSpec spec;
    if (!request.contains("sandbox") || !request["sandbox"].is_string()) {
      return Status::Error("sandbox: expected a sandbox id", EINVAL);
    }
    spec.sandbox = request["sandbox"].get<std::string>();
    if (!request.contains("argv") || !request["argv"].is_array() || request["argv"].empty()) {
      return Status::Error("argv: expected a non-empty array of strings", EINVAL);
    }
    for (const auto& arg : request["argv"]) {
      if (!arg.is_string()) return Status::Error("argv: expected strings", EINVAL);
      spec.argv.push_back(arg.get<std::string>());
    }
    if (request.contains("env")) {
      if (!request["env"].is_object()) return Status::Error("env: expected an object of strings", EINVAL);
      for (const auto& [key, value] : request["env"].items()) {
        if (!value.is_string() || key.empty() || key.find('=') != std::string::npos) {
          return Status::Error("env: bad entry \"" + key + "\"", EINVAL);
        }
        spec.env.push_back(key + "=" + value.get<std::string>());
      }
    }
    if (request.contains("cwd")) {
      if (!request["cwd"].is_string()) return Status::Error("cwd: expected a string", EINVAL);
      spec.cwd = request["cwd"].get<std::string>();
    }
    if (request.contains("user")) {
      if (!request["user"].is_string()) return Status::Error("user: expected \"agent\" or \"root\"", EINVAL);
      spec.user = request["user"].get<std::string>();
    }
    if (request.contains("stdin")) {
      if (!request["stdin"].is_boolean()) return Status::Error("stdin: expected true or false", EINVAL);
      spec.stdin_open = request["stdin"].get<bool>();
    }
    if (request.contains("pty") && !request["pty"].is_null() && request["pty"] != false) {
      const json& pty = request["pty"];
      if (!pty.is_object()) return Status::Error("pty: expected {\"rows\", \"cols\"}", EINVAL);
      std::optional<uint64_t> rows, cols;
      RETURN_IF_ERROR(OptionalUint(pty, "rows", rows));
      RETURN_IF_ERROR(OptionalUint(pty, "cols", cols));
      spec.pty = true;
      spec.rows = static_cast<uint16_t>(std::min<uint64_t>(rows.value_or(24), 10000));
      spec.cols = static_cast<uint16_t>(std::min<uint64_t>(cols.value_or(80), 10000));
      if (!HasScope(auth, kScopeTerminal)) return ScopeError(kScopeTerminal);
    } else if (!HasScope(auth, kScopeExec)) {
      return ScopeError(kScopeExec);
    }
    ASSIGN_OR_RETURN(bool binary, OutputMode(request));
    ASSIGN_OR_RETURN(auto command, manager_.Exec(CallerOf(auth), CapsOf(auth), spec));
    uint32_t channel = AttachTo(connection, session, command, binary);
    Attachment* attachment = session.channels[channel].get();
    pending_ = [attachment, command] { (void)command->stream().Subscribe(attachment, 0); };
    return json{{"command", command->id()}, {"channel", channel}};
  }

  StatusOr<json> Attach(const std::shared_ptr<WsConnection>& connection, Session& session, const AuthContext& auth,
                        const json& request) {
    if (!request.contains("command") || !request["command"].is_string()) {
      return Status::Error("command: expected a command id", EINVAL);
    }
    std::optional<uint64_t> after;
    RETURN_IF_ERROR(OptionalUint(request, "after_seq", after));
    ASSIGN_OR_RETURN(bool binary, OutputMode(request));
    ASSIGN_OR_RETURN(auto command, manager_.FindCommand(CallerOf(auth), request["command"].get<std::string>()));
    const uint64_t after_seq = after.value_or(0);
    if (after_seq + 1 < command->stream().first_seq() && after_seq < command->stream().last_seq()) {
      return Status::Error("events after " + std::to_string(after_seq) + " were dropped; the oldest held is " +
                               std::to_string(command->stream().first_seq()),
                           ERANGE);
    }
    if (session.by_command.count(command->id())) {
      return Status::Error("command " + command->id() + " is already attached on this connection", EBUSY);
    }
    uint32_t channel = AttachTo(connection, session, command, binary);
    Attachment* attachment = session.channels[channel].get();
    pending_ = [attachment, command, after_seq] { (void)command->stream().Subscribe(attachment, after_seq); };
    return json{{"command", command->id()},
                {"channel", channel},
                {"first_seq", command->stream().first_seq()},
                {"state", command->ended() ? "exited" : "running"}};
  }

  static StatusOr<bool> OutputMode(const json& request) {
    if (!request.contains("output")) return true;
    if (request["output"] == "binary") return true;
    if (request["output"] == "json") return false;
    return Status::Error("output: \"binary\" or \"json\"", EINVAL);
  }

  uint32_t AttachTo(const std::shared_ptr<WsConnection>& connection, Session& session,
                    const std::shared_ptr<supervisor::Command>& command, bool binary) {
    uint32_t channel = session.next_channel++;
    session.channels[channel] = std::make_unique<Attachment>(connection, command, channel, binary);
    session.by_command[command->id()] = channel;
    return channel;
  }

  supervisor::SandboxManager& manager_;
  supervisor::SessionRunner& agents_;
  supervisor::SandboxEvents& events_;
  std::shared_ptr<supervisor::RateLimiter> limiter_;
  std::map<uint64_t, std::unique_ptr<Session>> sessions_;
  std::function<void()> pending_;
};

}  // namespace

namespace {

// A non-negative integer query parameter; `fallback` when absent.
StatusOr<int64_t> QueryInt(const std::map<std::string, std::string>& query, const char* key, int64_t fallback) {
  auto it = query.find(key);
  if (it == query.end() || it->second.empty()) return fallback;
  static const std::regex kDigits("[0-9]{1,18}");
  if (!std::regex_match(it->second, kDigits)) {
    return Status::Error(std::string(key) + ": expected a non-negative integer", EINVAL);
  }
  return static_cast<int64_t>(std::stoll(it->second));
}

// GET /v1/admin/usage?issuer=&user=&from=&to=&window=&format=jsonl|csv&after_id=&limit=
StatusOr<HttpResponse> ExportLedger(const supervisor::Ledger& ledger, const std::map<std::string, std::string>& query) {
  auto get = [&](const char* key) {
    auto it = query.find(key);
    return it == query.end() ? std::string() : it->second;
  };
  const std::string issuer = get("issuer");
  const std::string user = get("user");
  if (!user.empty() && issuer.empty()) return Status::Error("user: needs issuer (a user is the pair)", EINVAL);
  const int64_t now = static_cast<int64_t>(time(nullptr));
  ASSIGN_OR_RETURN(int64_t from, QueryInt(query, "from", 0));
  ASSIGN_OR_RETURN(int64_t to, QueryInt(query, "to", now + 1));
  if (!get("window").empty()) {
    if (query.count("from") || query.count("to")) return Status::Error("window: not with from or to", EINVAL);
    supervisor::Budget calendar;
    ASSIGN_OR_RETURN(calendar.window, supervisor::ParseWindow(get("window")));
    const supervisor::WindowRange range = supervisor::CurrentWindow(calendar, now);
    from = range.start;
    to = range.end;
  }
  ASSIGN_OR_RETURN(int64_t after_id, QueryInt(query, "after_id", 0));
  constexpr int64_t kMaxExportRows = 100000;
  ASSIGN_OR_RETURN(int64_t limit, QueryInt(query, "limit", kMaxExportRows));
  if (limit == 0 || limit > kMaxExportRows) {
    return Status::Error("limit: 1 to " + std::to_string(kMaxExportRows), EINVAL);
  }
  const std::string format = get("format").empty() ? "jsonl" : get("format");
  if (format != "jsonl" && format != "csv") return Status::Error("format: jsonl or csv", EINVAL);
  ASSIGN_OR_RETURN(supervisor::LedgerPage page, ledger.Page({issuer, user, from, to, after_id, limit}));
  const std::vector<supervisor::LedgerRow>& rows = page.rows;
  HttpResponse response;
  if (format == "csv") {
    response.content_type = "text/csv; charset=utf-8";
    response.body = supervisor::LedgerCsvHeader();
    for (const auto& row : rows) response.body += supervisor::LedgerCsvLine(row);
  } else {
    response.content_type = "application/x-ndjson";
    for (const auto& row : rows) response.body += supervisor::LedgerRowJson(row).dump() + "\n";
  }
  // Paging: the next request passes after_id=<this>.
  if (page.more) response.headers.push_back({"X-Corral-Next-After-Id", std::to_string(rows.back().id)});
  return response;
}

}  // namespace

ErrorCode ErrorCodeFor(const Status& status) {
  switch (status.error_number()) {
    case ENOENT: return ErrorCode::kNotFound;
    case EINVAL: return ErrorCode::kBadRequest;
    case EBUSY:
    case EEXIST: return ErrorCode::kConflict;
    case EDQUOT: return ErrorCode::kLimitExceeded;
    case EKEYEXPIRED: return ErrorCode::kBudgetExhausted;
    case EKEYREJECTED: return ErrorCode::kUnauthorized;
    case EUSERS: return ErrorCode::kRateLimited;
    case ERANGE: return ErrorCode::kStreamGap;
    case EAGAIN: return ErrorCode::kUnavailable;
    case EPERM:
    case EACCES: return ErrorCode::kForbidden;
    case EFBIG:
    case E2BIG: return ErrorCode::kPayloadTooLarge;
    case ENOTSUP: return ErrorCode::kUnsupported;
    case EPIPE:
    case ESRCH:
    case ENOTTY: return ErrorCode::kConflict;
    case ENOTDIR:
    case EISDIR:
    case ELOOP:
    case ENAMETOOLONG: return ErrorCode::kBadRequest;
    default: return ErrorCode::kInternal;
  }
}

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

std::function<void(uint64_t)> RegisterApi(Server& server, boost::asio::io_context& io, boost::asio::thread_pool& pool,
                                         supervisor::SandboxManager& manager, supervisor::SessionRunner& sessions,
                                         supervisor::SandboxEvents& events, const supervisor::Ledger& ledger,
                                         const supervisor::DaemonConfig& config) {
  // Agent sessions.
  server.Route("POST", "/v1/sandboxes/{id}/sessions", Auth::kRequired, [&sessions](HttpRequest request, Responder respond) {
    if (!HasScope(request.auth, kScopeSessions)) return respond(ErrorResponse(ScopeError(kScopeSessions)));
    auto body = ParseBody(request.body);
    if (!body.ok()) return respond(ErrorResponse(body.status()));
    auto create = ParseNewSession(*body);
    if (!create.ok()) return respond(ErrorResponse(create.status()));
    create->sandbox_id = request.params["id"];
    create->budget = BudgetOf(request.auth);
    auto session = sessions.Create(CallerOf(request.auth), CapsOf(request.auth), std::move(*create));
    if (!session.ok()) return respond(ErrorResponse(session.status()));
    respond(JsonResponse(201, SessionJson((*session)->row())));
  });
  server.Route("GET", "/v1/sessions", Auth::kRequired, [&sessions](HttpRequest request, Responder respond) {
    auto rows = sessions.List(CallerOf(request.auth), request.query.count("sandbox") ? request.query["sandbox"] : "");
    if (!rows.ok()) return respond(ErrorResponse(rows.status()));
    json list = json::array();
    for (const auto& row : *rows) list.push_back(SessionJson(row));
    respond(JsonResponse(200, {{"sessions", list}}));
  });
  server.Route("GET", "/v1/sessions/{id}", Auth::kRequired, [&sessions](HttpRequest request, Responder respond) {
    auto row = sessions.Get(CallerOf(request.auth), request.params["id"]);
    if (!row.ok()) return respond(ErrorResponse(row.status()));
    respond(JsonResponse(200, SessionJson(*row)));
  });

  // Usage: the caller's current window; the operator's export of the ledger.
  server.Route("GET", "/v1/usage", Auth::kRequired, [&ledger, &manager](HttpRequest request, Responder respond) {
    if (request.auth.admin) {
      return respond(ErrorResponse(
          Status::Error("the admin socket has no budget of its own: GET /v1/admin/usage exports the ledger", EINVAL)));
    }
    auto report = ledger.Report(request.auth.iss, request.auth.sub, BudgetOf(request.auth),
                                static_cast<int64_t>(time(nullptr)),
                                manager.UnmeteredCompute(request.auth.iss, request.auth.sub));
    if (!report.ok()) return respond(ErrorResponse(report.status()));
    respond(JsonResponse(200, *report));
  });
  server.Route("GET", "/v1/admin/usage", Auth::kAdminOnly, [&ledger](HttpRequest request, Responder respond) {
    auto export_rows = ExportLedger(ledger, request.query);
    if (!export_rows.ok()) return respond(ErrorResponse(export_rows.status()));
    respond(std::move(*export_rows));
  });

  server.Route("GET", "/healthz", Auth::kNone, [](HttpRequest, Responder respond) {
    respond(JsonResponse(200, {{"status", "ok"}, {"version", kVersion}, {"protocol", kProtocolVersion}}));
  });

  // Sandboxes.
  server.Route("POST", "/v1/sandboxes", Auth::kRequired, [&manager](HttpRequest request, Responder respond) {
    if (!HasScope(request.auth, kScopeSandboxes)) return respond(ErrorResponse(ScopeError(kScopeSandboxes)));
    auto body = ParseBody(request.body);
    if (!body.ok()) return respond(ErrorResponse(body.status()));
    auto create = ParseCreate(*body);
    if (!create.ok()) return respond(ErrorResponse(create.status()));
    manager.Create(CallerOf(request.auth), CapsOf(request.auth), std::move(*create),
                   [respond, admin = request.auth.admin](StatusOr<SandboxRow> row) {
                     if (!row.ok()) return respond(ErrorResponse(row.status()));
                     respond(JsonResponse(201, SandboxJson(*row, admin)));
                   });
  });
  server.Route("GET", "/v1/sandboxes", Auth::kRequired, [&manager](HttpRequest request, Responder respond) {
    auto rows = manager.List(CallerOf(request.auth));
    if (!rows.ok()) return respond(ErrorResponse(rows.status()));
    json list = json::array();
    for (const auto& row : *rows) list.push_back(SandboxJson(row, request.auth.admin));
    respond(JsonResponse(200, {{"sandboxes", list}}));
  });
  server.Route("GET", "/v1/sandboxes/{id}", Auth::kRequired, [&manager](HttpRequest request, Responder respond) {
    auto row = manager.Get(CallerOf(request.auth), request.params["id"]);
    if (!row.ok()) return respond(ErrorResponse(row.status()));
    respond(JsonResponse(200, SandboxJson(*row, request.auth.admin)));
  });
  auto lifecycle = [&manager](const char* op) {
    return [&manager, op = std::string(op)](HttpRequest request, Responder respond) {
      if (!HasScope(request.auth, kScopeSandboxes)) return respond(ErrorResponse(ScopeError(kScopeSandboxes)));
      auto done = [respond, admin = request.auth.admin](StatusOr<SandboxRow> row) {
        if (!row.ok()) return respond(ErrorResponse(row.status()));
        respond(JsonResponse(200, SandboxJson(*row, admin)));
      };
      if (op == "start") manager.Start(CallerOf(request.auth), request.params["id"], done);
      else manager.Stop(CallerOf(request.auth), request.params["id"], done);
    };
  };
  server.Route("POST", "/v1/sandboxes/{id}/start", Auth::kRequired, lifecycle("start"));
  // Egress rules: read, and replace (a running sandbox's next proxy connection obeys them).
  server.Route("GET", "/v1/sandboxes/{id}/egress", Auth::kRequired, [&manager](HttpRequest request, Responder respond) {
    auto row = manager.Get(CallerOf(request.auth), request.params["id"]);
    if (!row.ok()) return respond(ErrorResponse(row.status()));
    respond(JsonResponse(200, EgressJson(*row)));
  });
  server.Route("PUT", "/v1/sandboxes/{id}/egress", Auth::kRequired, [&manager](HttpRequest request, Responder respond) {
    if (!HasScope(request.auth, kScopeSandboxes)) return respond(ErrorResponse(ScopeError(kScopeSandboxes)));
    auto body = ParseBody(request.body);
    if (!body.ok()) return respond(ErrorResponse(body.status()));
    if (!body->is_object()) {
      return respond(ErrorResponse(Status::Error("expected an object {\"domains\", \"ports\", \"cidrs\"}", EINVAL)));
    }
    auto row = manager.SetEgress(CallerOf(request.auth), CapsOf(request.auth), request.params["id"], body->dump());
    if (!row.ok()) return respond(ErrorResponse(row.status()));
    respond(JsonResponse(200, EgressJson(*row)));
  });
  // The sandbox's event log (lifecycle, command outcomes, egress decisions), oldest first, from
  // after_seq on: poll with the last seq seen.
  server.Route("GET", "/v1/sandboxes/{id}/events", Auth::kRequired, [&manager, &events](HttpRequest request, Responder respond) {
    auto row = manager.Get(CallerOf(request.auth), request.params["id"]);
    if (!row.ok()) return respond(ErrorResponse(row.status()));
    auto after = QueryInt(request.query, "after_seq", 0);
    if (!after.ok()) return respond(ErrorResponse(after.status()));
    auto limit = QueryInt(request.query, "limit", 1000);
    if (!limit.ok()) return respond(ErrorResponse(limit.status()));
    if (*limit < 1 || *limit > 1000) return respond(ErrorResponse(Status::Error("limit: 1 to 1000", EINVAL)));
    const std::string type = request.query.count("type") ? request.query.at("type") : "";
    auto listed = events.List(row->id, *after, *limit);
    if (!listed.ok()) return respond(ErrorResponse(listed.status()));
    json list = json::array();
    int64_t last = *after;
    for (const auto& event : *listed) {
      last = event.seq;
      if (!type.empty() && event.type != type && event.type.rfind(type + ".", 0) != 0) continue;
      list.push_back({{"seq", event.seq}, {"type", event.type}, {"at", event.at},
                      {"data", json::parse(event.data_json, nullptr, false)}});
    }
    respond(JsonResponse(200, {{"events", list}, {"last_seq", last}, {"more", static_cast<int64_t>(listed->size()) == *limit}}));
  });
  server.Route("POST", "/v1/sandboxes/{id}/stop", Auth::kRequired, lifecycle("stop"));
  server.Route("DELETE", "/v1/sandboxes/{id}", Auth::kRequired, [&manager](HttpRequest request, Responder respond) {
    if (!HasScope(request.auth, kScopeSandboxes)) return respond(ErrorResponse(ScopeError(kScopeSandboxes)));
    std::string id = request.params["id"];
    manager.Destroy(CallerOf(request.auth), id, [respond, id](StatusOr<bool> done) {
      if (!done.ok()) return respond(ErrorResponse(done.status()));
      respond(JsonResponse(200, {{"id", id}, {"state", "destroyed"}}));
    });
  });
  server.Route("POST", "/v1/sandboxes/{id}/snapshot", Auth::kRequired,
               [&manager](HttpRequest request, Responder respond) {
                 if (!HasScope(request.auth, kScopeSandboxes)) {
                   return respond(ErrorResponse(ScopeError(kScopeSandboxes)));
                 }
                 manager.Snapshot(CallerOf(request.auth), request.params["id"],
                                  [respond, admin = request.auth.admin](StatusOr<SnapshotRow> row) {
                                    if (!row.ok()) return respond(ErrorResponse(row.status()));
                                    respond(JsonResponse(201, SnapshotJson(*row, admin)));
                                  });
               });
  server.Route("POST", "/v1/sandboxes/{id}/fork", Auth::kRequired, [&manager](HttpRequest request, Responder respond) {
    if (!HasScope(request.auth, kScopeSandboxes)) return respond(ErrorResponse(ScopeError(kScopeSandboxes)));
    auto body = ParseBody(request.body);
    if (!body.ok()) return respond(ErrorResponse(body.status()));
    supervisor::ForkRequest fork;
    for (const auto& [key, value] : body->items()) {
      if (key == "name" && value.is_string()) {
        fork.name = value.get<std::string>();
      } else if (key == "start" && value.is_boolean()) {
        fork.start = value.get<bool>();
      } else if (key == "name" || key == "start") {
        return respond(ErrorResponse(Status::Error(key + ": expected a " + (key == "name" ? "string" : "boolean"), EINVAL)));
      } else {
        return respond(ErrorResponse(Status::Error("unknown field \"" + key + "\"", EINVAL)));
      }
    }
    manager.Fork(CallerOf(request.auth), CapsOf(request.auth), request.params["id"], std::move(fork),
                 [respond, admin = request.auth.admin](StatusOr<SandboxRow> row) {
                   if (!row.ok()) return respond(ErrorResponse(row.status()));
                   respond(JsonResponse(201, SandboxJson(*row, admin)));
                 });
  });
  server.Route("GET", "/v1/snapshots", Auth::kRequired, [&manager](HttpRequest request, Responder respond) {
    auto rows = manager.ListSnapshots(CallerOf(request.auth));
    if (!rows.ok()) return respond(ErrorResponse(rows.status()));
    json list = json::array();
    for (const auto& row : *rows) list.push_back(SnapshotJson(row, request.auth.admin));
    respond(JsonResponse(200, {{"snapshots", list}}));
  });
  server.Route("GET", "/v1/snapshots/{id}", Auth::kRequired, [&manager](HttpRequest request, Responder respond) {
    auto row = manager.GetSnapshot(CallerOf(request.auth), request.params["id"]);
    if (!row.ok()) return respond(ErrorResponse(row.status()));
    respond(JsonResponse(200, SnapshotJson(*row, request.auth.admin)));
  });
  server.Route("DELETE", "/v1/snapshots/{id}", Auth::kRequired, [&manager](HttpRequest request, Responder respond) {
    if (!HasScope(request.auth, kScopeSandboxes)) return respond(ErrorResponse(ScopeError(kScopeSandboxes)));
    std::string id = request.params["id"];
    manager.DeleteSnapshot(CallerOf(request.auth), id, [respond, id](StatusOr<bool> done) {
      if (!done.ok()) return respond(ErrorResponse(done.status()));
      respond(JsonResponse(200, {{"id", id}, {"state", "destroyed"}}));
    });
  });

  // Commands (read-only).
  server.Route("GET", "/v1/sandboxes/{id}/commands", Auth::kRequired,
               [&manager](HttpRequest request, Responder respond) {
                 auto rows = manager.ListCommands(CallerOf(request.auth), request.params["id"]);
                 if (!rows.ok()) return respond(ErrorResponse(rows.status()));
                 json list = json::array();
                 for (const auto& row : *rows) list.push_back(CommandJson(row));
                 respond(JsonResponse(200, {{"commands", list}}));
               });
  server.Route("GET", "/v1/sandboxes/{id}/commands/{cid}", Auth::kRequired,
               [&manager](HttpRequest request, Responder respond) {
                 auto row = manager.GetCommand(CallerOf(request.auth), request.params["id"], request.params["cid"]);
                 if (!row.ok()) return respond(ErrorResponse(row.status()));
                 respond(JsonResponse(200, CommandJson(*row)));
               });

  // Admin (unix socket only).
  // POST /v1/admin/backup {"path": "/abs/file"}: an online copy of the store
  // (supervisor/store_backup.h), made on the worker pool while the daemon serves.
  server.Route("POST", "/v1/admin/backup", Auth::kAdminOnly,
               [&io, &pool, db = config.state_dir + "/corrald.db"](HttpRequest request, Responder respond) {
    auto body = ParseBody(request.body);
    if (!body.ok()) return respond(ErrorResponse(body.status()));
    Status fields = RefuseUnknownFields(*body, {"path"});
    if (!fields.ok()) return respond(ErrorResponse(fields));
    if (!body->contains("path") || !(*body)["path"].is_string()) {
      return respond(ErrorResponse(Status::Error("path: expected the backup file's absolute path", EINVAL)));
    }
    const std::string path = (*body)["path"].get<std::string>();
    boost::asio::post(pool, [&io, db, path, respond] {
      const auto start = std::chrono::steady_clock::now();
      auto made = supervisor::BackupStore(db, path);
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      HttpResponse response;
      if (made.ok()) {
        LogInfo("admin", "store backed up", {{"path", path}, {"bytes", std::to_string(made->bytes)}});
        response = JsonResponse(201, {{"path", made->path}, {"bytes", made->bytes},
                                      {"schema_version", made->schema_version}, {"seconds", took}});
      } else {
        LogWarn("admin", "store backup failed", {{"path", path}, {"error", made.status().ToString()}});
        response = ErrorResponse(made.status());
      }
      boost::asio::post(io, [respond, response = std::move(response)]() mutable { respond(std::move(response)); });
    });
  });
  server.Route("GET", "/v1/admin/sandboxes", Auth::kAdminOnly, [&manager](HttpRequest request, Responder respond) {
    auto rows = manager.List(CallerOf(request.auth));
    if (!rows.ok()) return respond(ErrorResponse(rows.status()));
    json list = json::array();
    for (const auto& row : *rows) list.push_back(SandboxJson(row, true));
    respond(JsonResponse(200, {{"sandboxes", list}}));
  });

  RegisterFiles(server, io, pool, manager, config);
  // One bucket per user for HTTP requests and WebSocket ops together (api.requests_per_minute).
  auto limiter = std::make_shared<supervisor::RateLimiter>(config.requests_per_minute);
  server.SetRequestGate([limiter](const AuthContext& auth) -> std::optional<HttpResponse> {
    if (auth.admin || limiter->Allow(auth.UserKey())) return std::nullopt;
    HttpResponse response = ErrorResponse(RateLimited(*limiter, auth));
    response.headers.push_back({"Retry-After", std::to_string(limiter->RetryAfterSeconds(auth.UserKey()))});
    return response;
  });
  auto ws_api = std::make_shared<WsApi>(manager, sessions, events, limiter);
  // Every event the store appends (from any thread) reaches the watchers on the event loop.
  std::weak_ptr<WsApi> weak_api = ws_api;
  events.Watch([&io, weak_api](const supervisor::EventRow& event) {
    boost::asio::post(io, [weak_api, event] {
      if (auto api = weak_api.lock()) api->Publish(event);
    });
  });
  server.WebSocket("/v1/ws", ws_api);
  return [limiter](uint64_t requests_per_minute) {
    if (limiter->per_minute() != requests_per_minute) limiter->SetPerMinute(requests_per_minute);
  };
}

}  // namespace corral::api
