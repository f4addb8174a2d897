#include "tools/corral/run_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>

#include "cgroups/cgroup_backend.h"
#include "common/file_util.h"
#include "isolation/launcher.h"
#include "isolation/sandbox_launch.h"
#include "rootfs/disk_image.h"
#include "tools/corral/gc.h"
#include "tools/corral/lent_stdio.h"
#include "tools/corral/outcome.h"
#include "tools/corral/run_options.h"
#include "tools/corral/uid_slots.h"

namespace corral::cli {
namespace {

constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};
// How often the CPU-time watchdog reads the cgroup's accounting.
constexpr long kCpuPollNanos = 20 * 1000 * 1000;

std::string EnvOr(const char* name, std::string fallback) {
  const char* value = getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : fallback;
}

uint64_t MonotonicMicros() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000 + static_cast<uint64_t>(ts.tv_nsec) / 1000;
}

std::string RandomId() {
  std::random_device rd;
  std::uniform_int_distribution<uint64_t> dist;
  char buf[17];
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(dist(rd)));
  return std::string(buf, 12);
}

void PrintError(const std::string& message) { fprintf(stderr, "corral: %s\n", message.c_str()); }

Status WriteOutcome(const std::optional<std::string>& target, const Outcome& outcome) {
  if (!target) return Status();
  std::string text = OutcomeToJson(outcome).dump() + "\n";
  if (*target == "-") {
    fputs(text.c_str(), stderr);
    return Status();
  }
  return WriteNewFile(*target, text, 0644);
}

UniqueFd MakeTimer(uint64_t first_ns, uint64_t interval_ns) {
  UniqueFd fd(timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  if (!fd) return fd;
  struct itimerspec spec = {};
  spec.it_value.tv_sec = static_cast<time_t>(first_ns / 1000000000);
  spec.it_value.tv_nsec = static_cast<long>(first_ns % 1000000000);
  spec.it_interval.tv_sec = static_cast<time_t>(interval_ns / 1000000000);
  spec.it_interval.tv_nsec = static_cast<long>(interval_ns % 1000000000);
  if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0) spec.it_value.tv_nsec = 1;
  timerfd_settime(fd.get(), 0, &spec, nullptr);
  return fd;
}

// Everything a run prepares before clone; destroyed (in reverse) when the run ends.
struct PreparedRun {
  std::string id;
  std::string cgroup;
  RunRecord record;
  UidSlot slot;
  UniqueFd init_fd;
  isolation::PreparedLaunch launch;
};

// The run's layer: a workspace made with --disk keeps it in an ext4 image of that size (made
// here if missing: its path is returned); one made without keeps a plain directory ("").
// Neither turns into the other. Acquires the run's uid range.
StatusOr<std::string> PrepareWorkspace(const isolation::SandboxSpec& spec, const RunEnvironment& env,
                                       PreparedRun& run) {
  if (!spec.workspace()) {
    ASSIGN_OR_RETURN(run.slot, AcquireEphemeralSlot(env.run_dir));
    return std::string();
  }
  const std::string image = *spec.workspace() + "/disk.img";
  struct stat st;
  const bool has_image = lstat(image.c_str(), &st) == 0;
  const bool has_dir = lstat((*spec.workspace() + "/upper").c_str(), &st) == 0;
  const bool disk_mode = has_image || (spec.limits().disk_bytes && !has_dir);
  if (spec.limits().disk_bytes && !disk_mode) {
    return Status::Error("--disk: workspace " + *spec.workspace() +
                         " was created without --disk (its layer is a plain directory)");
  }
  ASSIGN_OR_RETURN(run.slot, AcquireWorkspaceSlot(env.state_dir, *spec.workspace(), !disk_mode));
  if (!disk_mode) return std::string();
  uint64_t bytes = 0;
  if (spec.limits().disk_bytes) {
    bytes = *spec.limits().disk_bytes;
  } else {
    ASSIGN_OR_RETURN(bytes, rootfs::DiskImageSize(image));
  }
  RETURN_IF_ERROR(rootfs::EnsureDiskImage(image, bytes, run.slot.base(), run.slot.base()).WithContext("--disk"));
  return image;
}

