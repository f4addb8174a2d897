// SandboxManager: a sandbox's lifecycle (sandbox_manager.h): create, start, stop, destroy, and
// the control connection to its init while it runs.
#include "supervisor/sandboxes/sandbox_manager.h"

#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/log.h"
#include "isolation/sandbox_spec.h"
#include "supervisor/egress/egress_proxy.h"
#include "supervisor/sandboxes/trust_bundle.h"
#include "supervisor/sandboxes/full_network.h"
#include "supervisor/sandboxes/launched.h"
#include "supervisor/ids.h"

namespace corral::supervisor {

namespace asio = boost::asio;
using initproto::MsgType;

void SandboxManager::Create(const Caller& caller, const UserCaps& caps, CreateRequest request,
                            Done<SandboxRow> done) {
  if (Status named = CheckSandboxName(request.name); !named.ok()) return done(named);
  if (Status open = TakesNewSandboxes(); !open.ok()) return done(open);
  std::optional<SnapshotRow> snapshot;
  if (!request.snapshot.empty()) {
    auto found = OwnedSnapshot(caller, request.snapshot);
    if (!found.ok()) return done(found.status());
    const uint64_t disk_bytes = found->limits.disk_bytes.value_or(0);
    if (disk_bytes == 0) return done(Status::Error("snapshot " + found->id + " does not record its disk size", EIO));
    // The copy is an image of the snapshot's size: a file system does not shrink or grow here.
    if (request.limits.disk_bytes && *request.limits.disk_bytes != disk_bytes) {
      return done(Status::Error("disk_bytes: a sandbox made from snapshot " + found->id + " keeps its disk size (" +
                                    std::to_string(disk_bytes) + ")",
                                EINVAL));
    }
    request.limits.disk_bytes = disk_bytes;
    snapshot = *found;
  }
  // A sandbox made from a snapshot has the snapshot's image.
  StatusOr<ChosenImage> image = snapshot ? ChosenImage{snapshot->image, snapshot->image_name}
                                         : ResolveImage(caps, request.image);
  if (!image.ok()) return done(image.status());
  if (snapshot && request.image != isolation::kHostImage && request.image != snapshot->image &&
      request.image != snapshot->image_name) {
    return done(Status::Error("image: a sandbox made from snapshot " + snapshot->id + " has its image (" +
                                  (snapshot->image_name.empty() ? snapshot->image : snapshot->image_name) + ")",
                              EINVAL));
  }
  auto limits = admission_.Limits(caps, request.limits);
  if (!limits.ok()) return done(limits.status());
  auto idle = admission_.IdleTimeout(caps, request.idle_timeout_s);
  if (!idle.ok()) return done(idle.status());
  auto egress = admission_.EgressRulesFor(caps, request.egress);
  if (!egress.ok()) return done(egress.status());
  Status allowed = Admission::CheckNetwork(caller, caps, request.network, network_ != nullptr);
  if (!allowed.ok()) return done(allowed);
  auto secrets = CheckSecretNames(caller.iss, caller.sub, std::move(request.secrets));
  if (!secrets.ok()) return done(secrets.status());

  SandboxRow row;
  row.id = NewId("sb");
  row.iss = caller.iss;
  row.sub = caller.sub;
  row.name = request.name;
  row.image = image->digest;
  row.image_name = image->name;
  row.state = "created";
  row.limits = *limits;
  row.idle_timeout_s = static_cast<int64_t>(*idle);
  row.created_at = row.updated_at = row.last_active_at = Now();
  row.budget = caller.budget;
  row.egress = *egress;
  row.network = request.network;
  row.secrets = std::move(*secrets);
  if (request.start && !caller.admin) {
    Status compute = meter_.CheckStart(caller.iss, caller.sub, caller.budget);
    if (!compute.ok()) return done(compute);
  }
  if (snapshot) {
    row.state = "creating";
    row.source = snapshot->id;
    auto created = admission_.Insert(caller, caps, row);
    if (!created.ok()) return done(created.status());
    LayerSource source;
    source.snapshot_id = snapshot->id;
    source.uid_base = snapshot->uid_base;
    return FillLayer(*created, std::move(source), request.start, std::move(done));
  }
  // A started sandbox of a shape the warm pool holds is one of those, claimed.
  // (Not one that names secrets: a pooled sandbox started without their trust store.)
  if (request.start && row.network == kNetworkLoopback && row.secrets.empty()) {
    auto pooled = warm_pool_.Take(ShapeOf(row.image, *limits->disk_bytes, *limits->cpu_millicores));
    if (pooled) return ClaimPooled(caller, caps, std::move(row), std::move(*pooled), std::move(done));
  }
  CreateFresh(caller, caps, std::move(row), request.start, std::move(done));
}

void SandboxManager::CreateFresh(const Caller& caller, const UserCaps& caps, SandboxRow row, bool start,
                                 Done<SandboxRow> done) {
  auto created = admission_.Insert(caller, caps, row);
  if (!created.ok()) return done(created.status());
  AppendLifecycle(*created, WebhookEventType::kSandboxCreated);
  LogInfo("sandbox", "created", {{"sandbox", created->id}, {"iss", caller.iss}, {"sub", caller.sub}});
  if (!start) return done(*created);
  busy_[created->id] = true;
  DoStart(*created, std::move(done));
}

namespace {

// Why a start failed, for the API: the host out of a resource (disk, memory, file descriptors,
// processes) is `unavailable` (EAGAIN: try again later, or elsewhere) with the reason; anything
// else is an internal error (EIO) whose details the log has too.
Status StartFailure(const std::string& id, const Status& why) {
  switch (why.error_number()) {
    case ENOSPC:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
    case EAGAIN:
      return Status::Error("sandbox " + id + " could not start, the host is out of room: " + why.ToString(), EAGAIN);
    default:
      return Status::Error("sandbox " + id + " could not start: " + why.ToString(), EIO);
  }
}

}  // namespace

void SandboxManager::Start(const Caller& caller, const std::string& id, Done<SandboxRow> done) {
  auto row = Owned(caller, id);
  if (!row.ok()) return done(row.status());
  if (busy_[id]) return done(Status::Error("sandbox " + id + " is " + row->state, EBUSY));
  if (row->state == "running") return done(*row);
  if (!caller.admin) {
    // Its CPU time is debited against the budget of the token that starts it.
    Status compute = meter_.CheckStart(caller.iss, caller.sub, caller.budget);
    if (!compute.ok()) return done(compute);
    row->budget = caller.budget;
  }
  busy_[id] = true;
  DoStart(*row, std::move(done));
}

SandboxManager::Launched SandboxManager::Launch(const SandboxRow& row, const isolation::SandboxSpec& spec) {
  Launched out;
  out.process = host_.Start(row.id, spec);
  // What init holds for us: its loopback listeners (a new sandbox holds no commands).
  if (out.process.ok()) {
    out.hello = Hello(out.process->control.get(), kHelloTimeout, nullptr);
    if (!out.hello.ok()) {
      // Where init was, for the log: what it was waiting in (a start that timed out once in CI
      // under load, and could not be made to again).
      const pid_t pid = out.process->pid;
      auto wchan = ReadFileToString("/proc/" + std::to_string(pid) + "/wchan");
      const char state = ProcessState(pid);
      (void)host_.Stop(row.id, &*out.process);
      out.process = Status::Error("corral-init did not answer: " + out.hello.status().ToString() + " (init " +
                                      std::to_string(pid) + " state " + std::string(1, state) + ", waiting in " +
                                      (wchan.ok() && !wchan->empty() ? *wchan : "?") + ")",
                                  EIO);
    } else {
      out.process->init_version = out.hello->version;
    }
  }
  // A full-network sandbox gets its interface before anyone can run a command in it.
  if (out.process.ok() && spec.full_network()) {
    StatusOr<NetworkAttachment> attach = Status::Error("network \"full\" is not available on this daemon", EAGAIN);
    if (network_ != nullptr) {
      attach = network_->Attach(row.id, out.process->pidfd.get(), row.egress.value_or(EgressRules{}).cidrs);
    }
    if (attach.ok()) {
      out.network = *attach;
    } else {
      (void)host_.Stop(row.id, &*out.process);
      out.process = Status::Error("its network: " + attach.status().ToString(), attach.status().error_number());
    }
  }
  return out;
}

void SandboxManager::DoStart(SandboxRow row, Done<SandboxRow> done) {
  SetState(row, "starting");
  StatusOr<isolation::SandboxSpec> spec = SpecOf(row, /*starting=*/true);
  asio::post(pool_, [this, row, spec, done = std::move(done)]() mutable {
    auto launched = std::make_shared<Launched>();
    if (spec.ok()) *launched = Launch(row, *spec);
    else launched->process = spec.status();
    asio::post(io_, [this, row = std::move(row), launched, done = std::move(done)]() mutable {
      busy_.erase(row.id);
      if (!launched->process.ok()) {
        const std::string error = launched->process.status().ToString();
        LogError("sandbox", "start failed", {{"sandbox", row.id}, {"error", error}});
        SetState(row, "stopped");
        return done(StartFailure(row.id, launched->process.status()));
      }
      if (detached_) return;
      row.init_pid = launched->process->pid;
      row.init_start_time = static_cast<int64_t>(launched->process->start_time);
      row.cpu_billed_usec = 0;  // a new cgroup: its CPU time starts at zero
      row.last_active_at = Now();
      SetState(row, "running");
      AppendLifecycle(row, WebhookEventType::kSandboxStarted);
      if (const auto& attached = launched->network) {
        (void)store_.AppendEvent(row.id, "network",
                                 nlohmann::json{{"mode", kNetworkFull},
                                                {"address", attached->address},
                                                {"gateway", attached->gateway},
                                                {"interface", attached->interface}}
                                     .dump());
        LogInfo("sandbox", "full network attached",
                {{"sandbox", row.id}, {"address", attached->address}, {"interface", attached->interface}});
      }
      // SetEgress and SetSecretNames write the store alone while a sandbox starts: the proxy
      // gets the rules and secrets as they are now.
      SandboxRow served = row;
      if (auto current = store_.GetSandbox(row.id); current.ok() && current->has_value()) {
        served.egress = (*current)->egress;
        served.secrets = (*current)->secrets;
      }
      OnStarted(served, std::move(*launched->process), std::move(launched->hello->listeners));
      done(row);
    });
  });
}

void SandboxManager::OnStarted(SandboxRow row, SandboxProcess process, std::vector<UniqueFd> listeners) {
  // The egress proxy has the sandbox's rules before it serves the sandbox.
  if (egress_ != nullptr) {
    egress_->SetRules(row.id, row.egress.value_or(EgressRules{}));
    egress_->SetSecrets(row.id, row.iss, row.sub, row.secrets);
  }
  if (loopback_ && !listeners.empty()) loopback_->Serve(row.id, std::move(listeners));
  auto live = std::make_shared<Live>();
  live->id = row.id;
  live->compute.sandbox_id = row.id;
  live->compute.iss = row.iss;
  live->compute.sub = row.sub;
  live->compute.budget = row.budget;
  live->compute.cpu_billed_usec = row.cpu_billed_usec;
  live->active_at = row.last_active_at;
  live->idle_timeout_s = row.idle_timeout_s;
  live->control = std::make_unique<asio::posix::stream_descriptor>(io_, process.control.release());
  live->init_exit = std::make_unique<asio::posix::stream_descriptor>(io_, process.pidfd.release());
  live->process = std::move(process);
  live_[row.id] = live;
  WatchControl(live);
  WatchInit(live);
}

void SandboxManager::WatchControl(const std::shared_ptr<Live>& live) {
  std::weak_ptr<Live> weak = live;
  live->control->async_wait(asio::posix::stream_descriptor::wait_read, [this, weak](boost::system::error_code ec) {
    auto sandbox = weak.lock();
    if (ec || !sandbox || !sandbox->control) return;
    for (;;) {
      auto message = ReceiveMessage(sandbox->control_fd(), true);
      if (!message.ok() && message.status().error_number() == EAGAIN) break;
      if (!message.ok() || !message->has_value()) {
        // init closed the connection: it is exiting; the pidfd watch does the rest.
        sandbox->control.reset();
        return;
      }
      OnControlMessage(sandbox, std::move(**message));
      if (!sandbox->control) return;
    }
    WatchControl(sandbox);
  });
}

void SandboxManager::WatchInit(const std::shared_ptr<Live>& live) {
  std::string id = live->id;
  live->init_exit->async_wait(asio::posix::stream_descriptor::wait_read, [this, id](boost::system::error_code ec) {
    if (ec) return;
    OnInitGone(id);
  });
}

void SandboxManager::OnControlMessage(const std::shared_ptr<Live>& live, InitMessage message) {
  switch (message.type) {
    case MsgType::kExited: {
      initproto::ExitedBody body;
      if (!message.BodyAs(body)) return;
      auto it = live->commands.find(body.seq);
      if (it != live->commands.end()) it->second->OnExited(body.wait_status);
      return;
    }
    case MsgType::kExecFailed: {
      initproto::ExecFailedBody body;
      if (!message.BodyAs(body)) return;
      auto it = live->commands.find(body.seq);
      if (it != live->commands.end()) it->second->OnExited(W_EXITCODE(125, 0));
      return;
    }
    default:
      return;
  }
}

void SandboxManager::OnInitGone(const std::string& id) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  if (busy_[id]) return;  // a stop is under way and finishes the job
  // Nobody asked: init died (killed from the host, or the sandbox hit something fatal).
  LogWarn("sandbox", "init exited unexpectedly", {{"sandbox", id}});
  busy_[id] = true;
  DoStop(id, /*by_request=*/false, [this, id](Status) { busy_.erase(id); });
}

