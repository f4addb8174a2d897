// Executions: headless runs of an agent on a copy of a git repository (POST /v1/execute).
//
// One execution, on the event loop (kernel and file work on the worker pool):
//
//   1. the repository: the bundle the caller sent, or `git bundle create - --all` of a host
//      directory the operator allows ([execute] allowed_repo_paths; host_repo.h), made on the pool
//   2. a sandbox of the caller's, as POST /v1/sandboxes makes one (within the token's limits)
//   3. the bundle written into it (the file API's openat2-confined writes, as `agent`) and
//      cloned to /home/agent/repo as `agent`; HEAD is the base commit
//   4. an agent session there with the task as its first message, the token's budget
//      -> the caller's answer: the record, `running`, with its sandbox and session
//   5. when the agent's turn has its `result`, the session is closed; once it has ended (or the
//      timeout aborted it), what the agent left uncommitted is committed (as "corral"), and the
//      record gets the diff base..HEAD (cut at [execute] max_diff), the files changed, a git
//      bundle of base..HEAD (none without new commits; refused above max_bundle), the result's
//      text, the session's outcome, cost and usage
//   6. the sandbox is destroyed (unless keep_sandbox), then the record is `completed` (or
//      `failed`, with `error`, when the agent ended without a result or a step failed)
//
// A failure before step 4 is the caller's answer instead, and leaves nothing: the sandbox is
// destroyed and the record removed. A daemon that stops during an execution leaves it `running`
// in the store; the next one's Recover() marks it failed ("daemon restarted") and destroys its
// sandbox (unless keep_sandbox).
//
// Ownership as everywhere: another user's execution is ENOENT, like one that does not exist.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include "common/status.h"
#include "supervisor/config.h"
#include "supervisor/sandboxes/sandbox_git.h"
#include "supervisor/sandboxes/sandbox_manager.h"
#include "supervisor/sessions/session_runner.h"
#include "supervisor/webhooks/webhook_outbox.h"
#include "supervisor/store/store.h"

namespace corral::supervisor {

// Where the repository is cloned in the execution's sandbox (the agent's working directory).
inline constexpr char kExecuteRepoPath[] = "/home/agent/repo";

struct ExecuteRequest {
  std::string bundle;      // a git bundle's bytes, or
  std::string host_path;   // a host repository under [execute] allowed_repo_paths
  std::string task;        // the agent's first (and only) message
  std::string model;       // "" = the CLI's default
  std::string permission_mode = "bypassPermissions";
  std::optional<uint64_t> timeout_s;  // default and maximum: [execute] timeout
  bool keep_sandbox = false;
  Budget budget;           // the caller's token's: the session's model calls are debited to it
};

class Executions {
 public:
  template <typename T>
  using Done = std::function<void(StatusOr<T>)>;

  Executions(boost::asio::io_context& io, boost::asio::thread_pool& pool, const DaemonConfig& config, Store& store,
             SandboxManager& manager, SessionRunner& sessions);
  ~Executions();

  // Steps 1-4; `done` gets the running record (or the error that stopped it) from the loop.
  void Start(const Caller& caller, const UserCaps& caps, ExecuteRequest request, Done<ExecutionRow> done);
  StatusOr<ExecutionRow> Get(const Caller& caller, const std::string& id);
  // The caller's (every user's for the admin socket), oldest first.
  StatusOr<std::vector<ExecutionRow>> List(const Caller& caller);
  // Removes an ended execution's record and bundle (EBUSY while it runs).
  Status Delete(const Caller& caller, const std::string& id);
  // The bundle of base..HEAD; ENOENT when the execution has none.
  StatusOr<std::string> Bundle(const Caller& caller, const std::string& id);
  // At start, after the sessions' recovery: see above.
  Status Recover();

  // The webhook outbox an execution's end (execution.finished) is recorded in, with its final
  // record (null: none). Set at start, before Recover.
  void SetWebhooks(WebhookOutbox* webhooks) { webhooks_ = webhooks; }

  // git in the user's interactive sandboxes (the API's git routes), on the same loop.
  SandboxGit& git() { return git_; }

 private:
  struct Run;

  void CreateSandbox(const std::shared_ptr<Run>& run);
  void CopyBundle(const std::shared_ptr<Run>& run);
  void Clone(const std::shared_ptr<Run>& run);
  void StartSession(const std::shared_ptr<Run>& run);
  void OnSessionEvent(Run& run, const StreamEvent& event);
  void OnTimeout(const std::string& id);
  void Collect(const std::string& id, const SessionRow& session);
  void Commit(const std::shared_ptr<Run>& run);
  void CollectDiff(const std::shared_ptr<Run>& run);
  void CollectBundle(const std::shared_ptr<Run>& run);
  // The end of an execution: the sandbox goes (unless kept), then the record is stored (or, when
  // the caller has not been answered yet, removed and `error` answered).
  void Finish(const std::shared_ptr<Run>& run, Status error);
  void Save(Run& run);
  std::shared_ptr<Run> Find(const std::string& id);
  // The callback of a step that answers a T: nothing once this object is gone, Finish(run, the
  // error) on an error, else next(the value).
  template <typename T>
  std::function<void(StatusOr<T>)> Then(const std::shared_ptr<Run>& run, std::function<void(T&)> next);

  boost::asio::io_context& io_;
  boost::asio::thread_pool& pool_;
  const DaemonConfig& config_;
  supervisor::Store& store_;
  SandboxManager& manager_;
  SessionRunner& sessions_;
  SandboxGit git_;
  WebhookOutbox* webhooks_ = nullptr;
  std::map<std::string, std::shared_ptr<Run>> running_;
  // Callbacks handed to the runner and the pool hold it weakly: none runs after destruction.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace corral::supervisor