Status Prepare(const isolation::SandboxSpec& options_spec, const RunEnvironment& env,
               cgroups::CgroupBackend& backend, int status_fd, PreparedRun& run) {
  run.id = RandomId();
  run.cgroup = env.cgroup_parent + "/" + kRunCgroupPrefix + run.id;
  RETURN_IF_ERROR(isolation::MakeRunDirs(env.run_dir));
  ASSIGN_OR_RETURN(run.record, RunRecord::Create(env.run_dir, run.id, run.cgroup));
  ASSIGN_OR_RETURN(std::string image, PrepareWorkspace(options_spec, env, run));
  // The spec, completed with what the host allocated for the run.
  isolation::SandboxSpecBuilder complete = isolation::SandboxSpecBuilder::From(options_spec);
  complete.SetHostUidBase(run.slot.base());
  if (!image.empty()) complete.SetLayerImage(image);
  ASSIGN_OR_RETURN(isolation::SandboxSpec spec, complete.Build());
  ASSIGN_OR_RETURN(run.init_fd, isolation::LoadSealedExecutable(env.init_path));
  isolation::LaunchSite site;
  site.cgroup = run.cgroup;
  site.run_dir = env.run_dir;
  site.cpu_slot = run.slot.base() / isolation::kIdRangeSize;
  site.init_fd = run.init_fd.get();
  site.status_fd = status_fd;
  ASSIGN_OR_RETURN(run.launch, isolation::PrepareLaunch(spec, site, backend));
  return Status();
}

struct WatchResult {
  int init_status = 0;
  bool init_ready = false;  // corral-init's 'R' was read from the status pipe
  bool wall_killed = false;
  bool cpu_killed = false;
};

void KillSandbox(const isolation::LaunchedSandbox& sandbox, cgroups::CgroupBackend& backend,
                 const std::string& cgroup) {
  // SIGKILL to PID 1 takes down its whole pid namespace; the cgroup kill is the belt to those
  // braces (and covers processes the namespace teardown has not reached yet).
  syscall(SYS_pidfd_send_signal, sandbox.pidfd.get(), SIGKILL, nullptr, 0);
  (void)backend.Kill(cgroup);
}

WatchResult Watch(const isolation::LaunchedSandbox& sandbox, const isolation::SandboxSpec& spec,
                  cgroups::CgroupBackend& backend, const std::string& cgroup, int signal_fd,
                  int status_fd, uint64_t start_us) {
  WatchResult result;
  UniqueFd wall_timer, cpu_timer;
  if (spec.limits().wall_time_us) {
    uint64_t elapsed = MonotonicMicros() - start_us;
    uint64_t left = *spec.limits().wall_time_us > elapsed ? *spec.limits().wall_time_us - elapsed : 0;
    wall_timer = MakeTimer(left * 1000, 0);
  }
  if (spec.limits().cpu_time_us) cpu_timer = MakeTimer(kCpuPollNanos, kCpuPollNanos);

  bool killed = false;
  bool status_open = true;
  for (;;) {
    // Signals wait in the signalfd until corral-init says its handlers are in place.
    struct pollfd fds[5] = {{sandbox.pidfd.get(), POLLIN, 0},
                            {result.init_ready ? signal_fd : -1, POLLIN, 0},
                            {wall_timer ? wall_timer.get() : -1, POLLIN, 0},
                            {cpu_timer ? cpu_timer.get() : -1, POLLIN, 0},
                            {!result.init_ready && status_open ? status_fd : -1, POLLIN, 0}};
    int n = poll(fds, 5, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      KillSandbox(sandbox, backend, cgroup);
      killed = true;
    }
    if (fds[0].revents & POLLIN) break;
    if (fds[4].revents & (POLLIN | POLLHUP)) {
      char ready = 0;
      ssize_t got = read(status_fd, &ready, 1);
      if (got == 1 && ready == 'R') result.init_ready = true;
      else status_open = false;  // init died before it was ready
    }
    if (fds[1].revents & POLLIN) {
      struct signalfd_siginfo info;
      while (read(signal_fd, &info, sizeof(info)) == sizeof(info)) {
        syscall(SYS_pidfd_send_signal, sandbox.pidfd.get(), static_cast<int>(info.ssi_signo), nullptr, 0);
      }
    }
    if (!killed && (fds[2].revents & POLLIN)) {
      result.wall_killed = true;
      KillSandbox(sandbox, backend, cgroup);
      killed = true;
    }
    if (fds[3].revents & POLLIN) {
      uint64_t ticks;
      (void)!read(cpu_timer.get(), &ticks, sizeof(ticks));
      auto usage = backend.CpuUsageUsec(cgroup);
      if (!killed && usage.ok() && *usage >= *spec.limits().cpu_time_us) {
        result.cpu_killed = true;
        KillSandbox(sandbox, backend, cgroup);
        killed = true;
      }
    }
  }
  siginfo_t info = {};
  while (waitid(P_PIDFD, static_cast<id_t>(sandbox.pidfd.get()), &info, WEXITED) != 0 && errno == EINTR) {
  }
  if (info.si_code == CLD_EXITED) {
    result.init_status = W_EXITCODE(info.si_status, 0);
  } else {
    result.init_status = info.si_status & 0x7f;  // a raw "killed by signal" wait status
  }
  return result;
}

