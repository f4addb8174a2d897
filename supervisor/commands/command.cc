#include "supervisor/commands/command.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <nlohmann/json.hpp>

#include "common/log.h"

namespace corral::supervisor {
namespace {

namespace asio = boost::asio;
using initproto::MsgType;

std::unique_ptr<asio::posix::stream_descriptor> Wrap(asio::io_context& io, UniqueFd fd) {
  if (!fd) return nullptr;
  return std::make_unique<asio::posix::stream_descriptor>(io, fd.release());
}

}  // namespace

uint64_t MonotonicMicros() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000 + static_cast<uint64_t>(ts.tv_nsec) / 1000;
}

Command::Command(Context context, CommandRow row, int control, CommandFds fds,
                 std::function<void(Command&)> on_finished)
    : ctx_(context),
      row_(std::move(row)),
      control_(control),
      on_finished_(std::move(on_finished)),
      stream_(context.replay_buffer_bytes),
      pty_(row_.pty),
      start_us_(MonotonicMicros()) {
  sync_ = std::move(fds.sync);
  out_[0] = Wrap(*ctx_.io, std::move(fds.stdout_r));
  out_[1] = Wrap(*ctx_.io, std::move(fds.stderr_r));
  in_ = Wrap(*ctx_.io, std::move(fds.stdin_w));
}

Command::Command(Context context, CommandRow row, int control,
                 const initproto::CommandStateBody& state, std::vector<UniqueFd> kept,
                 std::function<void(Command&)> on_finished)
    : ctx_(context),
      row_(std::move(row)),
      control_(control),
      on_finished_(std::move(on_finished)),
      // Above every seq the previous daemon may have handed out: a client that resumes from
      // before that gets stream_gap instead of silently missing what it held.
      stream_(context.replay_buffer_bytes, static_cast<uint64_t>(row_.seq_reserved) + 1),
      pty_(row_.pty),
      start_us_(MonotonicMicros()) {
  // Kept fds come back by position; the mask says which are present.
  size_t next = 0;
  auto take = [&](int position) -> UniqueFd {
    if ((state.fd_mask & (1u << position)) == 0 || next >= kept.size()) return UniqueFd();
    return std::move(kept[next++]);
  };
  if (pty_) {
    UniqueFd master = take(initproto::kKeptPtyMaster);
    if (master) {
      UniqueFd input(fcntl(master.get(), F_DUPFD_CLOEXEC, 3));
      out_[0] = Wrap(*ctx_.io, std::move(master));
      in_ = Wrap(*ctx_.io, std::move(input));
    }
  } else {
    out_[0] = Wrap(*ctx_.io, take(initproto::kKeptStdout));
    out_[1] = Wrap(*ctx_.io, take(initproto::kKeptStderr));
    in_ = Wrap(*ctx_.io, take(initproto::kKeptStdin));
  }
  if (!state.running) wait_status_ = state.wait_status;
  // Its wall time counts from its exec, by a previous daemon (whole seconds: the store's clock).
  const int64_t age_s = static_cast<int64_t>(time(nullptr)) - row_.created_at;
  const uint64_t age_us = age_s > 0 ? static_cast<uint64_t>(age_s) * 1000000 : 0;
  if (age_us < start_us_) start_us_ -= age_us;
}

Command::~Command() = default;

void Command::Start() {
  if (!sync_) {
    // Adopted: already running (or exited while no daemon was there).
    StartPumps();
    if (wait_status_) OnExited(*wait_status_);
    return;
  }
  sync_watch_ = std::make_unique<asio::posix::stream_descriptor>(*ctx_.io, sync_.release());
  ReadSync();
}

