// Agent sessions: Claude Code running in a user's sandbox, driven over its stream-json protocol.
//
// A session is one `claude -p --input-format stream-json --output-format stream-json --verbose`
// process, started as the sandbox's `agent` user in /home/agent (the persistent workspace, where
// the CLI keeps its transcripts), with ANTHROPIC_BASE_URL at the model relay on the sandbox's
// loopback and a placeholder key of its own (RelayKeys): the operator's key never enters the
// sandbox. User messages go to the process's stdin, one JSON line each; every line it prints
// becomes a numbered event of the session, resumable like a command's output.
//
// States: initializing (started, not yet spoken to), ready (waiting for a message), processing
// (a turn is under way), and once the process is gone: idle (it ended between turns: resume
// continues it), completed (closed by the client), failed (it died during a turn), aborted (by
// the client). A session whose user's AI budget is spent is stopped, with the outcome
// `budget_exhausted`. `resume` runs an ended session again with its history (--resume), `fork`
// starts a new session from another's history (--resume --fork-session).
//
// Derived events (session_events.h) beside the agent's own lines: `todo` from its TodoWrite tool
// (the agent runs with Claude Code's todo tool on: CLAUDE_CODE_ENABLE_TODO_TOOLS=1, and its task
// tools off), `file_change` from scans of the working directory (workspace_watch.h),
// `awaiting_input` when a tool call or permission request waits for the client, and `result` at
// the end of each turn with the files it changed. A turn ends, and the state goes back to
// `ready`, once its last scan is done: `result` then `state` come after the agent's result line.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <nlohmann/json.hpp>

#include "common/status.h"
#include "supervisor/relay/budget.h"
#include "supervisor/commands/command.h"
#include "supervisor/commands/event_stream.h"
#include "supervisor/relay/relay_keys.h"
#include "supervisor/sandboxes/sandbox_manager.h"
#include "supervisor/store/store.h"
#include "supervisor/sessions/image_agent.h"
#include "supervisor/sessions/tool_bridge.h"
#include "supervisor/sessions/workspace_watch.h"
#include "supervisor/webhooks/webhook_outbox.h"

namespace corral::supervisor {

// Where corral-mcp is inside every sandbox (bound read-only from the daemon's run directory).
inline constexpr char kMcpPathInSandbox[] = "/run/corral/bin/corral-mcp";
// The tool Claude Code asks for permission with (--permission-prompt-tool) when the session's
// permission mode asks: the request goes to the client like a tool call.
inline constexpr char kPermissionTool[] = "corral_permission";
// The most changed files a turn reports (file_change events, and files in its `result`).
inline constexpr size_t kMaxTurnFiles = 1000;

struct SessionOptions {
  std::string model;                                  // "" = the CLI's default
  std::string permission_mode = "bypassPermissions";  // default|acceptEdits|bypassPermissions|plan
  std::vector<std::string> allowed_tools;
  std::vector<std::string> disallowed_tools;
  bool partial = false;                               // --include-partial-messages
  std::string cwd;                                    // where the agent works; "" = /home/agent
};

// A tool the client declares for its session: the agent calls it (as mcp__corral__<name>), the
// call goes to the client over its WebSocket, and the client's answer goes back to the agent.
struct ClientTool {
  std::string name;         // [A-Za-z0-9_-]{1,50}
  std::string description;
  nlohmann::json input_schema = nlohmann::json{{"type", "object"}};
};

struct NewSession {
  std::string sandbox_id;
  SessionOptions options;
  std::string resume;  // "ses_...": run this ended session again, with its history
  std::string fork;    // "ses_...": a new session that starts from this one's history
  // "chk_...": a new session that starts from a checkpoint's history, in a sandbox with the
  // checkpoint's files (CreateFromCheckpoint puts them there, then sets `restored`).
  std::string checkpoint;
  std::optional<CheckpointRow> restored;
  std::string prompt;  // the first message; "" = wait for one
  Budget budget;       // from the caller's token
  std::vector<ClientTool> tools;  // for this run of the session (a resume declares its own)
};

class SessionRunner;

// Counters the API turns into metrics; called on the event loop.
class SessionObserver {
 public:
  virtual ~SessionObserver() = default;
  // A session ended (its row has its outcome): `outcome` is the outcome's name (completed,
  // stopped, aborted, agent_exited, agent_hung, budget_exhausted, start_failed, and at start
  // daemon_restarted for those a previous daemon left running).
  virtual void OnSessionEnded(std::string_view outcome) = 0;
};

class AgentSession : public StreamSubscriber, public std::enable_shared_from_this<AgentSession> {
 public:
  AgentSession(SessionRunner& runner, SessionRow row, size_t replay_bytes);
  ~AgentSession() override;

  const SessionRow& row() const { return row_; }
  const std::string& id() const { return row_.id; }
  EventStream& events() { return events_; }
  bool ended() const { return ended_; }

