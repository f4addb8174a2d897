#include "supervisor/sessions/session_runner.h"

#include <openssl/rand.h>
#include <signal.h>
#include <time.h>

#include <cerrno>
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/unix_time.h"
#include "supervisor/ids.h"
#include "supervisor/sandboxes/claude_runtime.h"
#include "supervisor/sessions/image_agent.h"
#include "supervisor/sessions/session_events.h"
#include "supervisor/visibility.h"

namespace corral::supervisor {

using nlohmann::json;

namespace {

constexpr size_t kRecentSessions = 64;
constexpr size_t kMaxLineBytes = 16 << 20;  // one stream-json line (a large tool result)

std::string NewUuid() {
  unsigned char b[16];
  if (RAND_bytes(b, sizeof(b)) != 1) abort();
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);  // version 4
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);  // RFC 4122 variant
  char text[37];
  snprintf(text, sizeof(text), "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
           b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return text;
}

json OptionsJson(const SessionOptions& o) {
  return {{"model", o.model},
          {"permission_mode", o.permission_mode},
          {"allowed_tools", o.allowed_tools},
          {"disallowed_tools", o.disallowed_tools},
          {"partial", o.partial},
          {"cwd", o.cwd}};
}

SessionOptions OptionsOf(const std::string& text) {
  SessionOptions o;
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return o;
  o.model = j.value("model", "");
  o.permission_mode = j.value("permission_mode", o.permission_mode);
  if (j.contains("allowed_tools") && j["allowed_tools"].is_array()) o.allowed_tools = j["allowed_tools"];
  if (j.contains("disallowed_tools") && j["disallowed_tools"].is_array()) o.disallowed_tools = j["disallowed_tools"];
  o.partial = j.value("partial", false);
  o.cwd = j.value("cwd", "");
  return o;
}

// "a,b,c": a list as the agent's command line takes it.
std::string CommaList(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

Status CheckOptions(const SessionOptions& o) {
  static constexpr const char* kModes[] = {"default", "acceptEdits", "bypassPermissions", "plan"};
  bool known = false;
  for (const char* mode : kModes) known = known || o.permission_mode == mode;
  if (!known) {
    return Status::Error("permission_mode: one of default, acceptEdits, bypassPermissions, plan", EINVAL);
  }
  auto plain = [](const std::string& s) {
    if (s.empty() || s.size() > 200) return false;
    for (char c : s) {
      if (c < 0x20 || c == 0x7f) return false;
    }
    return true;
  };
  if (!o.model.empty() && !plain(o.model)) return Status::Error("model: not a model name", EINVAL);
  if (!o.cwd.empty() && (o.cwd[0] != '/' || !plain(o.cwd))) return Status::Error("cwd: an absolute path", EINVAL);
  for (const auto& tool : o.allowed_tools) {
    if (!plain(tool)) return Status::Error("allowed_tools: bad entry", EINVAL);
  }
  for (const auto& tool : o.disallowed_tools) {
    if (!plain(tool)) return Status::Error("disallowed_tools: bad entry", EINVAL);
  }
  return Status();
}

Status NotFound(const std::string& what) { return Status::Error(what + " not found", ENOENT); }

constexpr size_t kMaxClientTools = 64;

Status CheckTools(const std::vector<ClientTool>& tools) {
  if (tools.size() > kMaxClientTools) return Status::Error("tools: at most 64", EINVAL);
  std::set<std::string> names;
  for (const ClientTool& tool : tools) {
    // The API caps tool names at 64 characters, and the agent sees mcp__corral__<name>.
    bool ok = !tool.name.empty() && tool.name.size() <= 50;
    for (char c : tool.name) ok = ok && (isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
    if (!ok) return Status::Error("tools: a name is 1 to 50 characters of A-Z a-z 0-9 _ -: " + tool.name, EINVAL);
    if (tool.name == kPermissionTool) return Status::Error("tools: " + tool.name + " is the daemon's own", EINVAL);
    if (!names.insert(tool.name).second) return Status::Error("tools: " + tool.name + " twice", EINVAL);
    if (tool.description.size() > 4096) return Status::Error("tools: a description is at most 4096 bytes", EINVAL);
    if (!tool.input_schema.is_object()) return Status::Error("tools: input_schema must be a JSON schema object", EINVAL);
  }
  return Status();
}

// A new session's row (or a resumed one's, made current): initializing, with its options.
void PrepareRow(const SandboxRow& sandbox, const NewSession& request, bool resumed, SessionRow& row) {
  if (!resumed) {
    row.id = NewId("ses");
    row.sandbox_id = sandbox.id;
    row.iss = sandbox.iss;
    row.sub = sandbox.sub;
    row.agent_session = request.fork.empty() && !request.restored ? NewUuid() : "";  // a fork's: from the CLI
    row.created_at = UnixNow();
  }
  row.state = "initializing";
  row.options_json = OptionsJson(request.options).dump();
  row.budget = request.budget;
  row.outcome_json.clear();
  row.ended_at = 0;
  row.updated_at = UnixNow();
}

// The agent's environment: the model relay on the sandbox's loopback with the session's key,
// no update checks, telemetry or error reports (the sandbox has no network anyway; this spares
// the CLI its timeouts), and its todo tool.
std::vector<std::string> RelayEnv(uint64_t relay_port, const std::string& key) {
  return {"ANTHROPIC_BASE_URL=http://127.0.0.1:" + std::to_string(relay_port),
          "ANTHROPIC_API_KEY=" + key,
          "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1",
          "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
          // The todo list as one TodoWrite tool whose every call holds the whole list (the
          // session's `todo` events), not the task tools that change it an item at a time.
          "CLAUDE_CODE_ENABLE_TODO_TOOLS=1", "CLAUDE_CODE_ENABLE_TASKS=0"};
}

// A resume (the same session again) or a fork (a new one from its history) of `parent`: the
// row to start from and the CLI's flags that bring the history in. The working directory must be
// the parent's: Claude Code keeps transcripts per working directory.
Status StartFromParent(const SessionRow& parent, NewSession& request, SessionRow& row,
                       std::vector<std::string>& history) {
  const std::string& from = !request.resume.empty() ? request.resume : request.fork;
  const std::string parent_cwd = OptionsOf(parent.options_json).cwd;
  if (request.options.cwd.empty()) request.options.cwd = parent_cwd;
  if (request.options.cwd != parent_cwd) {
    return Status::Error("cwd: session " + from + " works in " + (parent_cwd.empty() ? "/home/agent" : parent_cwd) +
                             "; a resume or fork works there too",
                         EINVAL);
  }
  if (!request.resume.empty()) {
    row = parent;  // the same session, running again
    if (request.options.model.empty()) request.options = OptionsOf(parent.options_json);
    history = {"--resume", parent.agent_session};
  } else {
    row.parent_id = parent.id;
    history = {"--resume", parent.agent_session, "--fork-session"};
  }
  return Status();
}

// The Claude Code command line of a session: stream-json both ways, a new session id or the
// history flags, and the options.
std::vector<std::string> ClaudeArgv(const SessionOptions& options, const std::string& agent_session,
                                    const std::vector<std::string>& history) {
  std::vector<std::string> argv = {"claude", "-p", "--input-format", "stream-json", "--output-format", "stream-json",
                                   "--verbose", "--permission-mode", options.permission_mode};
  if (history.empty()) {
    argv.insert(argv.end(), {"--session-id", agent_session});
  } else {
    argv.insert(argv.end(), history.begin(), history.end());
  }
  if (!options.model.empty()) argv.insert(argv.end(), {"--model", options.model});
  if (!options.allowed_tools.empty()) argv.insert(argv.end(), {"--allowedTools", CommaList(options.allowed_tools)});
  if (!options.disallowed_tools.empty()) {
    argv.insert(argv.end(), {"--disallowedTools", CommaList(options.disallowed_tools)});
  }
  if (options.partial) argv.push_back("--include-partial-messages");
  return argv;
}

// Client tools, and permission requests when the mode asks: corral-mcp, with a key of its own,
// reaches the tool bridge on the sandbox's loopback at `bridge_port`. Adds its flags to `argv`
// and returns the tools the bridge offers.
json OfferBridge(const NewSession& request, bool asks, uint16_t bridge_port, std::vector<std::string>& argv) {
  json bridge_tools = json::array();
  std::vector<std::string> allowed = request.options.allowed_tools;
  for (const ClientTool& tool : request.tools) {
    bridge_tools.push_back({{"name", tool.name}, {"description", tool.description}, {"inputSchema", tool.input_schema}});
    allowed.push_back(std::string("mcp__corral__") + tool.name);  // the client's own tools need no asking
  }
  if (asks) {
    bridge_tools.push_back(
        {{"name", kPermissionTool},
         {"description", "Asks the user whether a tool may run."},
         {"inputSchema",
          {{"type", "object"},
           {"properties", {{"tool_name", {{"type", "string"}}}, {"input", {{"type", "object"}}}, {"tool_use_id", {{"type", "string"}}}}},
           {"required", {"tool_name", "input"}}}}});
    argv.insert(argv.end(), {"--permission-prompt-tool", std::string("mcp__corral__") + kPermissionTool});
  }
  json mcp = {{"mcpServers",
               {{"corral",
                 {{"type", "stdio"},
                  {"command", kMcpPathInSandbox},
                  {"env",
                   {{"CORRAL_TOOL_BRIDGE", "127.0.0.1:" + std::to_string(bridge_port)},
                    {"CORRAL_TOOL_KEY", "${CORRAL_TOOL_KEY}"}}}}}}}};
  argv.insert(argv.end(), {"--mcp-config", mcp.dump(), "--strict-mcp-config"});
  if (!request.tools.empty()) {
    // One --allowedTools: the last would win.
    auto flag = std::find(argv.begin(), argv.end(), "--allowedTools");
    if (flag != argv.end()) argv.erase(flag, flag + 2);
    argv.insert(argv.end(), {"--allowedTools", CommaList(allowed)});
  }
  return bridge_tools;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// One session

AgentSession::AgentSession(SessionRunner& runner, SessionRow row, size_t replay_bytes)
    : runner_(runner), row_(std::move(row)), events_(replay_bytes) {}

AgentSession::~AgentSession() {
  if (command_ && command_->stream().subscribed(this)) command_->stream().Unsubscribe(this);
}

// Text from the sandbox (the agent's stderr, a line that is not JSON) may be any bytes: invalid
// UTF-8 is replaced, not thrown over.
void AgentSession::Emit(const json& event) {
  events_.Append(StreamEvent::Kind::kOutput, 1, event.dump(-1, ' ', false, json::error_handler_t::replace));
}

void AgentSession::WatchSilence() {
  if (runner_.io_ == nullptr) return;
  if (row_.state != "processing" || ended_) {
    if (silence_) silence_->cancel();
    return;
  }
  if (!silence_) silence_ = std::make_unique<boost::asio::steady_timer>(*runner_.io_);
  silence_->expires_after(std::chrono::seconds(runner_.config_.agent_silence_timeout_s));
  std::weak_ptr<AgentSession> weak = weak_from_this();
  silence_->async_wait([weak](boost::system::error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->ended_ || self->row_.state != "processing") return;
    // Hung (or stuck in something that prints nothing): the turn cannot finish. The transcript
    // stays in the workspace; the session can be resumed.
    self->hung_ = true;
    self->Emit({{"kind", "agent_hung"}, {"silent_s", self->runner_.config_.agent_silence_timeout_s}});
    LogWarn("session", "agent printed nothing for too long: stopping it", {{"session", self->id()}});
    (void)self->command_->Signal(SIGKILL);
  });
}

void AgentSession::SetState(const std::string& state) {
  if (row_.state == state) return;
  row_.state = state;
  row_.updated_at = UnixNow();
  (void)runner_.store_.UpdateSession(row_);
  Emit({{"kind", "state"}, {"state", state}});
  WatchSilence();
}

void AgentSession::OnStreamEvent(const StreamEvent& event) {
  if (ended_) return;
  if (event.kind == StreamEvent::Kind::kExit) {
    if (!stdout_line_.empty()) OnLine(stdout_line_);
    stdout_line_.clear();
    End(event.data);
    return;
  }
  std::string& buffer = event.fd == 2 ? stderr_line_ : stdout_line_;
  std::string_view data = event.data;
  while (!data.empty()) {
    size_t newline = data.find('\n');
    if (buffer.size() < kMaxLineBytes) buffer.append(data.substr(0, newline));
    if (newline == std::string_view::npos) break;
    data.remove_prefix(newline + 1);
    if (event.fd == 2) {
      if (!buffer.empty()) Emit({{"kind", "stderr"}, {"text", buffer}});
    } else {
      OnLine(buffer);
    }
    buffer.clear();
  }
}

void AgentSession::OnLine(std::string_view line) {
  if (line.empty()) return;
  if (row_.state == "processing") WatchSilence();
  json message = json::parse(line, nullptr, false);
  if (!message.is_object()) {
    Emit({{"kind", "stdout"}, {"text", std::string(line)}});
    return;
  }
  const std::string type = JsonString(message, "type");
  if (type == "system" && JsonString(message, "subtype") == "init") {
    // A fork gets its id from the CLI.
    const std::string agent_session = JsonString(message, "session_id");
    if (!agent_session.empty() && agent_session != row_.agent_session) {
      row_.agent_session = agent_session;
      (void)runner_.store_.UpdateSession(row_);
    }
  }
  std::optional<std::vector<TodoItem>> todos = TodosOf(message);
  json result = json::object();  // what the turn's `result` event repeats of the agent's (TurnResultEvent checks types)
  if (type == "result") {
    for (const char* key : {"is_error", "subtype", "result"}) {
      if (message.contains(key)) result[key] = message[key];
    }
  }
  Emit({{"kind", "agent"}, {"data", std::move(message)}});
  if (todos) Emit(TodoEvent(*todos));
  if (type == "result") {
    ++row_.turns;
    if (pending_turns_ > 0) --pending_turns_;
    (void)runner_.store_.UpdateSession(row_);
    EndTurn(result);
  }
}

void AgentSession::EndTurn(const json& agent_result) {
  ending_.push_back({row_.turns, agent_result});
  if (watch_) return watch_->TurnEnded(pending_turns_ > 0);
  TurnFiles unobserved;
  unobserved.observed = false;
  TurnFilesDone(unobserved, /*set_state=*/true);
}

void AgentSession::TurnFilesDone(const TurnFiles& files, bool set_state) {
  if (ended_ || ending_.empty()) return;
  EndingTurn turn = std::move(ending_.front());
  ending_.erase(ending_.begin());
  Emit(TurnResultEvent(workspace_dir_, turn.turn, turn.result, files));
  if (set_state) SetState(pending_turns_ > 0 ? "processing" : "ready");
}

void AgentSession::End(const std::string& command_outcome) {
  if (ended_) return;
  // Turns whose result came and whose last scan did not: their `result` with what was seen.
  if (watch_) {
    for (const TurnFiles& files : watch_->Stop()) TurnFilesDone(files, /*set_state=*/false);
  }
  ended_ = true;
  json process = json::parse(command_outcome, nullptr, false);
  std::string state, outcome;
  if (silence_) silence_->cancel();
  if (hung_) {
    state = "failed";
    outcome = "agent_hung";
  } else if (budget_exhausted_ || (JsonString(process, "outcome") == "budget_exhausted")) {
    // The AI budget (the relay refused a call) or the compute budget (the sandbox was stopped).
    state = "failed";
    outcome = "budget_exhausted";
  } else if (aborted_) {
    state = outcome = "aborted";
  } else if (closing_) {
    state = outcome = "completed";
  } else if (pending_turns_ > 0) {
    state = "failed";
    outcome = "agent_exited";  // during a turn: what the process's outcome says
  } else {
    state = "idle";
    outcome = "stopped";  // between turns (its sandbox stopped, or it exited): resumable
  }
  row_.outcome_json = json{{"outcome", outcome},
                           {"process", process.is_object() ? process : json()},
                           {"turns", row_.turns},
                           {"cost_usd", FormatMicroUsd(row_.cost_micro_usd)}}
                          .dump();
  row_.ended_at = UnixNow();
  // The final row and its session.ended webhook in one write (SetState would write it alone).
  const bool changed = row_.state != state;
  row_.state = state;
  row_.updated_at = row_.ended_at;
  runner_.SaveEnded(row_, outcome);
  if (changed) Emit({{"kind", "state"}, {"state", state}});
  events_.Append(StreamEvent::Kind::kExit, 0, row_.outcome_json);
  runner_.OnEnded(*this);
}

// ---------------------------------------------------------------------------------------------
// The runner

SessionRunner::SessionRunner(const DaemonConfig& config, Store& store, SandboxManager& manager, RelayKeys& keys,
                             boost::asio::thread_pool& pool)
    : config_(config), store_(store), manager_(manager), keys_(keys), pool_(pool) {
  keys_.OnUsageCall([this](const RelayClient& client, const ModelUsage& usage, int64_t cost) {
    OnUsage(client, usage, cost);
  });
  keys_.OnExhaustedCall([this](const RelayClient& client) { OnExhausted(client); });
}

SessionRunner::~SessionRunner() {
  keys_.OnUsageCall(nullptr);
  keys_.OnExhaustedCall(nullptr);
}

Status SessionRunner::CheckConcurrency(const std::string& iss, const std::string& sub, const UserCaps& caps) const {
  uint64_t per_user = config_.max_sessions_per_user;
  if (caps.sessions && *caps.sessions < per_user) per_user = *caps.sessions;
  uint64_t mine = 0, issuer = 0;
  for (const auto& [id, session] : live_) {
    if (session->row().iss != iss) continue;
    ++issuer;
    if (session->row().sub == sub) ++mine;
  }
  if (mine >= per_user) {
    return Status::Error("this user already runs " + std::to_string(mine) + " agent sessions (the limit is " +
                             std::to_string(per_user) + "); close or abort one first",
                         EDQUOT);
  }
  if (config_.max_sessions_per_issuer > 0 && issuer >= config_.max_sessions_per_issuer) {
    return Status::Error("the users of issuer " + iss + " already run " + std::to_string(issuer) +
                             " agent sessions (the issuer's limit)",
                         EDQUOT);
  }
  return Status();
}

StatusOr<std::shared_ptr<AgentSession>> SessionRunner::Create(const Caller& caller, const UserCaps& caps,
                                                               NewSession request) {
  RETURN_IF_ERROR(CheckOptions(request.options));
  RETURN_IF_ERROR(CheckTools(request.tools));
  if (!request.tools.empty() && (bridge_ == nullptr || !mcp_in_sandboxes_)) {
    return Status::Error("tools: this daemon has no corral-mcp to offer them to the agent (install it beside corrald "
                         "or in /usr/libexec/corral)",
                         ENOTSUP);
  }
  ASSIGN_OR_RETURN(SandboxRow sandbox, manager_.Get(caller, request.sandbox_id));
  RETURN_IF_ERROR(CheckConcurrency(sandbox.iss, sandbox.sub, caps));
  if (!request.resume.empty() + !request.fork.empty() + !request.checkpoint.empty() > 1) {
    return Status::Error("resume, fork and checkpoint: one of them", EINVAL);
  }
  if (!request.checkpoint.empty() && !request.restored) {
    return Status::Error("checkpoint: a session from a checkpoint starts through CreateFromCheckpoint", EINVAL);
  }
  SessionRow row;
  std::vector<std::string> history;  // the CLI's flags that bring the history in
  const std::string& from = !request.resume.empty() ? request.resume : request.fork;
  if (!from.empty()) {
    ASSIGN_OR_RETURN(SessionRow parent, Get(caller, from));
    if (parent.sandbox_id != sandbox.id) {
      return Status::Error("session " + from + " is in sandbox " + parent.sandbox_id + ", not " + sandbox.id, EINVAL);
    }
    if (live_.count(from)) return Status::Error("session " + from + " is running", EBUSY);
    RETURN_IF_ERROR(StartFromParent(parent, request, row, history));
  }
  if (request.restored) RETURN_IF_ERROR(RestoredHistory(*request.restored, request, row, history));
  const bool resumed = !request.resume.empty();
  PrepareRow(sandbox, request, resumed, row);

  ExecSpec spec;
  spec.sandbox = sandbox.id;
  spec.stdin_open = true;
  // The agent's stdout is its event stream and its stdin the user's turns. Its tool calls run as
  // `agent` too, so the pipes must not be the agent's: /proc/<claude>/fd/1 would open.
  spec.private_stdio = true;
  spec.cwd = request.options.cwd;  // "" = the agent's home
  spec.argv = ClaudeArgv(request.options, row.agent_session, history);
  RETURN_IF_ERROR(UseClaudeRuntime(manager_, caller, sandbox, claude_runtime_, spec));  // image sandboxes
  // Client tools, and permission requests when the mode asks: corral-mcp, with a key of its
  // own, reaches the tool bridge on the sandbox's loopback.
  const bool asks = request.options.permission_mode != "bypassPermissions";
  std::string tool_key;
  json bridge_tools = json::array();
  if (bridge_ != nullptr && mcp_in_sandboxes_ && (!request.tools.empty() || asks)) {
    bridge_tools = OfferBridge(request, asks, bridge_->Ports().front(), spec.argv);
    tool_key = NewToolKey();
  }
  RelayClient client{row.id, sandbox.id, row.iss, row.sub, request.budget};
  const std::string key = keys_.Issue(client);
  for (std::string& var : RelayEnv(config_.relay.port, key)) spec.env.push_back(std::move(var));
  std::string tool_digest;
  if (!tool_key.empty()) {
    // In the environment, not on the command line; the MCP config refers to it. Tool search off:
    // the model sees the declared tools' schemas, not just their names.
    spec.env.push_back("CORRAL_TOOL_KEY=" + tool_key);
    spec.env.push_back("ENABLE_TOOL_SEARCH=false");
    tool_digest = ToolKeyDigest(tool_key);
    tool_keys_[tool_digest] = ToolKey{row.id, sandbox.id, bridge_tools};
  }

  if (resumed) {
    RETURN_IF_ERROR(store_.UpdateSession(row));
  } else {
    RETURN_IF_ERROR(store_.InsertSession(row));
  }
  auto command = manager_.Exec(caller, caps, spec);
  if (!command.ok()) {
    keys_.Revoke(row.id);
    if (!tool_digest.empty()) tool_keys_.erase(tool_digest);
    row.state = resumed ? "idle" : "failed";
    row.outcome_json = json{{"outcome", "start_failed"}, {"error", command.status().message()}}.dump();
    row.ended_at = UnixNow();
    SaveEnded(row, "start_failed");
    return command.status();
  }
  auto session = std::make_shared<AgentSession>(*this, row, config_.replay_buffer_bytes);
  session->command_ = *command;
  session->tool_key_digest_ = tool_digest;
  live_[row.id] = session;
  recent_.erase(row.id);
  (void)(*command)->stream().Subscribe(session.get(), 0);
  session->Emit({{"kind", "state"}, {"state", "initializing"}});
  WatchWorkspace(*session, request.options.cwd.empty() ? "/home/agent" : request.options.cwd);
  if (!request.prompt.empty()) {
    RETURN_IF_ERROR(Send(caller, row.id, request.prompt));
  } else {
    session->SetState("ready");
  }
  LogInfo("session", "started", {{"session", row.id}, {"sandbox", sandbox.id}, {"command", (*command)->id()}});
  return session;
}

StatusOr<std::shared_ptr<AgentSession>> SessionRunner::Live(const Caller& caller, const std::string& id) {
  auto it = live_.find(id);
  if (it == live_.end() || !MaySee(caller, it->second->row().iss, it->second->row().sub)) {
    // Not running: ended (say so) or not the caller's (the same answer as none at all).
    auto row = Get(caller, id);
    if (!row.ok()) return row.status();
    return Status::Error("session " + id + " is not running (it is " + row->state + ")", EBUSY);
  }
  return it->second;
}

Status SessionRunner::Send(const Caller& caller, const std::string& id, const std::string& text) {
  ASSIGN_OR_RETURN(std::shared_ptr<AgentSession> session, Live(caller, id));
  if (text.empty()) return Status::Error("text: must not be empty", EINVAL);
  if (session->closing_) return Status::Error("session " + id + " is closing", EBUSY);
  if (checkpointing_.count(id)) return Status::Error("a checkpoint of session " + id + " is being taken", EBUSY);
  json line = {{"type", "user"}, {"message", {{"role", "user"}, {"content", text}}}};
  RETURN_IF_ERROR(session->command_->WriteStdin(line.dump() + "\n"));
  ++session->pending_turns_;
  session->Emit({{"kind", "user"}, {"text", text}});
  session->SetState("processing");
  if (session->watch_) session->watch_->TurnStarted();
  return Status();
}

void SessionRunner::WatchWorkspace(AgentSession& session, const std::string& dir) {
  session.workspace_dir_ = dir;
  if (io_ == nullptr) return;
  WorkspaceWatchOptions options;
  options.dir = dir;
  options.limits.max_entries = config_.file_scan_entries;
  options.limits.skip_names = {".git"};  // a repository's own bookkeeping
  // Claude Code's own state in the agent's home (its transcripts and settings) and the caches
  // (its MCP logs among them): not the work.
  static constexpr const char* kAgentState[] = {"/home/agent/.claude", "/home/agent/.claude.json*",
                                                 "/home/agent/.cache"};
  for (const std::string state : kAgentState) {
    const std::string under = dir == "/" ? "/" : dir + "/";
    if (state.compare(0, under.size(), under) == 0) options.limits.skip_paths.push_back(state.substr(under.size()));
  }
  options.interval = std::chrono::seconds(config_.file_scan_interval_s);
  options.max_turn_files = kMaxTurnFiles;
  Caller owner{session.row().iss, session.row().sub};
  const std::string sandbox = session.row().sandbox_id;
  std::weak_ptr<AgentSession> weak = session.weak_from_this();
  WorkspaceWatch::Sink sink{
      [weak](const FileChange& change) {
        if (auto self = weak.lock(); self && !self->ended_) self->Emit(FileChangeEvent(self->workspace_dir_, change));
      },
      [weak](const TurnFiles& files) {
        if (auto self = weak.lock()) self->TurnFilesDone(files, /*set_state=*/true);
      }};
  session.watch_ = std::make_shared<WorkspaceWatch>(
      *io_, pool_, std::move(options), [this, owner, sandbox] { return manager_.OpenFiles(owner, sandbox); },
      std::move(sink));
  session.watch_->Start();
}

Status SessionRunner::Interrupt(const Caller& caller, const std::string& id) {
  ASSIGN_OR_RETURN(std::shared_ptr<AgentSession> session, Live(caller, id));
  json line = {{"type", "control_request"},
               {"request_id", "corral-" + std::to_string(session->next_control_++)},
               {"request", {{"subtype", "interrupt"}}}};
  return session->command_->WriteStdin(line.dump() + "\n");
}

Status SessionRunner::Abort(const Caller& caller, const std::string& id) {
  ASSIGN_OR_RETURN(std::shared_ptr<AgentSession> session, Live(caller, id));
  session->aborted_ = true;
  return session->command_->Signal(SIGKILL);
}

Status SessionRunner::Close(const Caller& caller, const std::string& id) {
  ASSIGN_OR_RETURN(std::shared_ptr<AgentSession> session, Live(caller, id));
  session->closing_ = true;
  return session->command_->CloseStdin();
}

StatusOr<std::shared_ptr<AgentSession>> SessionRunner::Find(const Caller& caller, const std::string& id) {
  std::shared_ptr<AgentSession> session = FindVisible(live_, recent_, id, caller);
  if (!session) return NotFound("live session " + id);
  return session;
}

StatusOr<SessionRow> SessionRunner::Get(const Caller& caller, const std::string& id) {
  if (!IsWellFormedId(id, "ses")) return NotFound("session " + id);
  if (auto it = live_.find(id); it != live_.end()) {
    const SessionRow& row = it->second->row();
    if (MaySee(caller, row.iss, row.sub)) return row;
    return NotFound("session " + id);
  }
  ASSIGN_OR_RETURN(std::optional<SessionRow> row, store_.GetSession(id));
  if (!row || !MaySee(caller, row->iss, row->sub)) {
    return NotFound("session " + id);
  }
  return *row;
}

StatusOr<std::vector<SessionRow>> SessionRunner::List(const Caller& caller, const std::string& sandbox_id) {
  ASSIGN_OR_RETURN(std::vector<SessionRow> rows,
                   caller.admin ? store_.ListSessions("", "", sandbox_id)
                                : store_.ListSessions(caller.iss, caller.sub, sandbox_id));
  for (SessionRow& row : rows) {
    if (auto it = live_.find(row.id); it != live_.end()) row = it->second->row();
  }
  return rows;
}

Status SessionRunner::Recover() {
  ASSIGN_OR_RETURN(std::vector<SessionRow> rows, store_.ListNodeSessions());
  for (SessionRow& row : rows) {
    if (row.state != "initializing" && row.state != "ready" && row.state != "processing" &&
        row.state != "waiting_tool") {
      continue;
    }
    // Its agent process, adopted by the manager as a plain command, has nobody to talk to and a
    // key the relay no longer knows: it is stopped (its transcript is in the workspace, and the
    // session can be resumed from it).
    // It is found by the session id in its command line: its own (--session-id, --resume) or,
    // for a fork, its parent's (--resume PARENT --fork-session).
    std::vector<std::string> ids = {row.agent_session};
    if (!row.parent_id.empty()) {
      auto parent = store_.GetSession(row.parent_id);
      if (parent.ok() && parent->has_value()) ids.push_back((*parent)->agent_session);
    }
    for (const auto& command : manager_.LiveCommands(row.sandbox_id)) {
      json argv = json::parse(command->row().argv_json, nullptr, false);
      std::vector<std::string> words;
      for (const auto& word : argv.is_array() ? argv : json::array()) {
        words.push_back(word.is_string() ? word.get<std::string>() : "");
      }
      const size_t at = ClaudeArgsStart(words);  // "claude" or the runtime's loader (image sandboxes)
      if (at == 0 || words.size() < at + 3 || words[at + 1] != "--input-format") continue;
      bool ours = false;
      for (const auto& arg : argv) {
        for (const auto& id : ids) ours = ours || (!id.empty() && arg.is_string() && arg.get<std::string>() == id);
      }
      if (ours) (void)command->Signal(SIGKILL);
    }
    row.state = "idle";
    row.outcome_json = json{{"outcome", "daemon_restarted"}, {"turns", row.turns},
                            {"cost_usd", FormatMicroUsd(row.cost_micro_usd)}}
                           .dump();
    row.ended_at = UnixNow();
    SaveEnded(row, "daemon_restarted");
  }
  return Status();
}

void SessionRunner::WhenEnded(const std::string& id, std::function<void(const SessionRow&)> fn) {
  if (live_.count(id)) {
    when_ended_.emplace(id, std::move(fn));
    return;
  }
  auto row = store_.GetSession(id);
  if (row.ok() && row->has_value()) fn(**row);
}

void SessionRunner::OnEnded(AgentSession& session) {
  keys_.Revoke(session.id());
  auto [first, last] = when_ended_.equal_range(session.id());
  std::vector<std::function<void(const SessionRow&)>> callbacks;
  for (auto it = first; it != last; ++it) callbacks.push_back(std::move(it->second));
  when_ended_.erase(first, last);
  const SessionRow row = session.row();
  for (auto& fn : callbacks) fn(row);
  if (!session.tool_key_digest_.empty()) tool_keys_.erase(session.tool_key_digest_);
  for (auto& [call, pending] : session.calls_) {
    if (pending.timer) pending.timer->cancel();
    if (pending.reply) pending.reply(ToolResultText("the session ended before the client answered", true));
  }
  session.calls_.clear();
  if (bridge_ != nullptr) bridge_->DropSession(session.id());
  auto it = live_.find(session.id());
  if (it == live_.end()) return;
  recent_[session.id()] = it->second;
  recent_order_.push_back(session.id());
  live_.erase(it);
  while (recent_order_.size() > kRecentSessions) {
    recent_.erase(recent_order_.front());
    recent_order_.erase(recent_order_.begin());
  }
  LogInfo("session", "ended", {{"session", session.id()}, {"state", session.row().state}});
}

std::map<std::string, int64_t> SessionRunner::CountByState() const {
  std::map<std::string, int64_t> counts;
  for (const char* state : {"initializing", "ready", "processing", "waiting_tool"}) counts[state] = 0;
  for (const auto& [id, session] : live_) ++counts[session->row().state];
  return counts;
}

void SessionRunner::OnUsage(const RelayClient& client, const ModelUsage& usage, int64_t cost) {
  auto it = live_.find(client.session_id);
  if (it == live_.end()) return;
  AgentSession& session = *it->second;
  session.row_.cost_micro_usd += cost;
  (void)store_.UpdateSession(session.row_);
  session.Emit({{"kind", "usage"},
                {"model", usage.model},
                {"input_tokens", usage.input_tokens},
                {"output_tokens", usage.output_tokens},
                {"cache_creation_input_tokens", usage.cache_creation_input_tokens},
                {"cache_read_input_tokens", usage.cache_read_input_tokens},
                {"cost_usd", FormatMicroUsd(cost)},
                {"session_cost_usd", FormatMicroUsd(session.row_.cost_micro_usd)}});
}

void SessionRunner::OnExhausted(const RelayClient& client) {
  auto it = live_.find(client.session_id);
  if (it == live_.end() || it->second->budget_exhausted_) return;
  AgentSession& session = *it->second;
  session.budget_exhausted_ = true;
  session.Emit({{"kind", "budget_exhausted"}});
  LogInfo("session", "AI budget spent: stopping the agent", {{"session", session.id()}});
  (void)session.command_->Signal(SIGKILL);
}

}  // namespace corral::supervisor