void Command::ReadSync() {
  auto self = shared_from_this();
  sync_watch_->async_wait(asio::posix::stream_descriptor::wait_read, [self](boost::system::error_code ec) {
    if (ec || !self->sync_watch_) return;
    for (;;) {
      auto message = ReceiveMessage(self->sync_watch_->native_handle(), true);
      if (!message.ok() && message.status().error_number() == EAGAIN) break;
      if (!message.ok() || !message->has_value()) {
        // EOF: the child exec'd (or died; its exit comes from init either way).
        self->sync_watch_.reset();
        if (self->row_.state == "starting") {
          self->row_.state = "running";
          self->StoreState();
        }
        self->StartPumps();
        // It may have ended already (its exit comes on another socket): its outcome waited for
        // what the child said here (a setup failure), and its end for its output.
        self->MaybeEnd();
        self->MaybeFinish();
        return;
      }
      self->OnSyncMessage(std::move(**message));
      if (!self->sync_watch_) {  // a failed handshake: no output to pump
        self->MaybeEnd();
        return self->MaybeFinish();
      }
    }
    self->ReadSync();
  });
}

void Command::OnSyncMessage(InitMessage message) {
  switch (message.type) {
    case MsgType::kChildHello: {
      host_pid_ = message.sender_pid;
      // Into its own cgroup before it runs anything of the command's.
      Status attached = cgroup_;
      if (attached.ok()) {
        attached = host_pid_ > 0 ? ctx_.host->backend().Attach(ctx_.host->CommandCgroup(row_.sandbox_id, seq()),
                                                               host_pid_)
                                 : Status::Error("no credentials on the child's hello", EPROTO);
      }
      if (!attached.ok() && attached.error_number() == ESRCH) {
        // It died before it could be moved (a signal sent right after exec): not a setup
        // failure; its wait status tells how it ended.
        sync_watch_.reset();
        return;
      }
      if (!attached.ok()) {
        LogError("command", "cannot put the command in its cgroup",
                 {{"command", row_.id}, {"error", attached.ToString()}});
        // Without its cgroup the command must not run: closing sync makes the child exit 125.
        sync_watch_.reset();
        failed_step_ = static_cast<int>(initproto::ChildStep::kCredentials);
        failed_what_ = "cgroup";
        failed_errno_ = attached.error_number() != 0 ? attached.error_number() : EIO;
        return;
      }
      Status go = SendChildGo(sync_watch_->native_handle());
      if (!go.ok()) sync_watch_.reset();
      return;
    }
    case MsgType::kChildPty:
      if (!message.fds.empty() && pty_) {
        UniqueFd master = std::move(message.fds[0]);
        // corral-init keeps a copy, so the terminal survives a daemon restart.
        Status kept = SendKeep(control_, seq(), master.get());
        if (!kept.ok()) LogWarn("command", "cannot hand the pty to init", {{"command", row_.id}});
        UniqueFd input(fcntl(master.get(), F_DUPFD_CLOEXEC, 3));
        out_[0] = Wrap(*ctx_.io, std::move(master));
        in_ = Wrap(*ctx_.io, std::move(input));
      }
      return;
    case MsgType::kChildFailed: {
      initproto::ChildFailedBody body;
      if (message.BodyAs(body)) {
        failed_step_ = body.step;
        failed_errno_ = body.error;
      }
      return;
    }
    default:
      return;
  }
}