void SandboxManager::Stop(const Caller& caller, const std::string& id, Done<SandboxRow> done) {
  auto row = Owned(caller, id);
  if (!row.ok()) return done(row.status());
  if (busy_[id]) return done(Status::Error("sandbox " + id + " is " + row->state, EBUSY));
  if (row->state != "running") return done(*row);
  busy_[id] = true;
  DoStop(id, /*by_request=*/true, [this, id, done = std::move(done)](Status status) {
    busy_.erase(id);
    if (!status.ok()) return done(status);
    auto stopped = store_.GetSandbox(id);
    if (!stopped.ok()) return done(stopped.status());
    if (!stopped->has_value()) return done(NotFound("sandbox " + id));
    done(**stopped);
  });
}

void SandboxManager::DoStop(const std::string& id, bool by_request, std::function<void(Status)> done,
                            bool immediate) {
  auto row = store_.GetSandbox(id);
  bool full_network = false;
  if (row.ok() && row->has_value()) {
    Fresh(**row);
    SetState(**row, "stopping");
    full_network = (*row)->network == kNetworkFull;
  }
  std::shared_ptr<Live> live;
  if (auto it = live_.find(id); it != live_.end()) live = it->second;
  auto finish = [this, id, by_request, full_network, live, done = std::move(done)]() mutable {
    FinishStop(id, by_request, full_network, live, std::move(done));
  };
  if (immediate || !live || live->commands.empty() || !live->control) return finish();
  StopGracefully(live, by_request, std::move(finish));
}

