#include "supervisor/sessions/executions.h"

#include <time.h>

#include <cerrno>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/unix_time.h"
#include "supervisor/sessions/host_repo.h"
#include "supervisor/ids.h"
#include "supervisor/sandboxes/sandbox_files.h"
#include "supervisor/visibility.h"

namespace corral::supervisor {

using nlohmann::json;

namespace {

// Where the bundle is put in the sandbox for the clone (removed by it).
constexpr char kBundleFile[] = "/home/agent/.corral-execute.bundle";
// How long the host's git may take to bundle an allowed repository.
constexpr auto kHostBundleTimeout = std::chrono::minutes(5);

// JSON text of values that may hold any bytes (paths, git's output): invalid UTF-8 is replaced.
std::string Dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

// "corral execute: <the task's first line>", kept short.
std::string CommitMessage(const std::string& task) {
  std::string line = task.substr(0, task.find('\n'));
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  constexpr size_t kMax = 200;
  if (line.size() > kMax) line = line.substr(0, kMax) + "...";
  return "corral execute: " + line;
}

Status CheckPermissionMode(const std::string& mode) {
  for (const char* known : {"default", "acceptEdits", "bypassPermissions", "plan"}) {
    if (mode == known) return Status();
  }
  return Status::Error("permission_mode: one of default, acceptEdits, bypassPermissions, plan", EINVAL);
}

// What can be refused before anything is made.
Status CheckRequest(const ExecuteRequest& request, const DaemonConfig& config) {
  if (request.task.empty()) return Status::Error("task: required (what the agent should do)", EINVAL);
  if (request.bundle.empty() == request.host_path.empty()) {
    return Status::Error("repo: either {\"bundle\": BASE64} or {\"path\": DIR}", EINVAL);
  }
  if (!request.host_path.empty() && config.execute_allowed_repo_paths.empty()) {
    return Status::Error("repo.path: this daemon allows no host repositories (execute.allowed_repo_paths); "
                         "send a bundle",
                         EPERM);
  }
  RETURN_IF_ERROR(CheckPermissionMode(request.permission_mode));
  if (request.timeout_s && (*request.timeout_s == 0 || *request.timeout_s > config.execute_timeout_s)) {
    return Status::Error("timeout_s: 1 to " + std::to_string(config.execute_timeout_s) + " (execute.timeout)", EINVAL);
  }
  return Status();
}

}  // namespace

// One execution in progress. Subscribed to its session's events from the session's start.
struct Executions::Run : public StreamSubscriber {
  Run(Executions& executions, boost::asio::io_context& io) : owner(executions), timer(io) {}
  ~Run() override {
    if (session && session->events().subscribed(this)) session->events().Unsubscribe(this);
  }
  void OnStreamEvent(const StreamEvent& event) override { owner.OnSessionEvent(*this, event); }
  bool StreamFull() const override { return false; }