void Command::StartPumps() {
  for (int i = 0; i < 2; ++i) {
    if (out_[i] && !out_open_[i] && !finished_) {
      out_open_[i] = true;
      const int fd = out_[i]->native_handle();
      (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
      // A bigger pipe: fewer, larger reads (and messages) for a command that writes a lot. The
      // pages are the writer's, charged to the sandbox. (A PTY master refuses; it keeps its own.)
      (void)fcntl(fd, F_SETPIPE_SZ, kOutputPipeBytes);
      Pump(i);
    }
  }
  if (in_ && !in_queue_.empty()) WriteNextStdin();
}

void Command::Pump(int index) {
  if (!out_[index] || out_reading_[index]) return;
  if (stream_.Blocked()) {
    out_paused_[index] = true;
    return;
  }
  out_paused_[index] = false;
  out_reading_[index] = true;
  auto self = shared_from_this();
  // Wait, then read on the event loop into one buffer that every command shares (the loop is
  // one thread and the bytes are copied into the event at once): no per-command buffer.
  out_[index]->async_wait(asio::posix::stream_descriptor::wait_read, [self, index](boost::system::error_code ec) {
    self->out_reading_[index] = false;
    if (ec == asio::error::operation_aborted || !self->out_[index]) return;
    ssize_t n = -1;
    if (!ec) {
      static thread_local std::unique_ptr<char[]> buffer(new char[kOutputChunkBytes]);
      n = read(self->out_[index]->native_handle(), buffer.get(), kOutputChunkBytes);
      if (n > 0) {
        self->ReserveSeq();
        // A PTY's output is fd 1, like stdout.
        self->stream_.Append(StreamEvent::Kind::kOutput, index + 1, std::string(buffer.get(), static_cast<size_t>(n)));
        if (self->ctx_.observer) self->ctx_.observer->OnOutputBytes(static_cast<size_t>(n));
      } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        n = 1;  // nothing after all: wait again
      }
    }
    if (n <= 0) {
      // EOF, or EIO from a PTY master whose terminal has no more holders.
      self->out_open_[index] = false;
      self->out_[index].reset();
      self->MaybeFinish();
      return;
    }
    self->Pump(index);
  });
}

void Command::ResumeOutput() {
  for (int i = 0; i < 2; ++i) {
    if (out_paused_[i] && out_open_[i]) Pump(i);
  }
}

Status Command::WriteStdin(std::string data) {
  // A PTY command's terminal reaches us from the child just before it execs: what a client types
  // meanwhile (right after the exec reply) waits in the queue, as it would for a pipe.
  const bool pty_coming = pty_ && !in_ && row_.state == "starting";
  if (finished_ || (!in_ && !pty_coming) || in_close_after_) return Status::Error("stdin is closed", EPIPE);
  if (in_queued_bytes_ + data.size() > kStdinHardLimit) {
    return Status::Error("stdin queue full: the command is not reading its input", EAGAIN);
  }
  if (ctx_.observer) ctx_.observer->OnInputBytes(data.size());
  in_queued_bytes_ += data.size();
  in_queue_.push_back(std::move(data));
  if (!in_writing_ && row_.state != "starting") WriteNextStdin();
  return Status();
}

Status Command::CloseStdin() {
  if (finished_ || (!in_ && !(pty_ && row_.state == "starting"))) return Status();
  if (pty_) {
    // A terminal has no close: the line discipline's EOF character does what users expect.
    return WriteStdin(std::string(1, '\x04'));
  }
  in_close_after_ = true;
  if (!in_writing_ && in_queue_.empty()) WriteNextStdin();
  return Status();
}

void Command::OnStdinDrained(std::function<void()> callback) {
  if (!stdin_full()) {
    callback();
    return;
  }
  in_drained_.push_back(std::move(callback));
}

void Command::StdinDrained() {
  auto callbacks = std::move(in_drained_);
  in_drained_.clear();
  for (auto& callback : callbacks) callback();
}

void Command::WriteNextStdin() {
  if (!in_) return StdinDrained();
  if (in_queued_bytes_ <= kStdinLowWater && !in_drained_.empty()) StdinDrained();
  if (in_queue_.empty()) {
    if (in_close_after_) {
      in_.reset();
      (void)SendCloseStdin(control_, seq());
    }
    return;
  }
  in_writing_ = true;
  auto self = shared_from_this();
  asio::async_write(*in_, asio::buffer(in_queue_.front()), [self](boost::system::error_code ec, size_t) {
    self->in_writing_ = false;
    if (!self->in_queue_.empty()) {
      self->in_queued_bytes_ -= self->in_queue_.front().size();
      self->in_queue_.pop_front();
    }
    if (ec) {
      // EPIPE: the command closed its stdin. Drop what is queued.
      self->in_queue_.clear();
      self->in_queued_bytes_ = 0;
      self->in_.reset();
      self->StdinDrained();
      return;
    }
    self->WriteNextStdin();
  });
}