void SandboxManager::StopGracefully(const std::shared_ptr<Live>& live, bool by_request, std::function<void()> finish) {
  // SIGTERM first; SIGKILL (with init) after the grace period or once every command ended.
  const auto running = live->commands;  // a copy: nothing below may change what is walked
  for (auto& [seq, command] : running) {
    if (by_request) command->MarkKilledByRequest();
    (void)command->Signal(SIGTERM);
  }
  auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::seconds(config_.stop_grace_s));
  auto fired = std::make_shared<bool>(false);
  auto once = std::make_shared<std::function<void()>>(std::move(finish));
  auto run_once = [fired, once, timer]() {
    if (*fired) return;
    *fired = true;
    timer->cancel();
    (*once)();
  };
  timer->async_wait([run_once](boost::system::error_code) { run_once(); });
  // Poll for the commands' ends: cheap, and only while a stop is in progress.
  auto poll = std::make_shared<std::function<void()>>();
  auto poll_timer = std::make_shared<asio::steady_timer>(io_);
  *poll = [live, run_once, fired, poll, poll_timer]() {
    if (*fired) return;
    // Ended: the kernel says so; output a slow client has not taken yet does not hold the stop.
    bool all_done = std::all_of(live->commands.begin(), live->commands.end(),
                                [](const auto& entry) { return entry.second->ended(); });
    if (all_done) return run_once();
    poll_timer->expires_after(std::chrono::milliseconds(20));
    poll_timer->async_wait([poll](boost::system::error_code ec) {
      if (!ec) (*poll)();
    });
  };
  (*poll)();
}

