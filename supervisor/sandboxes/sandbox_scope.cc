#include "supervisor/sandboxes/sandbox_scope.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <systemd/sd-bus.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <utility>

#include "common/log.h"

namespace corral::supervisor {
namespace {

constexpr char kManagerSocket[] = "unix:path=/run/systemd/private";
constexpr char kDestination[] = "org.freedesktop.systemd1";
constexpr char kManagerPath[] = "/org/freedesktop/systemd1";
constexpr char kManager[] = "org.freedesktop.systemd1.Manager";
constexpr uint64_t kCallTimeoutUsec = 10 * 1000 * 1000;
// How long systemd may take to move the anchor into a new scope (the start job runs after the
// call has returned).
constexpr auto kJoinTimeout = std::chrono::seconds(10);

struct BusCloser {
  void operator()(sd_bus* bus) const { sd_bus_flush_close_unref(bus); }
};
using UniqueBus = std::unique_ptr<sd_bus, BusCloser>;

struct MessageUnref {
  void operator()(sd_bus_message* message) const { sd_bus_message_unref(message); }
};
using UniqueMessage = std::unique_ptr<sd_bus_message, MessageUnref>;

// An sd_bus_error that frees itself.
struct BusError {
  sd_bus_error error = SD_BUS_ERROR_NULL;
  ~BusError() { sd_bus_error_free(&error); }
  bool Is(const char* name) const { return sd_bus_error_has_name(&error, name) != 0; }
  Status ToStatus(std::string_view what, int r) const {
    std::string text(what);
    if (sd_bus_error_is_set(&error)) return Status::Error(text + ": " + error.name + ": " + (error.message ? error.message : ""), -r);
    return ErrnoError(text, -r);
  }
};

// systemd's private socket, as systemctl talks to it as root: no D-Bus daemon needed.
StatusOr<UniqueBus> ConnectToSystemd() {
  sd_bus* raw = nullptr;
  int r = sd_bus_new(&raw);
  if (r < 0) return ErrnoError("sd_bus_new", -r);
  UniqueBus bus(raw);
  r = sd_bus_set_address(raw, kManagerSocket);
  if (r < 0) return ErrnoError("sd_bus_set_address", -r);
  r = sd_bus_start(raw);
  if (r < 0) return ErrnoError("connect to systemd at /run/systemd/private", -r);
  return bus;
}

StatusOr<std::string> StringProperty(sd_bus* bus, const std::string& path, const char* interface, const char* property) {
  BusError error;
  char* value = nullptr;
  int r = sd_bus_get_property_string(bus, kDestination, path.c_str(), interface, property, &error.error, &value);
  if (r < 0) return error.ToStatus(std::string("systemd: ") + property + " of " + path, r);
  std::string result(value);
  free(value);
  return result;
}

// A child of corrald that only waits: it keeps the scope alive (a scope goes when it is empty)
// while corrald runs, and dies with it (PR_SET_PDEATHSIG: with the thread that forked it; the
// first is forked by corrald's main thread before the others start). The child makes raw system
// calls only: corrald may have threads by then.
StatusOr<pid_t> SpawnAnchor() {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return ErrnoError("fork the scope's anchor");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);
    // Nothing of corrald's: no listener, no store, no lock.
    syscall(SYS_close_range, 0U, ~0U, 0U);
    prctl(PR_SET_NAME, "corral-anchor");
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (;;) pause();
  }
  return pid;
}

bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

}  // namespace

StatusOr<std::string> SandboxScopeName(std::string_view service_id) {
  constexpr std::string_view kService = ".service";
  if (service_id.size() <= kService.size() || !EndsWith(service_id, kService) ||
      service_id.find('/') != std::string_view::npos) {
    return Status::Error("not a service unit: \"" + std::string(service_id) + "\"", EINVAL);
  }
  return std::string(service_id.substr(0, service_id.size() - kService.size())) + "-sandboxes.scope";
}

StatusOr<std::string> ScopeCgroupOfAnchor(std::string_view anchor_cgroup, std::string_view scope_name) {
  const std::string suffix = "/" + std::string(scope_name) + "/" + kAnchorLeaf;
  if (!EndsWith(anchor_cgroup, suffix) && anchor_cgroup != suffix.substr(1)) {
    return Status::Error("the anchor is in \"" + std::string(anchor_cgroup) + "\", not in <slice>" + suffix, ESRCH);
  }
  return std::string(anchor_cgroup.substr(0, anchor_cgroup.size() - 1 - std::string_view(kAnchorLeaf).size()));
}

