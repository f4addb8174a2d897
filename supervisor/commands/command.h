// Command: one process tree started in a running sandbox, from its start-up handshake with
// corral-init to its outcome, on the daemon's event loop.
//
//   starting   exec sent to init; waiting for the child's hello, moving it into its cgroup
//   running    the program runs; its stdout/stderr (or PTY) are pumped into the EventStream,
//              paused while a subscriber is full
//   exited     the kernel says the tree ended: init reported the exit and what was left of the
//              tree was killed (or the sandbox was stopped), and the cgroup's figures were read.
//              The record and outcome are final in the store at once, whatever the attached
//              clients do; wall_s is the command's own lifetime, up to that end.
//   (stream)   the exit event goes out after the last of the output: once every output fd
//              reached EOF (a slow client may still be taking it when the record is final).
//
// A command is its whole process tree: when its main process exits, whatever it left running
// in its cgroup is killed, so its pipes reach EOF and its figures are final. Every path that
// ends a command reads its cgroup's figures before the cgroup goes.
#pragma once

#include <sys/types.h>

#include <array>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include "supervisor/commands/event_stream.h"
#include "supervisor/commands/init_client.h"
#include "supervisor/commands/outcome.h"
#include "supervisor/sandboxes/sandbox_host.h"
#include "supervisor/store/store.h"

namespace corral::supervisor {

// Input a command has not read yet, in bytes: above high water its writers pause until it is down
// to low water; the hard limit only binds several writers that ignore that.
inline constexpr size_t kStdinHighWater = 4 << 20;
inline constexpr size_t kStdinLowWater = 1 << 20;
inline constexpr size_t kStdinHardLimit = 16 << 20;
// Output is read (and sent, one message per read) in chunks of up to this many bytes, from pipes
// enlarged to kOutputPipeBytes.
inline constexpr size_t kOutputChunkBytes = 256 << 10;
inline constexpr int kOutputPipeBytes = 1 << 20;

// CLOCK_MONOTONIC in microseconds: the clock of a command's wall time.
uint64_t MonotonicMicros();

// Counters the API turns into metrics; called on the event loop.
class CommandObserver {
 public:
  virtual ~CommandObserver() = default;
  virtual void OnCommandFinished(const Outcome& outcome) = 0;
  virtual void OnOutputBytes(size_t bytes) = 0;
  virtual void OnInputBytes(size_t bytes) = 0;
};

class Command : public std::enable_shared_from_this<Command> {
 public:
  struct Context {
    boost::asio::io_context* io = nullptr;
    boost::asio::thread_pool* pool = nullptr;
    SandboxHost* host = nullptr;
    Store* store = nullptr;
    CommandObserver* observer = nullptr;
    size_t replay_buffer_bytes = 1 << 20;
  };

  // `control` is the sandbox's connection to corral-init (borrowed; the sandbox outlives its
  // commands' use of it). `on_finished` runs once, after the outcome is stored.
  Command(Context context, CommandRow row, int control, CommandFds fds,
          std::function<void(Command&)> on_finished);
  // An adopted command: a previous daemon started it; corral-init gave its fds back.
  Command(Context context, CommandRow row, int control, const initproto::CommandStateBody& state,
          std::vector<UniqueFd> kept, std::function<void(Command&)> on_finished);
  ~Command();

  // How making the command's cgroup went (before Start): a command without one never runs.
  void SetCgroup(Status made) { cgroup_ = std::move(made); }
  void Start();

  const CommandRow& row() const { return row_; }
  const std::string& id() const { return row_.id; }
  uint64_t seq() const { return static_cast<uint64_t>(row_.init_seq); }
  // Its end is known and stored (state exited, outcome, ended_at); the exit event may still
  // wait for output a slow client has not taken yet.
  bool ended() const { return ended_; }
  EventStream& stream() { return stream_; }