void SandboxManager::FinishStop(const std::string& id, bool by_request, bool full_network, std::shared_ptr<Live> live,
                                std::function<void(Status)> done) {
  // Why: the idle sweep and the compute meter say so before they stop it; otherwise asked.
  StopReason reason = StopReason::kRequest;
  if (auto it = stop_reasons_.find(id); it != stop_reasons_.end()) {
    reason = it->second;
    stop_reasons_.erase(it);
  }
  // The commands that have not ended take their figures from the stop (below).
  std::vector<uint64_t> seqs;
  std::vector<std::shared_ptr<Command>> stopped_commands;
  if (live) {
    meter_.Read(live->compute);  // what it used so far (the rest once it is killed, below)
    // A finished command leaves live->commands (OnCommandFinished): walking the map itself
    // while commands finish would step on a freed node (a SIGSEGV seen when a compute budget
    // ran out). Take the commands out first.
    auto commands = std::move(live->commands);
    live->commands.clear();
    for (auto& [seq, command] : commands) {
      command->Abort(by_request);
      if (command->ended()) continue;
      seqs.push_back(seq);
      stopped_commands.push_back(command);
    }
    live->control.reset();
    live->init_exit.reset();
    live_.erase(id);
    if (loopback_) loopback_->Forget(id);
    if (trust_ != nullptr) trust_->Remove(id);
  }
  auto process = std::make_shared<SandboxProcess>(live ? std::move(live->process) : SandboxProcess());
  if (live) {
    // The fds moved into the asio objects above; reopen the pidfd to wait for the exit.
    process->pidfd.reset();
  }
  asio::post(pool_, [this, id, process, full_network, live, reason, seqs = std::move(seqs),
                     stopped_commands = std::move(stopped_commands), done = std::move(done)]() mutable {
    // The figures before the cgroups go: everything in the sandbox is killed first (init's
    // SIGKILL in Stop would take it down too), so what is read next is final.
    StopFigures figures;
    if (live) figures = KillAndRead(id, seqs);
    if (process->pid > 0 && ProcessStartTime(process->pid) == process->start_time) {
      process->pidfd.reset(static_cast<int>(syscall(SYS_pidfd_open, process->pid, 0)));
    }
    Status stopped = host_.Stop(id, process->pidfd ? process.get() : nullptr);
    if (full_network && network_ != nullptr) {
      // The veth went with the sandbox's namespace; its filter and NAT go now.
      Status detached = network_->Detach(id);
      if (!detached.ok()) LogError("sandbox", "cannot remove its network", {{"sandbox", id}, {"error", detached.ToString()}});
      if (stopped.ok()) stopped = detached;
    }
    asio::post(io_, [this, id, stopped, live, reason, figures = std::move(figures),
                     stopped_commands = std::move(stopped_commands), done = std::move(done)]() mutable {
      if (!stopped.ok()) LogError("sandbox", "stop failed", {{"sandbox", id}, {"error", stopped.ToString()}});
      if (live && figures.sandbox.ok()) meter_.Debit(live->compute, *figures.sandbox);  // the last of its CPU time
      for (size_t i = 0; i < stopped_commands.size() && i < figures.commands.size(); ++i) {
        stopped_commands[i]->OnStopped(std::move(figures.commands[i]), figures.killed_us);
      }
      auto current = store_.GetSandbox(id);
      if (current.ok() && current->has_value()) {
        (*current)->init_pid = 0;
        (*current)->init_start_time = 0;
        SetState(**current, "stopped");
        CloseAllPorts(id, "sandbox_stopped");
        AppendLifecycle(**current, WebhookEventType::kSandboxStopped,
                        nlohmann::json{{"reason", std::string(StopReasonName(reason))}}.dump(), reason);
      }
      done(stopped);
    });
  });
}

