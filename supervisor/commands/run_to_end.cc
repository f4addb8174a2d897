#include "supervisor/commands/run_to_end.h"

#include <signal.h>

#include <cerrno>
#include <memory>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

namespace corral::supervisor {
namespace {

using Done = std::function<void(StatusOr<RunToEndResult>)>;

// Subscribed to the command's stream from its start to its exit event (or the cap, or the
// timeout); keeps itself alive meanwhile.
class Runner : public StreamSubscriber, public std::enable_shared_from_this<Runner> {
 public:
  Runner(boost::asio::io_context& io, RunToEndOptions options, Done done)
      : io_(io), options_(options), done_(std::move(done)), timer_(io) {}

  void Start(std::shared_ptr<Command> command) {
    command_ = std::move(command);
    self_ = shared_from_this();
    std::weak_ptr<Runner> weak = self_;
    timer_.expires_after(options_.timeout);
    timer_.async_wait([weak](boost::system::error_code ec) {
      if (ec) return;
      if (auto self = weak.lock()) self->TimedOut();
    });
    // From seq 0: whatever the command printed before this (nothing, on the loop) is replayed.
    (void)command_->stream().Subscribe(this, 0);
  }

  void OnStreamEvent(const StreamEvent& event) override {
    if (finished_) return;
    if (event.kind == StreamEvent::Kind::kExit) {
      result_.outcome = nlohmann::json::parse(event.data, nullptr, false);
      if (result_.outcome.is_object() && result_.outcome.value("outcome", "") == "exited" &&
          result_.outcome.contains("exit_code") && result_.outcome["exit_code"].is_number_integer()) {
        result_.exit_code = result_.outcome["exit_code"].get<int>();
      }
      return Finish(std::move(result_));
    }
    if (event.fd == 2) {
      if (result_.err.size() < kMaxStderrBytes) result_.err.append(event.data, 0, kMaxStderrBytes - result_.err.size());
      return;
    }
    const size_t room = options_.max_stdout_bytes - result_.out.size();
    if (event.data.size() <= room) {
      result_.out += event.data;
      return;
    }
    if (options_.truncate_stdout) {
      result_.out.append(event.data, 0, room);
      result_.truncated = true;
      return;
    }
    (void)command_->Signal(SIGKILL);
    Finish(Status::Error("the output of " + What() + " is larger than " + std::to_string(options_.max_stdout_bytes) +
                             " bytes (the cap)",
                         EFBIG));
  }

  bool StreamFull() const override { return false; }

 private:
  std::string What() const { return command_ ? "command " + command_->id() : "the command"; }

  void TimedOut() {
    if (finished_) return;
    (void)command_->Signal(SIGKILL);
    Finish(Status::Error(What() + " did not end within " +
                             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(options_.timeout).count()) +
                             " s; it was killed",
                         ETIMEDOUT));
  }

  void Finish(StatusOr<RunToEndResult> result) {
    finished_ = true;
    timer_.cancel();
    command_->stream().Unsubscribe(this);
    // Later, from the loop: never from inside the stream's delivery (or the caller's call).
    boost::asio::post(io_, [self = std::move(self_), result = std::move(result)]() mutable {
      Done done = std::move(self->done_);
      done(std::move(result));
    });
  }

  boost::asio::io_context& io_;
  RunToEndOptions options_;
  Done done_;
  boost::asio::steady_timer timer_;
  std::shared_ptr<Command> command_;
  std::shared_ptr<Runner> self_;
  RunToEndResult result_;
  bool finished_ = false;
};

}  // namespace

void RunToEnd(boost::asio::io_context& io, SandboxManager& manager, const Caller& caller, const UserCaps& caps,
              const ExecSpec& spec, const RunToEndOptions& options, Done done) {
  auto command = manager.Exec(caller, caps, spec);
  if (!command.ok()) {
    boost::asio::post(io, [done = std::move(done), status = command.status()] { done(status); });
    return;
  }
  auto runner = std::make_shared<Runner>(io, options, std::move(done));
  runner->Start(std::move(*command));
}

}  // namespace corral::supervisor