  // The agent's process output (StreamSubscriber on its command's stream).
  void OnStreamEvent(const StreamEvent& event) override;
  bool StreamFull() const override { return false; }

 private:
  friend class SessionRunner;
  void OnLine(std::string_view line);
  void SetState(const std::string& state);
  void Emit(const nlohmann::json& event);
  void End(const std::string& outcome_json);
  // The agent's result line ended a turn: its files are scanned, then the `result` event and the
  // state (ready, or processing when another turn is queued).
  void EndTurn(const nlohmann::json& agent_result);
  void TurnFilesDone(const TurnFiles& files, bool set_state);
  // While a turn is under way, the agent must print something every agent_silence_timeout:
  // (re)armed by each line and by the start of a turn, stopped otherwise.
  void WatchSilence();

  SessionRunner& runner_;
  SessionRow row_;
  EventStream events_;
  std::shared_ptr<Command> command_;
  std::string stdout_line_;
  std::string stderr_line_;
  int pending_turns_ = 0;  // messages sent and not yet answered by a result
  int64_t next_control_ = 1;
  bool aborted_ = false;
  bool closing_ = false;
  bool budget_exhausted_ = false;
  bool hung_ = false;
  bool ended_ = false;
  std::unique_ptr<boost::asio::steady_timer> silence_;
  // Client tools: the digest of corral-mcp's key, and the calls waiting for the client.
  std::string tool_key_digest_;
  struct PendingCall {
    bool permission = false;
    std::function<void(nlohmann::json)> reply;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };
  std::map<std::string, PendingCall> calls_;
  // Derived events: the workspace's scans (null: none), and the turns whose result line came and
  // whose scan has not: their number and the fields of their result line.
  std::shared_ptr<WorkspaceWatch> watch_;
  std::string workspace_dir_;
  struct EndingTurn {
    int64_t turn = 0;
    nlohmann::json result;
  };
  std::vector<EndingTurn> ending_;
};

class SessionRunner : public ToolAuthority {
 public:
  // `pool`: the worker pool the workspace scans run on (file_change events).
  SessionRunner(const DaemonConfig& config, Store& store, SandboxManager& manager, RelayKeys& keys,
                boost::asio::thread_pool& pool);
  ~SessionRunner() override;

  // Client tools and permission prompts: the bridge on every sandbox's loopback, and whether
  // sandboxes have corral-mcp (without it, sessions that declare tools are refused and
  // permission requests are answered by Claude Code itself: denied).
  // Also what the workspace scans (file_change events) post their results to: without it none
  // are made, and each turn's `result` says its files were not observed.
  void EnableTools(boost::asio::io_context& io, ToolBridge& bridge, bool mcp_in_sandboxes);
  // Whether the daemon staged Claude Code's runtime for image sandboxes (image_agent.h); without
  // it sessions there are refused with ENOTSUP.
  void SetClaudeRuntime(const AgentRuntime& runtime) { claude_runtime_ = runtime; }
  // Where ended sessions are reported (nullptr: nowhere). Set at start, before Recover.
  void SetObserver(SessionObserver* observer) { observer_ = observer; }
  // The webhook outbox a session's end (session.ended) and an AI budget spent (budget.exhausted)
  // are recorded in (null: none). Set at start, before Recover.
  void SetWebhooks(WebhookOutbox* webhooks) { webhooks_ = webhooks; }
  // Sessions whose agent runs now, by state (every running state, 0 included). For metrics.
  std::map<std::string, int64_t> CountByState() const;

  StatusOr<std::shared_ptr<AgentSession>> Create(const Caller& caller, const UserCaps& caps, NewSession request);
  // A user message: the next turn (or, during one, feedback the agent reads when it can).
  Status Send(const Caller& caller, const std::string& id, const std::string& text);
  Status Interrupt(const Caller& caller, const std::string& id);
  Status Abort(const Caller& caller, const std::string& id);
  // Ends the session: its stdin closes, the agent finishes and exits.
  Status Close(const Caller& caller, const std::string& id);
  // The client's answer to a tool call (result: {"content": [...], "isError": bool}), or to a
  // permission request (allow, or deny with a message; updated_input replaces the tool's input).
  Status AnswerTool(const Caller& caller, const std::string& id, const std::string& call, nlohmann::json result);
  Status AnswerPermission(const Caller& caller, const std::string& id, const std::string& call, bool allow,
                          const std::string& message, const nlohmann::json& updated_input);
  // A live session (or one that ended a short while ago), for attaching to its events.
  StatusOr<std::shared_ptr<AgentSession>> Find(const Caller& caller, const std::string& id);
  StatusOr<SessionRow> Get(const Caller& caller, const std::string& id);
  StatusOr<std::vector<SessionRow>> List(const Caller& caller, const std::string& sandbox_id = "");
  // Calls `fn` (on the event loop) with the session's row once it has ended: at once when it is
  // not running. For the daemon's own drivers of sessions (headless execute).
  void WhenEnded(const std::string& id, std::function<void(const SessionRow&)> fn);