SandboxScope::SandboxScope(cgroups::CgroupBackend& backend, std::string service, std::string slice, std::string name,
                           uint64_t stop_timeout_s)
    : backend_(backend),
      service_(std::move(service)),
      slice_(std::move(slice)),
      name_(std::move(name)),
      stop_timeout_s_(stop_timeout_s) {}

SandboxScope::~SandboxScope() {
  std::lock_guard lock(mu_);
  KillAnchor();
}

void SandboxScope::KillAnchor() {
  if (anchor_ <= 0) return;
  (void)kill(anchor_, SIGKILL);
  while (waitpid(anchor_, nullptr, 0) < 0 && errno == EINTR) {
  }
  anchor_ = -1;
}

StatusOr<std::unique_ptr<SandboxScope>> SandboxScope::ForThisService(cgroups::CgroupBackend& backend,
                                                                     uint64_t stop_timeout_s) {
  ASSIGN_OR_RETURN(UniqueBus bus, ConnectToSystemd());
  BusError error;
  sd_bus_message* raw_reply = nullptr;
  int r = sd_bus_call_method(bus.get(), kDestination, kManagerPath, kManager, "GetUnitByPID", &error.error,
                             &raw_reply, "u", static_cast<uint32_t>(getpid()));
  UniqueMessage reply(raw_reply);
  if (r < 0) return error.ToStatus("systemd: GetUnitByPID", r);
  const char* path = nullptr;
  r = sd_bus_message_read(reply.get(), "o", &path);
  if (r < 0) return ErrnoError("systemd: GetUnitByPID's reply", -r);
  const std::string unit_path(path);
  ASSIGN_OR_RETURN(std::string id, StringProperty(bus.get(), unit_path, "org.freedesktop.systemd1.Unit", "Id"));
  ASSIGN_OR_RETURN(std::string name, SandboxScopeName(id));
  ASSIGN_OR_RETURN(std::string slice, StringProperty(bus.get(), unit_path, "org.freedesktop.systemd1.Service", "Slice"));
  return std::unique_ptr<SandboxScope>(
      new SandboxScope(backend, std::move(id), std::move(slice), std::move(name), stop_timeout_s));
}

StatusOr<std::string> SandboxScope::Ensure() {
  std::lock_guard lock(mu_);
  if (anchor_ > 0 && !cgroup_.empty()) {
    // Alive (a dead child's /proc/PID/cgroup may still name its cgroup until it is reaped), and
    // still in its leaf.
    int status = 0;
    const pid_t exited = waitpid(anchor_, &status, WNOHANG);
    if (exited == anchor_) anchor_ = -1;
    auto where = anchor_ > 0 ? backend_.ProcessCgroup(anchor_) : StatusOr<std::string>(std::string());
    if (anchor_ > 0 && where.ok() && *where == cgroup_ + "/" + kAnchorLeaf) return cgroup_;
    // Killed, or moved out (`systemctl stop` of the scope kills it): a new anchor, and the scope
    // started again if it went.
    LogWarn("cgroups", "the sandboxes' scope lost corrald's anchor; making it again", {{"scope", name_}});
  }
  KillAnchor();
  Status made = StartOrJoin();
  if (!made.ok()) {
    KillAnchor();
    return made;
  }
  return cgroup_;
}