Status Command::Signal(int signal) {
  if (ended_ || wait_status_ || aborted_) return Status::Error("the command has exited", ESRCH);
  if (signal == SIGKILL) killed_by_request_ = true;
  return SendSignal(control_, seq(), signal);
}

Status Command::Resize(uint16_t rows, uint16_t cols) {
  if (!pty_) return Status::Error("not a terminal", ENOTTY);
  if (!out_[0]) return Status::Error("the terminal is closed", EPIPE);
  struct winsize size = {rows, cols, 0, 0};
  if (ioctl(out_[0]->native_handle(), TIOCSWINSZ, &size) != 0) return ErrnoError("resize");
  return Status();
}

void Command::OnExited(int wait_status) {
  if (ended_ || aborted_) return;
  wait_status_ = wait_status;
  CollectStats();
}

void Command::CollectStats() {
  if (stats_pending_ || stats_ || aborted_) return;
  auto self = shared_from_this();
  // The usual case: the tree is gone with its main process. The figures are a few small reads,
  // done here so the outcome goes out at once; the empty cgroup is removed after it.
  auto quick = ctx_.host->CommandCgroupStats(row_.sandbox_id, seq());
  if (quick.ok() && quick->pids_current == 0) {
    SetFigures(*quick, MonotonicMicros());
    asio::post(*ctx_.pool, [self] {
      Status removed = self->ctx_.host->RemoveCommandCgroup(self->row_.sandbox_id, self->seq());
      if (!removed.ok()) {
        LogWarn("command", "cannot remove the command's cgroup",
                {{"command", self->row_.id}, {"error", removed.ToString()}});
      }
    });
    return;
  }
  stats_pending_ = true;
  // Killing the rest of the tree may wait for it to die: off the event loop.
  asio::post(*ctx_.pool, [self] {
    auto stats = self->ctx_.host->FinishCommandCgroup(self->row_.sandbox_id, self->seq());
    const uint64_t ended_us = MonotonicMicros();
    asio::post(*self->ctx_.io, [self, stats = std::move(stats), ended_us] {
      self->stats_pending_ = false;
      if (self->stats_) return;  // a stop read them first
      if (stats.ok()) return self->SetFigures(*stats, ended_us);
      // A stop under way took the cgroup: its own reading (OnStopped) gives the figures.
      if (self->aborted_) return;
      LogWarn("command", "cannot read the command's cgroup", {{"command", self->row_.id},
                                                              {"error", stats.status().ToString()}});
      self->SetFigures(cgroups::CgroupStats{}, ended_us);
    });
  });
}

void Command::SetFigures(const cgroups::CgroupStats& stats, uint64_t ended_us) {
  if (stats_) return;
  stats_ = stats;
  end_us_ = ended_us;
  MaybeEnd();
}

void Command::Abort(bool by_request) {
  // The control connection goes with the sandbox: nothing more may be sent on its fd number.
  control_ = -1;
  sync_watch_.reset();
  if (aborted_ || ended_) {
    aborted_ = true;
    return;  // ended already: its output drains to EOF (its writers are gone), then the exit event
  }
  aborted_ = true;
  if (by_request) killed_by_request_ = true;
  if (!wait_status_) wait_status_ = SIGKILL;  // a raw "killed by SIGKILL" wait status
}

void Command::OnStopped(StatusOr<cgroups::CgroupStats> figures, uint64_t ended_us) {
  if (ended_) return;
  if (!figures.ok()) {
    LogWarn("command", "cannot read the command's cgroup before the stop removed it",
            {{"command", row_.id}, {"error", figures.status().ToString()}});
  }
  SetFigures(figures.ok() ? *figures : cgroups::CgroupStats{}, ended_us);
}