// The 4-byte wait status corral-init wrote last (after its 'R', unless Watch consumed that).
std::optional<int> ReadCommandStatus(int fd, bool ready_consumed) {
  if (!ready_consumed) {
    char ready = 0;
    if (read(fd, &ready, 1) != 1 || ready != 'R') return std::nullopt;
  }
  int status = 0;
  ssize_t n = read(fd, &status, sizeof(status));
  if (n != sizeof(status)) return std::nullopt;
  return status;
}

}  // namespace

RunEnvironment DefaultRunEnvironment() {
  RunEnvironment env;
  env.run_dir = EnvOr("CORRAL_RUN_DIR", "/run/corral");
  env.state_dir = EnvOr("CORRAL_STATE_DIR", "/var/lib/corral");
  env.cgroup_mount = EnvOr("CORRAL_CGROUP_MOUNT", "/sys/fs/cgroup");
  env.cgroup_parent = EnvOr("CORRAL_CGROUP_PARENT", "corral");
  std::string beside;
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string exe(self, static_cast<size_t>(n));
    beside = exe.substr(0, exe.rfind('/')) + "/corral-init";
  }
  std::string fallback = CORRAL_LIBEXEC_DIR "/corral-init";
  if (!beside.empty() && access(beside.c_str(), X_OK) == 0) fallback = beside;
  env.init_path = EnvOr("CORRAL_INIT", fallback);
  return env;
}

int RunGc(const RunEnvironment& env) {
  auto backend = cgroups::DetectBackend(env.cgroup_mount);
  if (!backend.ok()) {
    PrintError("gc: " + backend.status().ToString());
    return 1;
  }
  auto report = CollectGarbage(env.run_dir, **backend, env.cgroup_parent);
  if (!report.ok()) {
    PrintError("gc: " + report.status().ToString());
    return 1;
  }
  printf("removed %d run records and %d cgroups\n", report->records_removed, report->cgroups_removed);
  return 0;
}

namespace {

// CORRAL_TRACE_PHASES=1 prints how long each phase of a run took, for benchmarking.
class PhaseTimer {
 public:
  PhaseTimer() : enabled_(getenv("CORRAL_TRACE_PHASES") != nullptr), last_(MonotonicMicros()) {}
  void Mark(const char* phase) {
    if (!enabled_) return;
    uint64_t now = MonotonicMicros();
    fprintf(stderr, "corral: phase %-10s %7.3f ms\n", phase, static_cast<double>(now - last_) / 1000);
    last_ = now;
  }

 private:
  bool enabled_;
  uint64_t last_;
};

}  // namespace