Status SandboxScope::StartOrJoin() {
  ASSIGN_OR_RETURN(anchor_, SpawnAnchor());
  ASSIGN_OR_RETURN(UniqueBus bus, ConnectToSystemd());
  const uint32_t anchor = static_cast<uint32_t>(anchor_);
  // A scope that goes away between our two calls (its last sandbox ended) is started again.
  for (int attempt = 0; attempt < 5; ++attempt) {
    sd_bus_message* raw = nullptr;
    int r = sd_bus_message_new_method_call(bus.get(), &raw, kDestination, kManagerPath, kManager, "StartTransientUnit");
    if (r < 0) return ErrnoError("systemd: StartTransientUnit", -r);
    UniqueMessage call(raw);
    const std::string description = "corral sandboxes of " + service_;
    r = sd_bus_message_append(call.get(), "ss", name_.c_str(), "fail");
    if (r >= 0) r = sd_bus_message_open_container(call.get(), 'a', "(sv)");
    if (r >= 0) r = sd_bus_message_append(call.get(), "(sv)", "Description", "s", description.c_str());
    if (r >= 0) r = sd_bus_message_append(call.get(), "(sv)", "Slice", "s", slice_.c_str());
    if (r >= 0) r = sd_bus_message_append(call.get(), "(sv)", "Delegate", "b", 1);
    if (r >= 0) r = sd_bus_message_append(call.get(), "(sv)", "TasksMax", "t", UINT64_MAX);
    if (r >= 0) r = sd_bus_message_append(call.get(), "(sv)", "OOMPolicy", "s", "continue");
    if (r >= 0) r = sd_bus_message_append(call.get(), "(sv)", "CollectMode", "s", "inactive-or-failed");
    if (r >= 0) r = sd_bus_message_append(call.get(), "(sv)", "TimeoutStopUSec", "t", stop_timeout_s_ * 1000000);
    if (r >= 0) r = sd_bus_message_append(call.get(), "(sv)", "PIDs", "au", 1, anchor);
    if (r >= 0) r = sd_bus_message_close_container(call.get());
    if (r >= 0) r = sd_bus_message_append(call.get(), "a(sa(sv))", 0);
    if (r < 0) return ErrnoError("systemd: StartTransientUnit's arguments", -r);
    BusError error;
    r = sd_bus_call(bus.get(), call.get(), kCallTimeoutUsec, &error.error, nullptr);
    if (r >= 0) {
      // The start job moves the anchor into the scope's own cgroup; then into its leaf, so that
      // the scope's cgroup can hand controllers to the sandboxes' (v2: no process may stay).
      std::string where;
      const auto deadline = std::chrono::steady_clock::now() + kJoinTimeout;
      for (;;) {
        auto cgroup = backend_.ProcessCgroup(anchor_);
        if (cgroup.ok() && EndsWith(*cgroup, "/" + name_)) {
          where = *cgroup;
          break;
        }
        if (std::chrono::steady_clock::now() > deadline) {
          return Status::Error("systemd started " + name_ + " but did not move corrald's anchor into it", ETIMEDOUT);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      const std::string leaf = where + "/" + kAnchorLeaf;
      RETURN_IF_ERROR(backend_.CreateLeaf(leaf));
      RETURN_IF_ERROR(backend_.Attach(leaf, anchor_));
      cgroup_ = where;
      LogInfo("cgroups", "started the sandboxes' scope", {{"scope", name_}, {"cgroup", cgroup_}});
      return Status();
    }
    if (!error.Is("org.freedesktop.systemd1.UnitExists")) return error.ToStatus("systemd: StartTransientUnit " + name_, r);
    // It runs already: sandboxes that an earlier corrald started. The anchor joins it.
    sd_bus_message* raw_reply = nullptr;
    BusError get_error;
    r = sd_bus_call_method(bus.get(), kDestination, kManagerPath, kManager, "GetUnit", &get_error.error, &raw_reply,
                           "s", name_.c_str());
    UniqueMessage reply(raw_reply);
    if (r < 0) {
      if (get_error.Is("org.freedesktop.systemd1.NoSuchUnit")) continue;
      return get_error.ToStatus("systemd: GetUnit " + name_, r);
    }
    const char* path = nullptr;
    r = sd_bus_message_read(reply.get(), "o", &path);
    if (r < 0) return ErrnoError("systemd: GetUnit's reply", -r);
    auto control_group = StringProperty(bus.get(), path, "org.freedesktop.systemd1.Scope", "ControlGroup");
    if (!control_group.ok() || control_group->size() < 2) continue;  // on its way out
    const std::string where = control_group->substr(1);
    RETURN_IF_ERROR(backend_.CreateLeaf(where + "/" + kAnchorLeaf));
    BusError attach_error;
    r = sd_bus_call_method(bus.get(), kDestination, kManagerPath, kManager, "AttachProcessesToUnit", &attach_error.error,
                           nullptr, "ssau", name_.c_str(), (std::string("/") + kAnchorLeaf).c_str(), 1, anchor);
    if (r < 0) {
      if (attach_error.Is("org.freedesktop.systemd1.NoSuchUnit") || attach_error.Is("org.freedesktop.systemd1.UnitInactive")) {
        continue;
      }
      return attach_error.ToStatus("systemd: AttachProcessesToUnit " + name_, r);
    }
    cgroup_ = where;
    LogInfo("cgroups", "joined the sandboxes' scope", {{"scope", name_}, {"cgroup", cgroup_}});
    return Status();
  }
  return Status::Error("systemd: " + name_ + " kept going away while corrald joined it", EAGAIN);
}

}  // namespace corral::supervisor
