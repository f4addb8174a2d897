// SessionRunner: checkpoints of agent sessions (session_runner.h; docs/PROTOCOL.md "Checkpoints").
// Claude Code keeps a session's transcript in the workspace (HOME is /home/agent), so a snapshot
// of the sandbox at a turn boundary holds the files and the conversation as they were together;
// a restore puts the snapshot's files back (or uses a sandbox made from it) and forks the agent
// session it names, whose transcript is then the one of that turn.
#include <cerrno>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/unix_time.h"
#include "supervisor/ids.h"
#include "supervisor/sessions/session_runner.h"
#include "supervisor/visibility.h"

namespace corral::supervisor {

namespace {

using json = nlohmann::json;

Status NoCheckpoint(const std::string& id) { return Status::Error("checkpoint " + id + " not found", ENOENT); }

// The working directory a session's options name ("" = /home/agent).
std::string CwdOf(const std::string& options_json) {
  const json options = json::parse(options_json, nullptr, false);
  if (!options.is_object()) return "";
  auto cwd = options.find("cwd");
  return cwd != options.end() && cwd->is_string() ? cwd->get<std::string>() : "";
}

}  // namespace

Status SessionRunner::RestoredHistory(const CheckpointRow& checkpoint, NewSession& request, SessionRow& row,
                                      std::vector<std::string>& history) {
  if (request.options.cwd.empty()) request.options.cwd = checkpoint.cwd;
  if (request.options.cwd != checkpoint.cwd) {
    return Status::Error("cwd: checkpoint " + checkpoint.id + " is of a session in " +
                             (checkpoint.cwd.empty() ? "/home/agent" : checkpoint.cwd) + "; its restore works there too",
                         EINVAL);
  }
  row.parent_id = checkpoint.session_id;
  history = {"--resume", checkpoint.agent_session, "--fork-session"};
  return Status();
}

void SessionRunner::Checkpoint(const Caller& caller, const std::string& session_id,
                               SandboxManager::Done<CheckpointRow> done) {
  auto session = Get(caller, session_id);
  if (!session.ok()) return done(session.status());
  const std::string& state = session->state;
  if (state != "ready" && state != "idle" && state != "completed") {
    return done(Status::Error("session " + session_id + " is " + state + ": a checkpoint is taken between turns", EBUSY));
  }
  if (checkpointing_.count(session_id)) {
    return done(Status::Error("a checkpoint of session " + session_id + " is being taken", EBUSY));
  }
  checkpointing_.insert(session_id);
  manager_.Snapshot(caller, session->sandbox_id, [this, caller, session_id, done = std::move(done)](
                                                     StatusOr<SnapshotRow> snapshot) {
    checkpointing_.erase(session_id);
    if (!snapshot.ok()) return done(snapshot.status());
    // The session as the copy has it: no turn started meanwhile (Send waits for the copy).
    auto now = Get(caller, session_id);
    if (!now.ok()) return done(now.status());
    CheckpointRow checkpoint;
    checkpoint.id = NewId("chk");
    checkpoint.session_id = session_id;
    checkpoint.sandbox_id = now->sandbox_id;
    checkpoint.snapshot_id = snapshot->id;
    checkpoint.iss = now->iss;
    checkpoint.sub = now->sub;
    checkpoint.agent_session = now->agent_session;
    checkpoint.cwd = CwdOf(now->options_json);
    checkpoint.turns = now->turns;
    checkpoint.created_at = UnixNow();
    if (Status stored = store_.InsertCheckpoint(checkpoint); !stored.ok()) {
      manager_.DeleteSnapshot(caller, snapshot->id, [](StatusOr<bool>) {});
      return done(stored);
    }
    if (auto live = live_.find(session_id); live != live_.end()) {
      live->second->Emit({{"kind", "checkpoint"}, {"checkpoint", checkpoint.id}, {"turns", checkpoint.turns}});
    }
    LogInfo("session", "checkpoint taken",
            {{"session", session_id}, {"checkpoint", checkpoint.id}, {"snapshot", checkpoint.snapshot_id}});
    done(checkpoint);
  });
}

StatusOr<CheckpointRow> SessionRunner::GetCheckpoint(const Caller& caller, const std::string& id) {
  if (!IsWellFormedId(id, "chk")) return NoCheckpoint(id);
  ASSIGN_OR_RETURN(std::optional<CheckpointRow> row, store_.GetCheckpoint(id));
  if (!row || !MaySee(caller, row->iss, row->sub)) return NoCheckpoint(id);
  return *row;
}

StatusOr<std::vector<CheckpointRow>> SessionRunner::ListCheckpoints(const Caller& caller, const std::string& session_id) {
  RETURN_IF_ERROR(Get(caller, session_id).status());
  return store_.ListCheckpoints(session_id);
}

void SessionRunner::DeleteCheckpoint(const Caller& caller, const std::string& id, SandboxManager::Done<bool> done) {
  auto checkpoint = GetCheckpoint(caller, id);
  if (!checkpoint.ok()) return done(checkpoint.status());
  // The checkpoint's row goes with its snapshot's (ON DELETE CASCADE), then the files.
  manager_.DeleteSnapshot(caller, checkpoint->snapshot_id, std::move(done));
}

void SessionRunner::CreateFromCheckpoint(const Caller& caller, const UserCaps& caps, NewSession request,
                                         SandboxManager::Done<std::shared_ptr<AgentSession>> done) {
  if (!request.resume.empty() || !request.fork.empty()) {
    return done(Status::Error("resume, fork and checkpoint: one of them", EINVAL));
  }
  auto checkpoint = GetCheckpoint(caller, request.checkpoint);
  if (!checkpoint.ok()) return done(checkpoint.status());
  auto sandbox = manager_.Get(caller, request.sandbox_id);
  if (!sandbox.ok()) return done(sandbox.status());
  for (const auto& [id, session] : live_) {
    if (session->row().sandbox_id == sandbox->id) {
      return done(Status::Error("session " + id + " runs in sandbox " + sandbox->id + ": close it first", EBUSY));
    }
  }
  const CheckpointRow chk = *checkpoint;
  if (sandbox->id != chk.sandbox_id) {
    // A sandbox made from the checkpoint's snapshot: its files are the checkpoint's, as it has them.
    if (sandbox->source != chk.snapshot_id) {
      return done(Status::Error("sandbox " + sandbox->id + " holds neither the files of checkpoint " + chk.id +
                                    " nor a copy of them: restore it in " + chk.sandbox_id +
                                    ", or in a sandbox made from snapshot " + chk.snapshot_id,
                                EINVAL));
    }
    if (sandbox->state == "running") return StartRestored(caller, caps, std::move(request), chk, std::move(done));
    return manager_.Start(caller, sandbox->id, [this, caller, caps, request = std::move(request), chk,
                                                done = std::move(done)](StatusOr<SandboxRow> started) mutable {
      if (!started.ok()) return done(started.status());
      StartRestored(caller, caps, std::move(request), chk, std::move(done));
    });
  }
  // In place: stopped, the checkpoint's files put back, started again.
  auto restore = [this, caller, caps, request = std::move(request), chk, done = std::move(done)](
                     StatusOr<SandboxRow> stopped) mutable {
    if (!stopped.ok()) return done(stopped.status());
    manager_.Restore(caller, chk.sandbox_id, chk.snapshot_id,
                     [this, caller, caps, request = std::move(request), chk, done = std::move(done)](
                         StatusOr<SandboxRow> restored) mutable {
                       if (!restored.ok()) return done(restored.status());
                       manager_.Start(caller, chk.sandbox_id,
                                      [this, caller, caps, request = std::move(request), chk, done = std::move(done)](
                                          StatusOr<SandboxRow> started) mutable {
                                        if (!started.ok()) return done(started.status());
                                        StartRestored(caller, caps, std::move(request), chk, std::move(done));
                                      });
                     });
  };
  if (sandbox->state == "running") return manager_.Stop(caller, sandbox->id, std::move(restore));
  restore(*sandbox);
}

void SessionRunner::StartRestored(const Caller& caller, const UserCaps& caps, NewSession request,
                                  const CheckpointRow& checkpoint, SandboxManager::Done<std::shared_ptr<AgentSession>> done) {
  request.restored = checkpoint;
  auto session = Create(caller, caps, std::move(request));
  if (session.ok()) {
    LogInfo("session", "restored from a checkpoint",
            {{"session", (*session)->id()}, {"checkpoint", checkpoint.id}, {"sandbox", (*session)->row().sandbox_id}});
  }
  done(std::move(session));
}

}  // namespace corral::supervisor
