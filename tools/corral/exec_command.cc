#include "tools/corral/exec_command.h"

#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cstdio>
#include <map>

#include "common/file_util.h"
#include "tools/corral/client.h"
#include "tools/corral/outcome.h"

namespace corral::cli {
namespace {

constexpr int kExitCannotRun = 125;

// The local terminal in raw mode for the scope: keystrokes (^C, ^Z, ^D included) go to the
// remote PTY as bytes, and the remote side echoes. Restored on every way out of RunExecCommand;
// the signals that would end us meanwhile (INT, TERM, HUP, QUIT) are caught and forwarded.
class RawTerminal {
 public:
  explicit RawTerminal(int fd) : fd_(fd) {
    if (tcgetattr(fd_, &saved_) != 0) return;
    struct termios raw = saved_;
    cfmakeraw(&raw);
    active_ = tcsetattr(fd_, TCSANOW, &raw) == 0;
  }
  ~RawTerminal() {
    if (active_) tcsetattr(fd_, TCSADRAIN, &saved_);
  }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;

 private:
  int fd_;
  struct termios saved_ = {};
  bool active_ = false;
};

// The local terminal's size and the fd it was read from (-1: no terminal; 24x80).
std::pair<TerminalSize, int> LocalTerminalSize() {
  for (int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) {
    struct winsize size = {};
    if (isatty(fd) && ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_row > 0 && size.ws_col > 0) {
      return {TerminalSize{size.ws_row, size.ws_col}, fd};
    }
  }
  return {TerminalSize{}, -1};
}

int SignalNumber(const nlohmann::json& signal) {
  if (signal.is_number_integer()) return signal.get<int>();
  if (!signal.is_string()) return 0;
  static const std::map<std::string, int> kNames = {
      {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"ILL", SIGILL},   {"TRAP", SIGTRAP},
      {"ABRT", SIGABRT}, {"BUS", SIGBUS},   {"FPE", SIGFPE},   {"KILL", SIGKILL}, {"USR1", SIGUSR1},
      {"SEGV", SIGSEGV}, {"USR2", SIGUSR2}, {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM},
      {"XCPU", SIGXCPU}, {"XFSZ", SIGXFSZ}, {"SYS", SIGSYS}};
  std::string name = signal.get<std::string>();
  if (name.rfind("SIG", 0) == 0) name.erase(0, 3);
  auto it = kNames.find(name);
  if (it != kNames.end()) return it->second;
  int number = 0;
  for (char c : name) {
    if (c < '0' || c > '9' || number > 1000) return 0;
    number = number * 10 + (c - '0');
  }
  return number;
}

std::string StringField(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

Status WriteOutcome(const std::string& target, const nlohmann::json& outcome) {
  std::string text = outcome.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (target == "-") {
    fputs(text.c_str(), stderr);
    return Status();
  }
  return WriteNewFile(target, text, 0644);
}

// A line on stderr for outcomes the exit code alone does not explain (as `corral run` does).
void ExplainOutcome(const nlohmann::json& outcome, bool quiet_about_limits) {
  const std::string kind = StringField(outcome, "outcome");
  if (kind == "setup_failed") {
    std::string step = StringField(outcome, "setup_step");
    std::string error = StringField(outcome, "errno");
    fprintf(stderr, "corral: the command could not be started: %s%s%s\n", step.empty() ? "setup" : step.c_str(),
            error.empty() ? "" : ": ", error.c_str());
  } else if (kind == "lost") {
    fprintf(stderr, "corral: corrald lost track of the command (it restarted); its end is unknown\n");
  } else if (!quiet_about_limits && !kind.empty() && kind != "exited" && kind != "signaled") {
    fprintf(stderr, "corral: command stopped: %s\n", kind.c_str());
  }
}

}  // namespace

nlohmann::json BuildExecRequest(const ExecOptions& options, const TerminalSize& size,
                                const std::optional<std::string>& term) {
  nlohmann::json request = {{"sandbox", options.sandbox}, {"argv", options.argv}};
  nlohmann::json env = nlohmann::json::object();
  if (options.tty && term) env["TERM"] = *term;
  for (const auto& [key, value] : options.env) env[key] = value;
  if (!env.empty()) request["env"] = env;
  if (options.cwd) request["cwd"] = *options.cwd;
  if (options.user) request["user"] = *options.user;
  request["stdin"] = options.forward_stdin;
  if (options.tty) request["pty"] = {{"rows", size.rows}, {"cols", size.cols}};
  return request;
}

int ExitCodeForRemoteOutcome(const nlohmann::json& outcome) {
  if (!outcome.is_object()) return kExitCannotRun;
  // Read into the taxonomy `corral run` uses, so that both exit the same way.
  Outcome parsed;
  auto exit_code = outcome.find("exit_code");
  if (exit_code != outcome.end() && exit_code->is_number_integer()) {
    const int code = exit_code->get<int>();
    if (code < 0 || code > 255) return kExitCannotRun;
    parsed.exit_code = code;
  }
  auto signal = outcome.find("signal");
  if (signal != outcome.end()) {
    const int number = SignalNumber(*signal);
    if (number > 0 && number < 128) parsed.signal = number;
  }
  const std::string kind = StringField(outcome, "outcome");
  bool known = false;
  static constexpr OutcomeKind kKinds[] = {
      OutcomeKind::kExited,      OutcomeKind::kSignaled,    OutcomeKind::kOomKilled,
      OutcomeKind::kWallTimeout, OutcomeKind::kCpuTimeLimit, OutcomeKind::kPidsLimit,
      OutcomeKind::kSetupFailed, OutcomeKind::kKilledByRequest, OutcomeKind::kLost};
  for (OutcomeKind candidate : kKinds) {
    if (kind == OutcomeName(candidate)) {
      parsed.kind = candidate;
      known = true;
    }
  }
  // An outcome this CLI does not know yet (the protocol only adds): its code or signal, if any.
  if (!known && !parsed.exit_code && !parsed.signal) return kExitCannotRun;
  return ExitCodeFor(parsed);
}

int RunExecCommand(const ExecOptions& options) {
  auto [size, tty_fd] = LocalTerminalSize();
  std::optional<std::string> term;
  if (const char* value = getenv("TERM"); value != nullptr && *value != '\0') term = value;
  nlohmann::json request = BuildExecRequest(options, size, term);

  ExecIo io;
  io.stdin_fd = options.forward_stdin ? STDIN_FILENO : -1;
  io.forwarded_signals = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
  io.resize_tty_fd = options.tty ? tty_fd : -1;
  std::optional<RawTerminal> raw;
  const bool want_raw = options.tty && options.forward_stdin && isatty(STDIN_FILENO);
  io.on_started = [&] {
    if (want_raw) raw.emplace(STDIN_FILENO);
  };
  auto result = RunExec(options.server, request, io);
  raw.reset();  // Before any message, so that it is not printed in raw mode.
  if (!result.ok()) {
    fprintf(stderr, "corral: %s\n", result.status().ToString().c_str());
    return kExitCannotRun;
  }
  const nlohmann::json& outcome = result->outcome;
  ExplainOutcome(outcome, options.outcome_json.has_value());
  if (options.outcome_json) {
    Status written = WriteOutcome(*options.outcome_json, outcome);
    if (!written.ok()) fprintf(stderr, "corral: --outcome-json: %s\n", written.ToString().c_str());
  }
  if (!result->input_error.empty()) {
    // Whatever the command made of a truncated input, it is not what was asked for.
    fprintf(stderr, "corral: %s; the command's stdin was cut short\n", result->input_error.c_str());
    return kExitCannotRun;
  }
  return ExitCodeForRemoteOutcome(outcome);
}

}  // namespace corral::cli