int RunSandbox(const RunOptions& options, const RunEnvironment& env) {
  const isolation::SandboxSpec& spec = options.spec;
  const uint64_t start_us = MonotonicMicros();
  PhaseTimer timer;
  auto setup_failed = [&](const Status& status) {
    OutcomeEvidence evidence;
    evidence.setup_failed = true;
    evidence.setup_step = status.message();
    evidence.setup_errno = status.error_number();
    evidence.wall_us = MonotonicMicros() - start_us;
    Outcome outcome = ClassifyOutcome(evidence);
    PrintError("sandbox setup failed: " + status.ToString());
    Status written = WriteOutcome(options.outcome_json, outcome);
    if (!written.ok()) PrintError("--outcome-json: " + written.ToString());
    return ExitCodeFor(outcome);
  };
  // Signals for the sandbox arrive through a signalfd and are forwarded to its PID 1 once it
  // can take them; blocked from the start, so one sent during setup is delivered, not lost.
  sigset_t forwarded, old_mask;
  sigemptyset(&forwarded);
  for (int sig : kForwardedSignals) sigaddset(&forwarded, sig);
  sigprocmask(SIG_BLOCK, &forwarded, &old_mask);
  UniqueFd signal_fd(signalfd(-1, &forwarded, SFD_CLOEXEC | SFD_NONBLOCK));
  if (geteuid() != 0) {
    return setup_failed(Status::Error("corral run must run as root (it creates namespaces and cgroups)", EPERM));
  }
  auto detected = cgroups::DetectBackend(env.cgroup_mount);
  if (!detected.ok()) return setup_failed(detected.status().WithContext("cgroups"));
  cgroups::CgroupBackend& backend = **detected;
  (void)CollectGarbage(env.run_dir, backend, env.cgroup_parent, /*scan_cgroups=*/false);
  timer.Mark("gc");

  PreparedRun run;
  // Whatever happens below, the cgroup goes when this function returns. Its parent stays, empty,
  // for the next run (making and removing it in every hierarchy each time cost more than the
  // run's own cgroup); `corral gc` removes it.
  struct CgroupCleanup {
    cgroups::CgroupBackend& backend;
    const PreparedRun& run;
    ~CgroupCleanup() {
      if (!run.cgroup.empty()) {
        Status destroyed = backend.Destroy(run.cgroup);
        if (!destroyed.ok()) PrintError("cleanup: " + destroyed.ToString());
      }
    }
  } cleanup{backend, run};

  int status_pipe[2];
  if (pipe2(status_pipe, O_CLOEXEC) != 0) return setup_failed(ErrnoError("pipe"));
  UniqueFd status_read(status_pipe[0]), status_write(status_pipe[1]);
  Status prepared = Prepare(spec, env, backend, status_write.get(), run);
  if (!prepared.ok()) return setup_failed(prepared);
  timer.Mark("prepare");

  // The command may reopen its stdio pipes by path, for the run (lent_stdio.h).
  const isolation::LaunchPlan& plan = run.launch.plan;
  LentStdio lent = LentStdio::Lend(plan.host_uid_base + plan.uid, plan.host_gid_base + plan.gid);
  auto launched = isolation::LaunchPrepared(run.launch);
  status_write.reset();
  if (!launched.ok()) return setup_failed(launched.status());
  timer.Mark("launch");

  WatchResult watched =
      Watch(*launched, spec, backend, run.cgroup, signal_fd.get(), status_read.get(), start_us);
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  timer.Mark("run");

  OutcomeEvidence evidence;
  evidence.command_status = ReadCommandStatus(status_read.get(), watched.init_ready);
  evidence.init_status = watched.init_status;
  evidence.killed_at_wall_limit = watched.wall_killed;
  evidence.killed_at_cpu_limit = watched.cpu_killed;
  evidence.wall_us = MonotonicMicros() - start_us;
  auto stats = backend.Stats(run.cgroup);
  if (stats.ok()) evidence.stats = *stats;
  else PrintError("cgroup stats: " + stats.status().ToString());
  Outcome outcome = ClassifyOutcome(evidence);
  // A limit that ended the command is worth a line even without --outcome-json.
  if (!options.outcome_json && outcome.kind != OutcomeKind::kExited &&
      outcome.kind != OutcomeKind::kSignaled) {
    PrintError(std::string("sandbox stopped: ") + OutcomeName(outcome.kind));
  }
  Status written = WriteOutcome(options.outcome_json, outcome);
  if (!written.ok()) PrintError("--outcome-json: " + written.ToString());
  timer.Mark("outcome");
  return ExitCodeFor(outcome);
}

int RunMain(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    fputs(RunUsage(), stdout);
    return 0;
  }
  auto options = ParseRunOptions(args);
  if (!options.ok()) {
    fprintf(stderr, "corral run: %s\n", options.status().ToString().c_str());
    return 125;
  }
  return RunSandbox(*options, DefaultRunEnvironment());
}

}  // namespace corral::cli