  // Client input. Write fails (EPIPE) once stdin is closed; EAGAIN past kStdinHardLimit bytes
  // queued (writers that honour stdin_full() never get there).
  Status WriteStdin(std::string data);
  // Input backpressure: true while more than kStdinHighWater bytes wait for the command to read
  // them. A writer stops sending until its OnStdinDrained callback runs (once the queue is down
  // to kStdinLowWater, or stdin is gone). Callbacks run once each, on the event loop.
  bool stdin_full() const { return in_queued_bytes_ > kStdinHighWater; }
  void OnStdinDrained(std::function<void()> callback);
  Status CloseStdin();
  Status Signal(int signal);
  Status Resize(uint16_t rows, uint16_t cols);
  // A subscriber drained: read the pipes again.
  void ResumeOutput();

  // From the sandbox: init reaped the main process.
  void OnExited(int wait_status);
  // From the sandbox: it is being stopped (or died); init cannot report anything more and the
  // control connection goes. A command that has not ended waits for OnStopped.
  void Abort(bool by_request);
  // The stop killed the sandbox's tree and read this command's cgroup before removing it: its
  // figures (an error when none could be read) and when the kill was done (MonotonicMicros).
  void OnStopped(StatusOr<cgroups::CgroupStats> figures, uint64_t ended_us);
  // Marks the command as killed because a client asked (stop, destroy, KILL).
  void MarkKilledByRequest() { killed_by_request_ = true; }
  // The sandbox is being stopped because its user's compute budget is spent.
  void MarkBudgetExhausted() { killed_for_budget_ = true; }
  // The daemon is stopping cleanly and leaves the command to the next one: store exactly the
  // last seq handed out, so the next daemon's numbering goes on without a gap.
  void Release();

 private:
  void ReadSync();
  void OnSyncMessage(InitMessage message);
  void StartPumps();
  void Pump(int index);
  void WriteNextStdin();
  void CollectStats();
  // The kernel's end: the figures are final (read at `ended_us`).
  void SetFigures(const cgroups::CgroupStats& stats, uint64_t ended_us);
  // Stores the record once the wait status and the figures are known.
  void MaybeEnd();
  // Appends the exit event once the record is final and the output reached EOF.
  void MaybeFinish();
  void Finish();
  // Writes row_. When the store is unreachable (PostgreSQL down) it tries again every second,
  // then writes the row as it is by then (the latest: a full row, so nothing is replayed out of
  // order), so that a command that ended during an outage is not left `running`.
  void StoreState();
  void ReserveSeq();
  void StdinDrained();

  Context ctx_;
  CommandRow row_;
  int control_;
  std::function<void(Command&)> on_finished_;
  EventStream stream_;
  bool pty_ = false;
  uint64_t start_us_ = 0;

  UniqueFd sync_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> sync_watch_;
  // Output: [0] stdout or the PTY master, [1] stderr.
  std::array<std::unique_ptr<boost::asio::posix::stream_descriptor>, 2> out_;
  std::array<bool, 2> out_open_ = {false, false};
  std::array<bool, 2> out_paused_ = {false, false};
  std::array<bool, 2> out_reading_ = {false, false};
  std::unique_ptr<boost::asio::posix::stream_descriptor> in_;  // stdin pipe or the PTY master (dup)
  std::deque<std::string> in_queue_;
  size_t in_queued_bytes_ = 0;
  bool in_writing_ = false;
  bool in_close_after_ = false;
  std::vector<std::function<void()>> in_drained_;

  uint64_t end_us_ = 0;  // the kernel's end (MonotonicMicros)
  pid_t host_pid_ = 0;
  int failed_step_ = 0;
  std::string failed_what_;  // overrides the step's name
  Status cgroup_;
  int failed_errno_ = 0;
  std::optional<int> wait_status_;
  bool stats_pending_ = false;
  std::optional<cgroups::CgroupStats> stats_;
  bool killed_by_request_ = false;
  bool killed_for_budget_ = false;
  bool aborted_ = false;   // the sandbox is stopping: nothing more goes to init (control_ is -1)
  bool ended_ = false;     // the record is final
  bool finished_ = false;  // the exit event went out
  std::unique_ptr<boost::asio::steady_timer> store_retry_;  // armed while a write waits for the store
};

}  // namespace corral::supervisor