  // Checkpoints (checkpoints.cc; docs/PROTOCOL.md "Checkpoints"): the session's sandbox's files,
  // with the agent's transcript among them, as a snapshot at a turn boundary (ready, idle or
  // completed: EBUSY otherwise, and a turn is refused while one is taken), and the session's
  // agent id, working directory and turns then. Deleted with its snapshot.
  void Checkpoint(const Caller& caller, const std::string& session_id, SandboxManager::Done<CheckpointRow> done);
  StatusOr<CheckpointRow> GetCheckpoint(const Caller& caller, const std::string& id);
  StatusOr<std::vector<CheckpointRow>> ListCheckpoints(const Caller& caller, const std::string& session_id);
  void DeleteCheckpoint(const Caller& caller, const std::string& id, SandboxManager::Done<bool> done);
  // A new session from `request.checkpoint`: in the checkpoint's own sandbox, whose files are
  // replaced by the checkpoint's (stopped first, then restarted; EBUSY while a session runs
  // there), or in a sandbox made from the checkpoint's snapshot, as its files are. Either way the
  // agent's history is the checkpoint's (a fork of its agent session), its parent the
  // checkpointed session.
  void CreateFromCheckpoint(const Caller& caller, const UserCaps& caps, NewSession request,
                            SandboxManager::Done<std::shared_ptr<AgentSession>> done);

  // ToolAuthority (the tool bridge).
  std::optional<ToolSessionInfo> FindToolKey(std::string_view sandbox_id, std::string_view key) override;
  void OnToolCall(const std::string& session_id, const std::string& call_id, const std::string& name,
                  nlohmann::json arguments, std::function<void(nlohmann::json result)> reply) override;
  // At start: sessions the store says were running belong to a daemon that is gone; they end
  // as `idle` (resumable), and their agent processes, adopted as commands, are stopped.
  Status Recover();

 private:
  friend class AgentSession;
  void OnEnded(AgentSession& session);
  void Ended(std::string_view outcome) {
    if (observer_ != nullptr) observer_->OnSessionEnded(outcome);
  }
  // An ended session's row, stored with its session.ended webhook in one transaction, and its
  // outcome counted (session_webhooks.cc).
  void SaveEnded(const SessionRow& row, const std::string& outcome);
  void OnUsage(const RelayClient& client, const ModelUsage& usage, int64_t cost);
  void OnExhausted(const RelayClient& client);
  StatusOr<std::shared_ptr<AgentSession>> Live(const Caller& caller, const std::string& id);
  // Sessions running at once: per user (config, lowered by the token) and per issuer.
  Status CheckConcurrency(const std::string& iss, const std::string& sub, const UserCaps& caps) const;
  // Takes the call out of the session's pending ones and answers it.
  Status Answer(AgentSession& session, const std::string& call, nlohmann::json result, bool permission);
  void ToolCallTimedOut(const std::string& session_id, const std::string& call);
  // The session's WorkspaceWatch over `dir` (its working directory), started: its baseline.
  void WatchWorkspace(AgentSession& session, const std::string& dir);

  const DaemonConfig& config_;
  Store& store_;
  SandboxManager& manager_;
  RelayKeys& keys_;
  SessionObserver* observer_ = nullptr;
  WebhookOutbox* webhooks_ = nullptr;
  std::map<std::string, std::shared_ptr<AgentSession>> live_;
  std::map<std::string, std::shared_ptr<AgentSession>> recent_;
  std::vector<std::string> recent_order_;
  std::multimap<std::string, std::function<void(const SessionRow&)>> when_ended_;
  // Client tools.
  boost::asio::io_context* io_ = nullptr;
  ToolBridge* bridge_ = nullptr;
  bool mcp_in_sandboxes_ = false;
  boost::asio::thread_pool& pool_;
  AgentRuntime claude_runtime_;
  struct ToolKey {
    std::string session_id;
    std::string sandbox_id;
    nlohmann::json tools;
  };
  std::map<std::string, ToolKey> tool_keys_;  // by the key's digest
  std::set<std::string> checkpointing_;       // sessions a checkpoint is being taken of
  // A session from a checkpoint: a fork of the agent session it names, in its working directory
  // (its transcript is there, as it was then), the checkpointed session its parent.
  static Status RestoredHistory(const CheckpointRow& checkpoint, NewSession& request, SessionRow& row,
                                std::vector<std::string>& history);
  // In CreateFromCheckpoint: the sandbox holds the checkpoint's files; the session now.
  void StartRestored(const Caller& caller, const UserCaps& caps, NewSession request, const CheckpointRow& checkpoint,
                     SandboxManager::Done<std::shared_ptr<AgentSession>> done);
};

}  // namespace corral::supervisor