  Executions& owner;
  ExecutionRow row;
  Caller caller;
  UserCaps caps;
  ExecuteRequest request;
  Done<ExecutionRow> answer;  // the caller's, until it is answered (step 4)
  std::shared_ptr<AgentSession> session;
  boost::asio::steady_timer timer;
  bool have_result = false;
  bool result_is_error = false;
  bool timed_out = false;
  bool finishing = false;
  std::string error;          // what went wrong after the answer (the record's `error`): failed
  std::string note;           // what is missing from a result that stands (also in `error`)
  json usage = {{"input_tokens", 0}, {"output_tokens", 0}, {"cache_creation_input_tokens", 0},
                {"cache_read_input_tokens", 0}, {"calls", 0}};
};

Executions::Executions(boost::asio::io_context& io, boost::asio::thread_pool& pool, const DaemonConfig& config,
                       supervisor::Store& store, SandboxManager& manager, SessionRunner& sessions)
    : io_(io), pool_(pool), config_(config), store_(store), manager_(manager), sessions_(sessions),
      git_(io, manager) {}

Executions::~Executions() {
  *alive_ = false;
  for (auto& [id, run] : running_) run->timer.cancel();
}

std::shared_ptr<Executions::Run> Executions::Find(const std::string& id) {
  auto it = running_.find(id);
  return it == running_.end() ? nullptr : it->second;
}

namespace {

// execution.finished of an ended execution's record.
WebhookEvent FinishedEvent(const ExecutionRow& row) {
  WebhookEvent event;
  event.type = WebhookEventType::kExecutionFinished;
  event.at = row.ended_at;
  event.iss = row.iss;
  event.sub = row.sub;
  event.sandbox_id = row.sandbox_id;
  json files = json::parse(row.files_json, nullptr, false);
  event.execution = ExecutionEnd{row.id,          row.state,       row.outcome,        row.session_id,
                                 row.error,       row.base_commit, row.head_commit,    row.cost_micro_usd,
                                 files.is_array() ? static_cast<int64_t>(files.size()) : 0};
  return event;
}

}  // namespace

void Executions::Save(Run& run) {
  run.row.updated_at = UnixNow();
  Status saved = store_.UpdateExecution(run.row);
  if (!saved.ok()) LogError("execute", "store", {{"execution", run.row.id}, {"error", saved.ToString()}});
}

// ---- 1: the request and the repository ----

void Executions::Start(const Caller& caller, const UserCaps& caps, ExecuteRequest request, Done<ExecutionRow> done) {
  if (Status checked = CheckRequest(request, config_); !checked.ok()) {
    return boost::asio::post(io_, [done, checked] { done(checked); });
  }
  if (!request.timeout_s) request.timeout_s = config_.execute_timeout_s;

  auto run = std::make_shared<Run>(*this, io_);
  run->caller = caller;
  run->caps = caps;
  run->answer = std::move(done);
  ExecutionRow& row = run->row;
  row.id = NewId("exe");
  row.iss = caller.iss;
  row.sub = caller.sub;
  row.state = "running";
  json asked = {{"task", request.task},
                {"repo", request.host_path.empty() ? "bundle" : "path"},
                {"model", request.model},
                {"permission_mode", request.permission_mode},
                {"timeout_s", *request.timeout_s},
                {"keep_sandbox", request.keep_sandbox}};
  if (!request.host_path.empty()) asked["path"] = request.host_path;
  row.request_json = Dump(asked);
  row.created_at = row.updated_at = UnixNow();
  run->request = std::move(request);
  if (Status inserted = store_.InsertExecution(row); !inserted.ok()) {
    Done<ExecutionRow> answer = std::move(run->answer);
    return boost::asio::post(io_, [answer, inserted] { answer(inserted); });
  }
  running_[row.id] = run;
  LogInfo("execute", "started", {{"execution", row.id}, {"user", caller.sub}});
  if (run->request.host_path.empty()) return CreateSandbox(run);

  // A host repository: resolved and bundled on the pool, as its owner.
  std::weak_ptr<bool> alive = alive_;
  // (On the pool: `this` is only passed on, never touched; the loop checks `alive` first.)
  boost::asio::post(pool_, [this, &io = io_, alive, id = row.id, path = run->request.host_path,
                            allowed = config_.execute_allowed_repo_paths, max = config_.execute_max_bundle_bytes] {
    StatusOr<std::string> bundle = ResolveAllowedRepo(path, allowed);
    if (bundle.ok()) bundle = BundleHostRepo(*bundle, max, kHostBundleTimeout);
    boost::asio::post(io, [this, alive, id, bundle = std::move(bundle)]() mutable {
      if (alive.expired()) return;
      auto current = Find(id);
      if (!current) return;
      if (!bundle.ok()) return Finish(current, bundle.status());
      current->request.bundle = std::move(*bundle);
      CreateSandbox(current);
    });
  });
}

template <typename T>
std::function<void(StatusOr<T>)> Executions::Then(const std::shared_ptr<Run>& run, std::function<void(T&)> next) {
  return [this, alive = std::weak_ptr<bool>(alive_), run, next = std::move(next)](StatusOr<T> value) {
    if (alive.expired()) return;
    if (!value.ok()) return Finish(run, value.status());
    next(*value);
  };
}

// ---- 2, 3: the sandbox and the clone ----

void Executions::CreateSandbox(const std::shared_ptr<Run>& run) {
  CreateRequest create;
  create.name = run->row.id;
  manager_.Create(run->caller, run->caps, create, Then<SandboxRow>(run, [this, run](SandboxRow& sandbox) {
    run->row.sandbox_id = sandbox.id;
    Save(*run);
    CopyBundle(run);
  }));
}

void Executions::CopyBundle(const std::shared_ptr<Run>& run) {
  auto access = manager_.OpenFiles(run->caller, run->row.sandbox_id);
  if (!access.ok()) return Finish(run, access.status());
  auto shared = std::make_shared<FileAccess>(std::move(*access));
  // The bytes move to the pool and are dropped there: the run keeps no copy.
  auto bundle = std::make_shared<std::string>(std::move(run->request.bundle));
  run->request.bundle.clear();
  std::weak_ptr<bool> alive = alive_;
  boost::asio::post(pool_, [this, &io = io_, alive, id = run->row.id, shared, bundle] {
    SandboxFiles files(shared->root.get(), shared->uid, shared->gid, bundle->size() + 1);
    Status written = files.Write(kBundleFile, *bundle, 0600).status();
    bundle->clear();
    boost::asio::post(io, [this, alive, id, written] {
      if (alive.expired()) return;
      auto current = Find(id);
      if (!current) return;
      if (!written.ok()) return Finish(current, written.WithContext("copy the bundle into the sandbox"));
      Clone(current);
    });
  });
}

void Executions::Clone(const std::shared_ptr<Run>& run) {
  git_.Clone(run->caller, run->caps, run->row.sandbox_id, kBundleFile, kExecuteRepoPath,
             Then<std::string>(run, [this, run](std::string& head) {
               run->row.base_commit = head;
               StartSession(run);
             }));
}

// ---- 4: the agent ----

void Executions::StartSession(const std::shared_ptr<Run>& run) {
  NewSession session;
  session.sandbox_id = run->row.sandbox_id;
  session.options.cwd = kExecuteRepoPath;
  session.options.model = run->request.model;
  session.options.permission_mode = run->request.permission_mode;
  session.prompt = run->request.task;
  session.budget = run->request.budget;
  auto created = sessions_.Create(run->caller, run->caps, std::move(session));
  if (!created.ok()) return Finish(run, created.status());
  run->session = *created;
  run->row.session_id = run->session->id();
  Save(*run);
  const std::string id = run->row.id;
  std::weak_ptr<bool> alive = alive_;
  sessions_.WhenEnded(run->row.session_id, [this, alive, id](const SessionRow& ended) {
    // From inside the session's end: carry on from the loop.
    boost::asio::post(io_, [this, alive, id, ended] {
      if (!alive.expired()) Collect(id, ended);
    });
  });
  (void)run->session->events().Subscribe(run.get(), 0);
  run->timer.expires_after(std::chrono::seconds(*run->request.timeout_s));
  run->timer.async_wait([this, alive, id](boost::system::error_code ec) {
    if (!ec && !alive.expired()) OnTimeout(id);
  });
  Done<ExecutionRow> answer = std::move(run->answer);
  run->answer = nullptr;
  answer(run->row);
}

void Executions::OnSessionEvent(Run& run, const StreamEvent& event) {
  if (event.kind != StreamEvent::Kind::kOutput) return;
  json message = json::parse(event.data, nullptr, false);
  if (!message.is_object()) return;
  const std::string kind = message.contains("kind") && message["kind"].is_string() ? message["kind"].get<std::string>() : "";
  if (kind == "usage") {
    for (const char* key : {"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"}) {
      if (message.contains(key) && message[key].is_number_integer()) {
        run.usage[key] = run.usage[key].get<int64_t>() + message[key].get<int64_t>();
      }
    }
    run.usage["calls"] = run.usage["calls"].get<int64_t>() + 1;
    return;
  }
  if (kind != "agent" || !message.contains("data") || !message["data"].is_object()) return;
  const json& data = message["data"];
  // The agent's output is the sandbox's to make: types are checked, never assumed.
  const auto type = data.find("type");
  if (type == data.end() || !type->is_string() || *type != "result" || run.have_result) return;
  run.have_result = true;
  const auto is_error = data.find("is_error");
  run.result_is_error = is_error != data.end() && is_error->is_boolean() && is_error->get<bool>();
  if (data.contains("result") && data["result"].is_string()) run.row.summary = data["result"].get<std::string>();
  // The turn is over: the agent finishes and exits (from the loop, not from inside its output).
  std::weak_ptr<bool> alive = alive_;
  boost::asio::post(io_, [this, alive, caller = run.caller, session = run.row.session_id] {
    if (alive.expired()) return;
    Status closed = sessions_.Close(caller, session);
    if (!closed.ok()) LogWarn("execute", "close the session", {{"session", session}, {"error", closed.ToString()}});
  });
}

void Executions::OnTimeout(const std::string& id) {
  auto run = Find(id);
  if (!run || run->finishing) return;
  // After the result the agent is only exiting: the work is done, it just does not go quietly.
  run->timed_out = !run->have_result;
  LogInfo("execute", "timed out: aborting the agent", {{"execution", id}});
  Status aborted = sessions_.Abort(run->caller, run->row.session_id);
  if (!aborted.ok()) LogWarn("execute", "abort the session", {{"execution", id}, {"error", aborted.ToString()}});
}

// ---- 5: the results ----

void Executions::Collect(const std::string& id, const SessionRow& session) {
  auto run = Find(id);
  if (!run || run->finishing) return;
  run->timer.cancel();
  if (run->session) run->session->events().Unsubscribe(run.get());
  json outcome = json::parse(session.outcome_json, nullptr, false);
  run->row.outcome = outcome.is_object() ? outcome.value("outcome", "") : "";
  run->row.cost_micro_usd = session.cost_micro_usd;
  run->row.usage_json = Dump(run->usage);
  if (run->timed_out) {
    run->error = "the agent did not finish within " + std::to_string(*run->request.timeout_s) +
                 " s (timeout_s); it was stopped";
  } else if (!run->have_result) {
    run->error = "the agent's session ended (" + run->row.outcome + ") before its turn had a result";
  } else if (run->result_is_error) {
    run->error = "the agent's turn ended with an error: " + run->row.summary;
  }
  // What the agent changed is collected in any case, while its sandbox runs.
  Commit(run);
}

void Executions::Commit(const std::shared_ptr<Run>& run) {
  git_.CommitAll(run->caller, run->caps, run->row.sandbox_id, kExecuteRepoPath, CommitMessage(run->request.task),
                 Then<std::string>(run, [this, run](std::string& head) {
                   run->row.head_commit = head;
                   CollectDiff(run);
                 }));
}

void Executions::CollectDiff(const std::shared_ptr<Run>& run) {
  git_.Diff(run->caller, run->caps, run->row.sandbox_id, kExecuteRepoPath, run->row.base_commit,
            config_.execute_max_diff_bytes, /*truncate=*/true, Then<GitDiff>(run, [this, run](GitDiff& diff) {
              json files = json::array();
              for (const auto& change : diff.files) {
                json file = {{"path", change.path}, {"status", change.status}};
                if (!change.from.empty()) file["from"] = change.from;
                files.push_back(std::move(file));
              }
              run->row.files_json = Dump(files);
              run->row.diff = std::move(diff.diff);
              run->row.diff_truncated = diff.truncated;
              CollectBundle(run);
            }));
}

void Executions::CollectBundle(const std::shared_ptr<Run>& run) {
  if (run->row.head_commit == run->row.base_commit) return Finish(run, Status());  // nothing new: no bundle
  std::weak_ptr<bool> alive = alive_;
  git_.Bundle(run->caller, run->caps, run->row.sandbox_id, kExecuteRepoPath, run->row.base_commit,
              config_.execute_max_bundle_bytes, [this, alive, run](StatusOr<std::string> bundle) {
                if (alive.expired()) return;
                if (!bundle.ok()) {
                  if (bundle.status().error_number() != EFBIG) return Finish(run, bundle.status());
                  // Too large to keep: the diff and the rest stand (the state too); the record
                  // says why there is no bundle.
                  run->note = "no bundle: it is larger than " + std::to_string(config_.execute_max_bundle_bytes) +
                              " bytes (execute.max_bundle); keep_sandbox keeps the repository in the sandbox";
                  return Finish(run, Status());
                }
                Status stored = store_.SetExecutionBundle(run->row.id, *bundle);
                if (!stored.ok()) return Finish(run, stored);
                run->row.bundle_bytes = static_cast<int64_t>(bundle->size());
                Finish(run, Status());
              });
}

// ---- 6: the end ----

void Executions::Finish(const std::shared_ptr<Run>& run, Status error) {
  if (run->finishing) return;
  run->finishing = true;
  run->timer.cancel();
  if (run->session) {
    run->session->events().Unsubscribe(run.get());
    // Still running when a step failed before its end (the answer, or the sandbox): it goes.
    if (!run->session->ended()) (void)sessions_.Abort(run->caller, run->row.session_id);
  }
  if (!error.ok()) {
    if (run->answer) {
      LogInfo("execute", "refused", {{"execution", run->row.id}, {"error", error.ToString()}});
    } else {
      run->error = run->error.empty() ? error.message() : run->error + "; " + error.message();
    }
  }
  auto end = [this, run, error]() {
    const std::string id = run->row.id;
    running_.erase(id);
    if (run->answer) {
      // Never answered: nothing of it stays.
      Status removed = store_.DeleteExecution(id);
      if (!removed.ok()) LogWarn("execute", "remove the record", {{"execution", id}, {"error", removed.ToString()}});
      Done<ExecutionRow> answer = std::move(run->answer);
      run->answer = nullptr;
      return answer(error);
    }
    run->row.state = run->error.empty() ? "completed" : "failed";
    run->row.error = run->error;
    if (!run->note.empty()) run->row.error += (run->row.error.empty() ? "" : "; ") + run->note;
    run->row.ended_at = UnixNow();
    run->row.updated_at = run->row.ended_at;
    Status saved = RecordWebhook(store_, webhooks_, FinishedEvent(run->row),
                                 [&] { return store_.UpdateExecution(run->row); });
    if (!saved.ok()) LogError("execute", "store", {{"execution", id}, {"error", saved.ToString()}});
    LogInfo("execute", "ended", {{"execution", id}, {"state", run->row.state}, {"error", run->error}});
  };
  const bool keep = run->request.keep_sandbox && !run->answer;
  if (run->row.sandbox_id.empty() || keep) return end();
  std::weak_ptr<bool> alive = alive_;
  manager_.Destroy(run->caller, run->row.sandbox_id, [alive, end, id = run->row.id](StatusOr<bool> destroyed) {
    if (alive.expired()) return;
    if (!destroyed.ok()) {
      LogWarn("execute", "destroy the sandbox", {{"execution", id}, {"error", destroyed.status().ToString()}});
    }
    end();
  });
}

// ---- reading ----

StatusOr<ExecutionRow> Executions::Get(const Caller& caller, const std::string& id) {
  const Status none = Status::Error("execution " + id + " not found", ENOENT);
  if (!IsWellFormedId(id, "exe")) return none;
  if (auto run = Find(id); run && !run->answer) {
    if (MaySee(caller, run->row.iss, run->row.sub)) return run->row;
    return none;
  }
  ASSIGN_OR_RETURN(std::optional<ExecutionRow> row, store_.GetExecution(id));
  if (!row || !MaySee(caller, row->iss, row->sub)) return none;
  return *row;
}

Status Executions::Delete(const Caller& caller, const std::string& id) {
  ASSIGN_OR_RETURN(ExecutionRow row, Get(caller, id));
  if (row.state == "running" || Find(id)) {
    return Status::Error("execution " + id + " is running (abort its session " + row.session_id + " first)", EBUSY);
  }
  return store_.DeleteExecution(id);
}

StatusOr<std::vector<ExecutionRow>> Executions::List(const Caller& caller) {
  ASSIGN_OR_RETURN(std::vector<ExecutionRow> rows,
                   caller.admin ? store_.ListExecutions("", "") : store_.ListExecutions(caller.iss, caller.sub));
  std::vector<ExecutionRow> listed;
  for (ExecutionRow& row : rows) {
    auto run = Find(row.id);
    if (run && run->answer) continue;  // not started yet (and it may never be)
    listed.push_back(run ? run->row : std::move(row));
  }
  return listed;
}

StatusOr<std::string> Executions::Bundle(const Caller& caller, const std::string& id) {
  ASSIGN_OR_RETURN(ExecutionRow row, Get(caller, id));
  ASSIGN_OR_RETURN(std::optional<std::string> bundle, store_.GetExecutionBundle(row.id));
  if (!bundle) {
    return Status::Error("execution " + id + " has no bundle (" +
                             (row.state == "running" ? std::string("it is running")
                                                     : !row.error.empty() ? row.error : "no new commits") +
                             ")",
                         ENOENT);
  }
  return std::move(*bundle);
}

Status Executions::Recover() {
  // Failed, and their execution.finished recorded, in one transaction.
  std::vector<ExecutionRow> failed;
  RETURN_IF_ERROR(store_.InTransaction([&]() -> Status {
    ASSIGN_OR_RETURN(failed, store_.FailRunningExecutions("daemon restarted", UnixNow()));
    std::vector<OutboxRow> rows;
    for (const ExecutionRow& row : failed) {
      if (webhooks_ == nullptr) break;
      for (OutboxRow& outbox : webhooks_->RowsOf(FinishedEvent(row))) rows.push_back(std::move(outbox));
    }
    return store_.InsertOutbox(rows);
  }));
  Caller admin;
  admin.admin = true;
  for (const ExecutionRow& row : failed) {
    json asked = json::parse(row.request_json, nullptr, false);
    const bool keep = asked.is_object() && asked.value("keep_sandbox", false);
    std::string sandbox = row.sandbox_id;
    if (sandbox.empty()) {
      // The daemon went between making the sandbox and writing its id down: it has the
      // execution's name.
      auto sandboxes = store_.ListSandboxes(row.iss, row.sub);
      if (sandboxes.ok()) {
        for (const auto& candidate : *sandboxes) {
          if (candidate.name == row.id) sandbox = candidate.id;
        }
      }
    }
    LogInfo("execute", "failed: the daemon restarted", {{"execution", row.id}, {"sandbox", sandbox}});
    if (sandbox.empty() || (keep && !row.session_id.empty())) continue;
    manager_.Destroy(admin, sandbox, [id = sandbox](StatusOr<bool> destroyed) {
      if (!destroyed.ok() && destroyed.status().error_number() != ENOENT) {
        LogWarn("execute", "destroy the sandbox of an interrupted execution",
                {{"sandbox", id}, {"error", destroyed.status().ToString()}});
      }
    });
  }
  return Status();
}

}  // namespace corral::supervisor