void Command::MaybeEnd() {
  // Not before the sync socket's EOF: a child that failed its setup said so there, and its exit
  // (on init's control socket) can be read first; the outcome would be an exit with 127.
  if (ended_ || !wait_status_ || !stats_ || sync_watch_) return;
  OutcomeEvidence evidence;
  if (failed_step_ != 0) {
    evidence.setup_failed = true;
    evidence.setup_step = !failed_what_.empty() ? failed_what_ : initproto::ChildStepName(failed_step_);
    evidence.setup_errno = failed_errno_;
  }
  evidence.command_status = *wait_status_;
  evidence.init_status = *wait_status_;
  evidence.killed_by_request = killed_by_request_;
  evidence.killed_for_budget = killed_for_budget_;
  evidence.stats = *stats_;
  // Its own lifetime: from the exec to the kernel's end, not to the last byte a client took.
  evidence.wall_us = end_us_ > start_us_ ? end_us_ - start_us_ : 0;
  Outcome outcome = ClassifyOutcome(evidence);
  ended_ = true;
  row_.state = "exited";
  row_.outcome_json = OutcomeToJson(outcome).dump();
  row_.ended_at = time(nullptr);
  StoreState();
  if (ctx_.observer) ctx_.observer->OnCommandFinished(outcome);
  MaybeFinish();
}

void Command::MaybeFinish() {
  // Until the sync socket's EOF the pumps have not started: a command that exits at once may have
  // its exit reported (on init's control socket) before that EOF is read, with its output still
  // unread in the pipes.
  if (finished_ || !ended_ || sync_watch_ || out_open_[0] || out_open_[1]) return;
  Finish();
}

void Command::Finish() {
  finished_ = true;
  for (auto& out : out_) out.reset();
  in_.reset();
  in_queue_.clear();
  in_queued_bytes_ = 0;
  StdinDrained();
  sync_watch_.reset();
  // The exit is the last event: its seq is the exact end of the numbering.
  row_.seq_reserved = std::max<int64_t>(row_.seq_reserved, static_cast<int64_t>(stream_.last_seq() + 1));
  StoreState();
  stream_.Append(StreamEvent::Kind::kExit, 0, row_.outcome_json);
  // init keeps the command (and its fds, for a daemon that restarts) until it is told.
  if (!aborted_) (void)SendAck(control_, seq());
  if (on_finished_) {
    auto done = std::move(on_finished_);
    done(*this);
  }
}

// Seqs are handed out in blocks recorded in the store before any of the block's events goes
// out (one write per kSeqBlock events): after a crash, the next daemon starts above the block.
void Command::ReserveSeq() {
  constexpr int64_t kSeqBlock = 1024;
  const auto next = static_cast<int64_t>(stream_.last_seq() + 1);
  if (next <= row_.seq_reserved) return;
  row_.seq_reserved = next - 1 + kSeqBlock;
  StoreState();
}

void Command::Release() {
  if (finished_) return;
  row_.seq_reserved = static_cast<int64_t>(stream_.last_seq());
  StoreState();
}

void Command::StoreState() {
  Status stored = ctx_.store->UpdateCommand(row_);
  if (stored.ok()) {
    if (store_retry_) LogInfo("command", "stored the command after all", {{"command", row_.id}});
    store_retry_.reset();
    return;
  }
  const bool unreachable = stored.error_number() == ECONNREFUSED || stored.error_number() == ECONNRESET;
  if (!unreachable || ctx_.io == nullptr) {
    LogError("command", "cannot store the command", {{"command", row_.id}, {"error", stored.ToString()}});
    return;
  }
  if (!store_retry_) {
    LogWarn("command", "cannot store the command; trying again every second",
            {{"command", row_.id}, {"error", stored.ToString()}});
    store_retry_ = std::make_unique<boost::asio::steady_timer>(*ctx_.io);
  }
  // The command is kept until its row is written (or the daemon stops).
  store_retry_->expires_after(std::chrono::seconds(1));
  store_retry_->async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec) self->StoreState();
  });
}

}  // namespace corral::supervisor