SandboxManager::StopFigures SandboxManager::KillAndRead(const std::string& id, const std::vector<uint64_t>& seqs) {
  const std::string cgroup = host_.SandboxCgroup(id);
  Status killed = host_.backend().Kill(cgroup);
  if (!killed.ok() && killed.error_number() != ENOENT) {
    LogWarn("sandbox", "cannot kill its processes before reading its figures",
            {{"sandbox", id}, {"error", killed.ToString()}});
  }
  StopFigures figures;
  figures.killed_us = MonotonicMicros();
  figures.sandbox = host_.backend().Stats(cgroup);
  for (uint64_t seq : seqs) figures.commands.push_back(host_.CommandCgroupStats(id, seq));
  return figures;
}

void SandboxManager::Destroy(const Caller& caller, const std::string& id, Done<bool> done) {
  if (caller.admin) {
    if (auto pooled = warm_pool_.TakeId(id)) {
      // The operator takes one out of the pool; the pool makes another.
      return DestroyPooled(std::move(*pooled), [this, done = std::move(done)] {
        done(true);
        FillPool();
      });
    }
  }
  auto row = Owned(caller, id);
  if (!row.ok()) return done(row.status());
  if (busy_[id]) return done(Status::Error("sandbox " + id + " is " + row->state, EBUSY));
  busy_[id] = true;
  auto destroy = [this, id, owner = *row, done = std::move(done)](Status) mutable {
    auto current = store_.GetSandbox(id);
    if (current.ok() && current->has_value()) SetState(**current, "destroying");
    asio::post(pool_, [this, id, owner, done = std::move(done)]() mutable {
      Status destroyed = host_.Destroy(id);
      asio::post(io_, [this, id, owner, destroyed, done = std::move(done)]() mutable {
        busy_.erase(id);
        if (!destroyed.ok()) {
          LogError("sandbox", "destroy failed", {{"sandbox", id}, {"error", destroyed.ToString()}});
          return done(destroyed);
        }
        Status deleted = store_.DeleteSandbox(id);
        if (!deleted.ok() && deleted.error_number() != ENOENT) return done(deleted);
        AppendLifecycle(owner, WebhookEventType::kSandboxDestroyed);
        LogInfo("sandbox", "destroyed", {{"sandbox", id}});
        done(true);
      });
    });
  };
  if (row->state == "running" || live_.count(id)) return DoStop(id, /*by_request=*/true, std::move(destroy));
  destroy(Status());
}

}  // namespace corral::supervisor
