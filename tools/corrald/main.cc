// corrald: the corral daemon. Wires the pieces together; the logic lives in supervisor/ and api/.
//
//   corrald [--config FILE] [--foreground]
//
// Runs in the foreground (under systemd as Type=notify: READY=1 once the API listens, watchdog
// pings while the event loop turns). SIGTERM or SIGINT stop it without touching the sandboxes:
// they keep running and the next corrald adopts them.
#include <execinfo.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <malloc.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>

#include "api/api_metrics.h"
#include "api/auth_api.h"
#include "api/auth_mapping.h"
#include "api/daemon_api.h"
#include "api/forwarding.h"
#include "api/issuer_sync.h"
#include "api/image_build_routes.h"
#include "api/metrics.h"
#include "api/routes.h"
#include "api/sandbox_mover.h"
#include "api/server.h"
#include "api/supervisor_metrics.h"
#include "api/web_page.h"
#include "cgroups/cgroup_backend.h"
#include "common/file_util.h"
#include "common/journal_log.h"
#include "common/log.h"
#include "common/unique_fd.h"
#include "supervisor/config.h"
#include "supervisor/sandboxes/cgroup_placement.h"
#include "supervisor/sandboxes/claude_runtime.h"
#include "supervisor/doctor.h"
#include "supervisor/sessions/executions.h"
#include "supervisor/loopback_group.h"
#include "supervisor/sessions/tool_bridge.h"
#include "supervisor/egress/egress_proxy.h"
#include "tools/corrald/root_files.h"
#include "tools/corrald/secrets_setup.h"
#include "supervisor/fleet/fleet_router.h"
#include "supervisor/fleet/node_registry.h"
#include "supervisor/sandboxes/full_network.h"
#include "supervisor/images/image_builds.h"
#include "supervisor/images/image_service.h"
#include "supervisor/issuers.h"
#include "supervisor/relay/ledger.h"
#include "supervisor/sandboxes/sandbox_events.h"
#include "supervisor/sandboxes/sandbox_host.h"
#include "supervisor/relay/model_relay.h"
#include "supervisor/relay/relay_keys.h"
#include "supervisor/webhooks/webhook_deliverer.h"
#include "supervisor/webhooks/webhook_outbox.h"
#include "supervisor/sandboxes/sandbox_manager.h"
#include "supervisor/sessions/session_runner.h"
#include "supervisor/store/store.h"

namespace {

using namespace corral;

constexpr char kDefaultConfig[] = CORRAL_CONFIG_FILE;  // /etc/corral/corrald.toml (CMake: install dirs)

int Fail(const std::string& message) {
  LogError("corrald", message);
  sd_notifyf(0, "STATUS=%s", message.c_str());
  return 1;
}

// A helper binary beside corrald (a build tree), else where the package installs it.
std::string HelperPath(const std::string& name) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string exe(self, static_cast<size_t>(n));
    std::string beside = exe.substr(0, exe.rfind('/')) + "/" + name;
    if (access(beside.c_str(), X_OK) == 0) return beside;
  }
  return std::string(CORRAL_LIBEXEC_DIR) + "/" + name;
}

// A crash leaves its stack in the log (stderr, the journal under systemd): which signal, and the
// frames with their function names (corrald is linked with -rdynamic). Then the default action
// (a core dump where the host keeps them) with the signal re-raised. backtrace() is called once
// at start so that the handler does not load libgcc, and the handler uses only write(2),
// sigabbrev_np (a table lookup) and backtrace_symbols_fd, which does not allocate.
void OnFatalSignal(int signal_number) {
  // No stdio here: only write(2) on bytes put together by hand.
  auto say = [](const char* text) { (void)!write(STDERR_FILENO, text, strlen(text)); };
  char number[4] = {static_cast<char>('0' + signal_number / 10 % 10), static_cast<char>('0' + signal_number % 10), 0, 0};
  say("corrald: fatal signal ");
  say(signal_number >= 10 ? number : number + 1);
  say(" (");
  const char* name = sigabbrev_np(signal_number);
  say(name ? name : "?");
  say("); stack:\n");
  void* frames[64];
  const int depth = backtrace(frames, 64);
  backtrace_symbols_fd(frames, depth, STDERR_FILENO);
  raise(signal_number);  // SA_RESETHAND: the default action now
}

void InstallCrashHandler() {
  void* warm[1];
  (void)backtrace(warm, 1);
  struct sigaction action = {};
  action.sa_handler = OnFatalSignal;
  action.sa_flags = SA_RESETHAND | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  for (int signal_number : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(signal_number, &action, nullptr);
}

// daemon.admin_group's gid, or -1 (root only) when it is "" or this host has no such group: the
// package makes the group; a build tree's corrald runs where there may be none.
StatusOr<gid_t> AdminGroup(const supervisor::DaemonConfig& config) {
  if (config.admin_group.empty()) return static_cast<gid_t>(-1);
  std::vector<char> buffer(16384);
  struct group entry;
  struct group* found = nullptr;
  const int error = getgrnam_r(config.admin_group.c_str(), &entry, buffer.data(), buffer.size(), &found);
  if (error != 0) return ErrnoError("look up group " + config.admin_group, error);
  if (found == nullptr) {
    LogInfo("corrald", "admin socket for root only: this host has no group " + config.admin_group +
                           " (daemon.admin_group)");
    return static_cast<gid_t>(-1);
  }
  return found->gr_gid;
}

std::string InitPath(const supervisor::DaemonConfig& config) {
  if (!config.init_path.empty()) return config.init_path;
  return HelperPath("corral-init");
}

// The web page's files: api.web_dir, or web/ beside corrald (the build tree), then
// /usr/share/corral/web. Not finding them where the config names them is an error; not finding
// them by default means this corrald has no page (built without node, say): / answers 404.
StatusOr<std::map<std::string, api::WebFile>> WebPage(const supervisor::DaemonConfig& config) {
  if (!config.web_dir.empty()) return api::LoadWebPage(config.web_dir);
  const std::string beside = HelperPath("web");
  for (const std::string& dir : {beside, std::string(CORRAL_WEB_DIR)}) {
    auto files = api::LoadWebPage(dir);
    if (files.ok()) return files;
  }
  return std::map<std::string, api::WebFile>();
}

// corral-mcp, for agent sessions' client tools: copied to <run_dir>/bin, which every sandbox's
// uid can reach (the build tree or /usr/libexec may not be), and bound read-only from there into
// each sandbox at kMcpPathInSandbox. "" when it is not installed.
StatusOr<std::string> StageMcp(const supervisor::DaemonConfig& config) {
  const std::string source = HelperPath("corral-mcp");
  if (access(source.c_str(), X_OK) != 0) return std::string();
  ASSIGN_OR_RETURN(std::string binary, ReadFileToString(source));
  const std::string dir = config.run_dir + "/bin";
  RETURN_IF_ERROR(MakeDirs(dir, 0755));
  if (chmod(config.run_dir.c_str(), 0755) != 0 || chmod(dir.c_str(), 0755) != 0) return ErrnoError("chmod " + dir);
  const std::string staged = dir + "/corral-mcp";
  const std::string temporary = staged + ".new";
  (void)unlink(temporary.c_str());
  RETURN_IF_ERROR(WriteNewFile(temporary, binary, 0755));
  if (rename(temporary.c_str(), staged.c_str()) != 0) return ErrnoError("rename " + temporary);
  return staged;
}

// Claude Code for image sandboxes (supervisor/sandboxes/claude_runtime.h): the host's binary
// (`claude` on corrald's PATH) and its loader and libraries staged in <run_dir>/claude-runtime.
// Not installed, or not a binary the runtime can carry: image sandboxes' sessions are refused.
void StageClaudeCode(const supervisor::DaemonConfig& config, supervisor::SandboxHost& host,
                     supervisor::SessionRunner& sessions) {
  const std::string binary = FindExecutable("claude");
  if (binary.empty()) {
    LogWarn("corrald", "Claude Code is not installed: agent sessions cannot start");
    return;
  }
  auto runtime = supervisor::StageClaudeRuntime(binary, config.run_dir + "/claude-runtime");
  if (!runtime.ok()) {
    LogWarn("corrald", "Claude Code cannot be provided to image sandboxes: their sessions cannot start",
            {{"binary", binary}, {"error", runtime.status().ToString()}});
    return;
  }
  if (!runtime->has_bash) {
    LogWarn("corrald", "bash-static is not installed: agents in images without bash have no Bash tool",
            {{"path", supervisor::kHostStaticBash}});
  }
  const std::string exec = HelperPath("corral-claude");
  Status exec_staged = supervisor::StageClaudeExec(runtime->dir, exec);
  if (!exec_staged.ok()) {
    LogWarn("corrald", "corral-claude cannot be staged: in image sandboxes, Claude Code's find, grep and rg fail",
            {{"path", exec}, {"error", exec_staged.ToString()}});
  }
  host.SetClaudeRuntime(runtime->dir, runtime->binary);
  sessions.SetClaudeRuntime({/*staged=*/true, runtime->has_bash, exec_staged.ok()});
}

void Usage() {
  fprintf(stderr,
          "usage: corrald [--config FILE] [--foreground]\n"
          "  --config FILE   the configuration (default %s; every key is optional)\n"
          "  --foreground    run in the foreground (always the case; for symmetry with init scripts)\n",
          kDefaultConfig);
}

// Watchdog pings from the event loop: if it wedges, systemd notices.
void ArmWatchdog(boost::asio::steady_timer& timer, std::chrono::microseconds interval) {
  timer.expires_after(interval / 2);
  timer.async_wait([&timer, interval](boost::system::error_code ec) {
    if (ec) return;
    sd_notify(0, "WATCHDOG=1");
    ArmWatchdog(timer, interval);
  });
}

// When systemd asks for it (WatchdogSec=): pings at half its interval, from the event loop.
void ArmWatchdogIfAsked(boost::asio::steady_timer& timer) {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0) ArmWatchdog(timer, std::chrono::microseconds(usec));
}

// [webhooks]: the outbox the services record lifecycle events in and the deliverer that sends
// them, signed with webhooks.secret_file (root's alone, at least 32 bytes). None without URLs.
struct Webhooks {
  // The services record their events in the outbox (set before their recovery).
  void Wire(supervisor::SandboxManager& manager, supervisor::ModelRelay& relay, supervisor::SessionRunner& sessions,
            supervisor::Executions& executions) {
    manager.SetWebhooks(outbox.get());
    relay.SetWebhooks(outbox.get());
    sessions.SetWebhooks(outbox.get());
    executions.SetWebhooks(outbox.get());
  }
  // After the recovery: what the outbox holds from before (a restart, a receiver down), and what
  // comes from now on.
  Status Start() { return deliverer ? deliverer->Start() : Status(); }
  void Stop() {
    if (deliverer) deliverer->Stop();
  }

  std::unique_ptr<supervisor::WebhookOutbox> outbox;
  std::unique_ptr<supervisor::WebhookDeliverer> deliverer;
};
StatusOr<Webhooks> WebhooksOf(const supervisor::DaemonConfig& config, supervisor::Store& store,
                              api::SupervisorMetrics* observer) {
  Webhooks made;
  if (config.webhooks.urls.empty()) return made;
  supervisor::WebhooksConfig webhooks = config.webhooks;
  const std::string& path = webhooks.secret_file;
  ASSIGN_OR_RETURN(webhooks.secret, ReadRootSecretFile("webhooks.secret_file", path));
  if (webhooks.secret.size() < 32) return Status::Error("webhooks.secret_file: " + path + " holds less than 32 bytes");
  made.outbox = std::make_unique<supervisor::WebhookOutbox>(webhooks, store.node_id());
  made.deliverer = std::make_unique<supervisor::WebhookDeliverer>(store, std::move(webhooks), observer);
  made.outbox->SetWake([deliverer = made.deliverer.get()] { deliverer->Wake(); });
  observer->SetWebhooks(made.deliverer.get());  // corral_webhook_outbox_pending
  return made;
}

// The command line. Returns the exit code when corrald is to stop here (--help, --version, a
// bad argument).
std::optional<int> ParseArgs(int argc, char** argv, std::string& config_path, bool& config_given) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--config" && i + 1 < argc) {
      config_path = argv[++i];
      config_given = true;
    } else if (arg == "--foreground") {
    } else if (arg == "--help" || arg == "-h") {
      Usage();
      return 0;
    } else if (arg == "--version") {
      printf("corrald %s (protocol %d)\n", api::kVersion, api::kProtocolVersion);
      return 0;
    } else {
      fprintf(stderr, "corrald: unknown argument %s\n", arg.c_str());
      Usage();
      return 2;
    }
  }
  return std::nullopt;
}

// The process itself: signals, crash reports, the log sink, malloc and descriptor limits.
void PrepareProcess() {
  signal(SIGPIPE, SIG_IGN);
  InstallCrashHandler();
  // Under systemd (stderr is the journal): entries with fields instead of JSON lines.
  if (StderrIsJournal()) SetLogSink(SendToJournal);
  // Command output moves in chunks of up to 256 KiB: glibc would mmap (and fault in, and unmap)
  // each one, or give the heap's top back to the kernel after each; kept, they reuse warm pages.
  // (At most 16 MiB of free heap is kept.)
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
  mallopt(M_TRIM_THRESHOLD, 16 << 20);
  // Every sandbox holds a few descriptors here (supervisor::kDescriptorsPerSandbox) and every
  // client a socket: the soft limit of 1024 that a shell hands down is far too low, and so may be
  // its hard limit. Root raises both, up to what the kernel allows a process (fs.nr_open), as the
  // unit's LimitNOFILE does. (Sandboxes get a limit of their own.)
  struct rlimit files;
  if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
    rlim_t most = supervisor::kDaemonOpenFiles;
    if (auto nr_open = ReadFileToString("/proc/sys/fs/nr_open"); nr_open.ok()) {
      most = std::min<rlim_t>(most, std::strtoull(nr_open->c_str(), nullptr, 10));
    }
    if (files.rlim_max < most) {
      struct rlimit raised = {most, most};
      if (setrlimit(RLIMIT_NOFILE, &raised) == 0) files = raised;
    }
    if (files.rlim_cur < files.rlim_max) {
      files.rlim_cur = files.rlim_max;
      (void)setrlimit(RLIMIT_NOFILE, &files);
    }
  }
}

// The host's checks (corral doctor's): warnings are logged, failures refuse to start.
Status CheckHost(const supervisor::DaemonConfig& config, const supervisor::CgroupPlacement& placement) {
  supervisor::DoctorOptions doctor;
  doctor.cgroup_mount = config.cgroup_mount;
  doctor.cgroup_parent = placement.sandboxes_parent;
  doctor.state_dir = config.state_dir;
  doctor.max_sandboxes = config.max_sandboxes;
  doctor.disk_quota = config.disk_quota;
  doctor.skopeo = config.images.skopeo;
  doctor.claude_version = supervisor::TestedClaudeCodeVersion();
  std::string failed;
  for (const auto& check : supervisor::RunDoctor(doctor)) {
    if (check.level == supervisor::CheckLevel::kWarn) {
      LogWarn("doctor", check.detail, {{"check", check.name}});
    } else if (check.level == supervisor::CheckLevel::kFail) {
      LogError("doctor", check.detail, {{"check", check.name}});
      failed += (failed.empty() ? "" : "; ") + check.name + ": " + check.detail;
    }
  }
  if (!failed.empty()) return Status::Error("this host cannot run corrald (corral doctor says why): " + failed);
  return Status();
}

// The state and run directories, and the state directory's lock: one daemon per state directory.
StatusOr<UniqueFd> LockStateDir(const supervisor::DaemonConfig& config) {
  for (const auto& [dir, mode] : {std::pair{config.state_dir, 0700}, std::pair{config.run_dir, 0755}}) {
    RETURN_IF_ERROR(MakeDirs(dir, mode));
  }
  const std::string lock_path = config.state_dir + "/corrald.lock";
  auto lock = LockFileForProcess(lock_path);
  if (!lock.ok() && lock.status().error_number() == EWOULDBLOCK) {
    return Status::Error("another corrald is running on " + config.state_dir + " (" + lock_path + " is locked)");
  }
  return lock;
}

// The egress proxy (egress.enabled), the one way out to the network.
StatusOr<std::unique_ptr<supervisor::EgressProxy>> MakeEgressProxy(boost::asio::io_context& io,
                                                                   const supervisor::DaemonConfig& config,
                                                                   supervisor::Store& store) {
  supervisor::EgressProxyConfig egress_config;
  egress_config.port = static_cast<uint16_t>(config.egress_port);
  egress_config.netns = config.egress_netns;
  if (!config.egress_resolver.empty()) egress_config.resolver = supervisor::ParseResolverAddress(config.egress_resolver);
  egress_config.max_connections = config.egress_max_connections;
  egress_config.bandwidth = config.egress_bandwidth;
  egress_config.connect_timeout_s = config.egress_connect_timeout_s;
  egress_config.idle_timeout_s = config.egress_idle_timeout_s;
  return supervisor::EgressProxy::Create(io, std::move(egress_config), store);
}

// The metrics, the web page (api.web) and the listeners: TCP and the admin socket.
Status ServeExtrasAndListen(api::Server& server, api::Metrics& metrics, const supervisor::DaemonConfig& config) {
  server.Route("GET", "/metrics", api::Auth::kNone, [&metrics](api::HttpRequest, api::Responder respond) {
    api::HttpResponse response;
    response.content_type = "text/plain; version=0.0.4; charset=utf-8";
    response.body = metrics.Render();
    respond(std::move(response));
  });
  if (config.web) {
    auto page = WebPage(config);
    if (!page.ok()) return Status::Error("api.web_dir: " + page.status().ToString());
    if (page->empty()) {
      LogWarn("corrald", std::string("the web page is not installed (no web/ beside corrald nor ") + CORRAL_WEB_DIR +
                             "): / answers 404");
    } else {
      LogInfo("corrald", "web page", {{"files", std::to_string(page->size())}});
      api::RegisterWebPage(server, std::move(*page));
    }
  }
  Status listening = server.ListenTcp(config.listen_address, config.listen_port);
  if (!listening.ok()) return Status::Error("listen: " + listening.ToString());
  auto admin_group = AdminGroup(config);
  if (!admin_group.ok()) return Status::Error("admin socket: " + admin_group.status().ToString());
  Status admin = *admin_group == static_cast<gid_t>(-1) ? server.ListenUnix(config.admin_socket, 0600)
                                                         : server.ListenUnix(config.admin_socket, 0660, *admin_group);
  if (!admin.ok()) return Status::Error("admin socket: " + admin.ToString());
  return Status();
}

// What the daemon finds at its start: the budget holds of its calls that died with its last run
// (before a sandbox's relay is served), its sandboxes, their sessions, its executions, and the
// webhooks their events left to send (with those recovering made).
Status RecoverAll(supervisor::ModelRelay& relay, supervisor::SandboxManager& manager,
                  supervisor::SessionRunner& sessions, supervisor::Executions& executions, Webhooks& webhooks) {
  webhooks.Wire(manager, relay, sessions, executions);
  RETURN_IF_ERROR(relay.Recover());
  RETURN_IF_ERROR(manager.Recover());
  RETURN_IF_ERROR(sessions.Recover());
  RETURN_IF_ERROR(executions.Recover());
  return webhooks.Start();
}

// This node's settings ([node]).
supervisor::NodeSettings NodeSettingsOf(const supervisor::DaemonConfig& config) {
  supervisor::NodeSettings settings;
  settings.address = config.node_address;
  settings.version = api::kVersion;
  settings.max_sandboxes = static_cast<int64_t>(config.max_sandboxes);
  settings.heartbeat_s = static_cast<int64_t>(config.node_heartbeat_s);
  settings.dead_after_s = static_cast<int64_t>(config.node_dead_after_s);
  return settings;
}

// This node's id: node.id, or the host's name.
std::string NodeIdOf(const supervisor::DaemonConfig& config) {
  if (!config.node_id.empty()) return config.node_id;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "local";
  return name;
}

// The egress proxy when egress.enabled (else null), reporting to `observer`, and the secrets it
// adds ([secrets]), handed to the manager.
struct Egress {
  std::unique_ptr<supervisor::EgressProxy> proxy;
  SecretsSetup secrets;
};
StatusOr<Egress> EgressIfEnabled(boost::asio::io_context& io, const supervisor::DaemonConfig& config,
                                 supervisor::Store& store, api::SupervisorMetrics& observer,
                                 supervisor::SandboxManager& manager) {
  Egress egress;
  if (config.egress_enabled) {
    ASSIGN_OR_RETURN(egress.proxy, MakeEgressProxy(io, config, store));
    egress.proxy->SetObserver(&observer);
    manager.SetEgressProxy(egress.proxy.get());
  }
  ASSIGN_OR_RETURN(egress.secrets, SetUpSecrets(config, store, NodeIdOf(config), egress.proxy.get(), manager));
  return egress;
}

// The store: SQLite in the state dir, with the durability the config asks for, or PostgreSQL
// (the connection string from store.url, or from store.url_file, which only root may read).
StatusOr<std::unique_ptr<supervisor::Store>> OpenStore(const supervisor::DaemonConfig& config) {
  supervisor::StoreOptions options;
  options.node_id = NodeIdOf(config);
  options.path = config.state_dir + "/corrald.db";
  options.synchronous = config.store_synchronous_full ? supervisor::Synchronous::kFull : supervisor::Synchronous::kNormal;
  if (config.store_postgresql) {
    options.backend = supervisor::StoreBackend::kPostgresql;
    options.url = config.store_url;
    if (!config.store_url_file.empty()) {
      ASSIGN_OR_RETURN(options.url, ReadRootSecretFile("store.url_file", config.store_url_file));
      if (options.url.empty()) return Status::Error("store.url_file: " + config.store_url_file + " is empty");
    }
  }
  return supervisor::Store::Open(options);
}

// What this node marks the requests it forwards to other nodes with (node.cluster_secret_file,
// root's alone); nullopt without it: it forwards nothing.
StatusOr<std::optional<api::HopSigner>> HopSignerOf(const supervisor::DaemonConfig& config) {
  if (config.node_cluster_secret_file.empty()) return std::optional<api::HopSigner>();
  ASSIGN_OR_RETURN(std::string secret,
                   ReadRootSecretFile("node.cluster_secret_file", config.node_cluster_secret_file));
  auto signer = api::HopSigner::Create(NodeIdOf(config), std::move(secret));
  if (!signer.ok()) return Status::Error("node.cluster_secret_file: " + signer.status().message());
  return std::optional<api::HopSigner>(std::move(*signer));
}

// Full network mode ([network]).
supervisor::FullNetworkConfig FullNetworkConfigOf(const supervisor::DaemonConfig& config) {
  supervisor::FullNetworkConfig network;
  network.netns = config.network_netns;
  network.subnet = config.network_full_subnet;
  network.dns = config.network_dns;
  return network;
}

// The log line and systemd's READY=1 once corrald listens.
void AnnounceReady(const supervisor::DaemonConfig& config, uint16_t port, cgroups::CgroupBackend& backend,
                   const supervisor::CgroupPlacement& placement) {
  const std::string address = config.listen_address + ":" + std::to_string(port);
  LogInfo("corrald", "listening", {{"address", address}, {"admin_socket", config.admin_socket},
                                   {"state_dir", config.state_dir},
                                   {"cgroups", backend.name()},
                                   {"cgroup_parent", placement.sandboxes_parent},
                                   {"cgroup_placement", placement.reason}});
  sd_notifyf(0, "READY=1\nSTATUS=listening on %s", address.c_str());
}

// Runs `reload` on every SIGHUP, between systemd's RELOADING=1 and READY=1, until `hangups` is
// cancelled.
void OnEachHangup(boost::asio::signal_set& hangups, std::function<void()> reload) {
  hangups.async_wait([&hangups, reload = std::move(reload)](boost::system::error_code error, int) mutable {
    if (error) return;
    sd_notify(0, "RELOADING=1");
    reload();
    sd_notify(0, "READY=1");
    OnEachHangup(hangups, std::move(reload));
  });
}

// What Run made before there is an event loop, for Serve.
struct Foundation {
  std::string config_path = kDefaultConfig;
  bool config_given = false;
  supervisor::DaemonConfig* config = nullptr;
  cgroups::CgroupBackend* backend = nullptr;
  supervisor::PlacedSandboxes* placed = nullptr;
  supervisor::Store* store = nullptr;
  supervisor::Issuers* issuers = nullptr;
  std::string init_path;
  supervisor::RelayConfig relay_config;
  std::optional<api::HopSigner> hop_signer;
};

// SIGHUP: the config again. What can change while corrald runs does (ApplyReload says what),
// for the requests that come next; connections, sandboxes and sessions go on. An invalid file
// changes nothing.
void Reload(const Foundation& base, api::Server& server, const std::function<void(uint64_t)>& reload_api,
            supervisor::ModelRelay& relay, supervisor::SandboxManager& manager, supervisor::WebhookOutbox* webhooks) {
  supervisor::DaemonConfig& config = *base.config;
  auto fresh = supervisor::LoadConfig(base.config_path, /*missing_ok=*/!base.config_given);
  if (!fresh.ok()) {
    LogError("corrald", "reload refused; the running config stays", {{"error", fresh.status().ToString()}});
    return;
  }
  std::vector<std::string> restart = supervisor::ApplyReload(config, *fresh);
  server.SetAllowedOrigins(config.server_limits.allowed_origins);
  reload_api(config.requests_per_minute);
  relay.Reload(config.relay.prices, config.relay.requests_per_minute);
  manager.ReconcilePool();  // [pool]: filled or drained to the new sizes
  if (webhooks != nullptr) webhooks->Reload(config.webhooks);  // urls and events
  std::string later;
  for (const auto& key : restart) later += (later.empty() ? "" : ", ") + key;
  LogInfo("corrald", "config reloaded", {{"config", base.config_path}});
  if (!later.empty()) LogWarn("corrald", "changed but applied only at the next start", {{"keys", later}});
}

// The services, the API and the event loop, until SIGTERM or SIGINT.
// corral image build's routes, after cleaning up what builds a previous daemon ran left.
std::unique_ptr<supervisor::ImageBuilds> ServeImageBuilds(api::Server& server, boost::asio::io_context& io,
                                                          supervisor::SandboxManager& manager,
                                                          supervisor::SandboxHost& host, supervisor::ImageService& images) {
  auto builds = supervisor::ImageBuilds::Recovered(io, manager, host, images, api::kAdminCallerIssuer);
  api::RegisterImageBuildRoutes(server, builds.get());
  return builds;
}

// How new sandboxes' disk caps are made, from what the state dir's file system offers.
Status ChooseNewLayerKind(const supervisor::DaemonConfig& config, supervisor::SandboxHost& host) {
  const std::string sandboxes_dir = config.state_dir + "/sandboxes";
  RETURN_IF_ERROR(MakeDirs(sandboxes_dir, 0700));
  ASSIGN_OR_RETURN(supervisor::LayerKindChoice choice, supervisor::ChooseLayerKind(config.disk_quota, sandboxes_dir));
  host.SetNewLayerKind(choice.kind);
  LogInfo("corrald", "disk caps of new sandboxes",
          {{"kind", choice.kind == supervisor::LayerKind::kQuotaDir ? "project quota" : "ext4 image"},
           {"why", choice.why}});
  return Status();
}

// The fleet's part of the API, before the routes: any node answers any request (what another
// node holds is forwarded to it), the issuers as the shared store has them (PostgreSQL), and
// stopped sandboxes moving between nodes (a drain that moves them).
struct FleetApi {
  FleetApi(boost::asio::io_context& io, supervisor::Store& store, supervisor::NodeRegistry& nodes, api::Server& server,
           supervisor::Issuers& issuers, const supervisor::DaemonConfig& config,
           std::optional<api::HopSigner> signer, boost::asio::thread_pool& pool, supervisor::SandboxManager& manager)
      : router(store, nodes),
        forwarding(router, signer ? std::make_unique<api::PeerHttp>(io, std::move(*signer)) : nullptr),
        issuer_sync(io, server, issuers, std::chrono::seconds(config.node_heartbeat_s)),
        mover(io, pool, manager, nodes, router, forwarding.peers()) {
    forwarding.Install(server);
    if (forwarding.peers() != nullptr) api::RegisterMoveRoutes(server, manager);
    if (store.backend() == supervisor::StoreBackend::kPostgresql) {
      issuer_sync.Start();
      mover.Start();
    }
  }
  void Stop() {
    issuer_sync.Stop();
    mover.Stop();
  }

  supervisor::FleetRouter router;
  api::Forwarding forwarding;
  api::IssuerSync issuer_sync;
  api::SandboxMover mover;
};

// corral-mcp, staged for the sandboxes ("" when it is not installed), and the tool bridge's port
// free of the relay's.
StatusOr<std::string> ToolBridgeBinary(const supervisor::DaemonConfig& config) {
  auto mcp = StageMcp(config);
  if (!mcp.ok()) return Status::Error("corral-mcp: " + mcp.status().ToString());
  if (mcp->empty()) LogWarn("corrald", "corral-mcp is not installed: sessions cannot offer client tools");
  if (config.relay.port == supervisor::kToolBridgePort) {
    return Status::Error("relay.port: " + std::to_string(config.relay.port) + " is the tool bridge's port");
  }
  return mcp;
}

int Serve(Foundation& base) {
  supervisor::DaemonConfig* config = base.config;
  const supervisor::CgroupPlacement& placement = base.placed->placement;
  supervisor::Store* store = base.store;
  // Declared before the io_context, so that it outlives it: handlers still queued when the loop
  // stops are destroyed with the io_context, and a connection's destructor updates its gauges.
  api::Metrics metrics;
  boost::asio::io_context io(1);
  boost::asio::thread_pool pool(4);
  auto mcp = ToolBridgeBinary(*config);
  if (!mcp.ok()) return Fail(mcp.status().ToString());
  supervisor::SandboxHost host(*config, *base.backend, base.init_path);
  if (Status chosen = ChooseNewLayerKind(*config, host); !chosen.ok()) return Fail(chosen.ToString());
  host.SetCgroupPlacement(placement.sandboxes_parent, placement.legacy_parents, placement.parent_is_corralds);
  if (base.placed->scope) host.SetParentKeeper([scope = base.placed->scope.get()] { return scope->Ensure().status(); });
  host.SetMcpBinary(*mcp);
  api::ApiMetrics api_metrics(metrics, nullptr);
  supervisor::SandboxManager manager(io, pool, *config, *store, host, &api_metrics);
  api_metrics.SetManager(&manager);
  api::SupervisorMetrics supervisor_metrics(metrics);
  manager.SetBudgetObserver(&supervisor_metrics);
  auto webhooks = WebhooksOf(*config, *store, &supervisor_metrics);  // [webhooks]
  if (!webhooks.ok()) return Fail(webhooks.status().ToString());
  // Each sandbox's loopback: the model relay (sessions issue the keys it takes) and the tool
  // bridge (client tools and permission requests, through corral-mcp).
  supervisor::RelayKeys relay_keys;
  supervisor::ModelRelay relay(io, std::move(base.relay_config), *store, relay_keys);
  relay.SetObserver(&supervisor_metrics);
  supervisor::SessionRunner sessions(*config, *store, manager, relay_keys, pool);
  sessions.SetObserver(&supervisor_metrics);
  supervisor_metrics.SetSessions(&sessions);
  supervisor::ToolBridge tool_bridge(io, sessions, supervisor::kToolBridgePort);
  sessions.EnableTools(io, tool_bridge, !mcp->empty());
  StageClaudeCode(*config, host, sessions);
  // And the egress proxy, the one way out to the network (egress.enabled), with its secrets.
  std::vector<supervisor::LoopbackServices*> loopback_members{&relay, &tool_bridge};
  auto egress = EgressIfEnabled(io, *config, *store, supervisor_metrics, manager);
  if (!egress.ok()) return Fail(egress.status().ToString());
  if (egress->proxy) loopback_members.push_back(egress->proxy.get());
  supervisor::LoopbackGroup loopback(loopback_members);
  manager.SetLoopbackServices(&loopback);
  // Full network mode ([network]): nothing is made until a "network": "full" sandbox starts, but
  // recovery removes what such sandboxes left.
  auto full_network = supervisor::FullNetwork::Create(FullNetworkConfigOf(*config));
  if (!full_network.ok()) return Fail(full_network.status().ToString());
  manager.SetFullNetwork(full_network->get());
  supervisor::Executions executions(io, pool, *config, *store, manager, sessions);  // headless execute
  supervisor::ImageService images(*store, config->state_dir + "/images", config->images);  // [images]
  if (Status ready = images.Init(); !ready.ok()) return Fail("images: " + ready.ToString());
  manager.SetImages(&images);  // sandboxes from images
  // This corrald as a node of the fleet ([node]; with SQLite, the only one).
  supervisor::NodeRegistry nodes(io, *store, NodeSettingsOf(*config));
  if (Status registered = nodes.Start(); !registered.ok()) return Fail("node: " + registered.ToString());
  manager.SetDrained([&nodes] { return nodes.DrainedNow(); });
  if (Status recovered = RecoverAll(relay, manager, sessions, executions, *webhooks); !recovered.ok()) {
    return Fail("recovery: " + recovered.ToString());
  }

  // What the API reads of the store: the sandboxes' event logs and the ledger.
  supervisor::SandboxEvents sandbox_events(*store);
  supervisor::Ledger ledger(*store);
  api::Server server(io, config->server_limits, api::MakeAuthenticator(*base.issuers, *config), metrics);
  FleetApi fleet(io, *store, nodes, server, *base.issuers, *config, std::move(base.hop_signer), pool, manager);
  api::RegisterAuthAdmin(server, *base.issuers, *config);
  auto reload_api = api::RegisterApi(server, io, pool, manager, sessions, sandbox_events, ledger, *config);
  api::RegisterExecuteRoutes(server, executions, *config);
  api::RegisterImageRoutes(server, io, pool, &images);
  api::RegisterNodeRoutes(server, nodes);
  auto image_builds = ServeImageBuilds(server, io, manager, host, images);
  Status serving = ServeExtrasAndListen(server, metrics, *config);
  if (!serving.ok()) return Fail(serving.ToString());
  manager.StartTimers();
  manager.ReconcilePool();  // [pool]: made in the background from here on

  boost::asio::signal_set hangups(io, SIGHUP);
  OnEachHangup(hangups, [&] { Reload(base, server, reload_api, relay, manager, webhooks->outbox.get()); });
  boost::asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](boost::system::error_code ec, int signal) {
    if (ec) return;
    LogInfo("corrald", "stopping; sandboxes keep running", {{"signal", strsignal(signal)}});
    sd_notify(0, "STOPPING=1");
    hangups.cancel();
    nodes.Stop();
    fleet.Stop();
    server.Stop();
    manager.Detach();
    webhooks->Stop();
    io.stop();
  });
  boost::asio::steady_timer watchdog(io);
  ArmWatchdogIfAsked(watchdog);

  AnnounceReady(*config, server.tcp_port(), *base.backend, placement);
  io.run();
  // The API's event watchers post to the loop, which is done: appends from here on go nowhere.
  sandbox_events.Watch(nullptr);
  pool.join();
  unlink(config->admin_socket.c_str());
  return 0;
}

int Run(int argc, char** argv) {
  Foundation base;
  if (auto stop = ParseArgs(argc, argv, base.config_path, base.config_given)) return *stop;
  if (geteuid() != 0) return Fail("corrald must run as root (it creates namespaces, cgroups and mounts)");
  PrepareProcess();

  auto config = supervisor::LoadConfig(base.config_path, /*missing_ok=*/!base.config_given);
  if (!config.ok()) return Fail(config.status().ToString());

  auto backend = cgroups::DetectBackend(config->cgroup_mount);
  if (!backend.ok()) return Fail("cgroups: " + backend.status().ToString());
  // Under systemd, the sandboxes' scope (cgroup_placement.h), before any thread: its anchor is a
  // child that dies with the thread that forked it.
  auto placed = supervisor::PlaceSandboxes(*config, **backend);
  if (!placed.ok()) return Fail("cgroups: " + placed.status().ToString());
  const supervisor::CgroupPlacement& placement = placed->placement;

  // The host's checks (corral doctor's), before anything is made and before any thread: they fork.
  Status host_ok = CheckHost(*config, placement);
  if (!host_ok.ok()) return Fail(host_ok.message());
  auto lock = LockStateDir(*config);
  if (!lock.ok()) return Fail(lock.status().ToString());

  auto store = OpenStore(*config);
  if (!store.ok()) return Fail(store.status().ToString());
  auto issuers = supervisor::Issuers::Load(**store);
  if (!issuers.ok()) return Fail("issuers: " + issuers.status().ToString());
  const std::string init_path = InitPath(*config);
  if (access(init_path.c_str(), X_OK) != 0) return Fail("corral-init not found at " + init_path);

  auto hop_signer = HopSignerOf(*config);
  if (!hop_signer.ok()) return Fail(hop_signer.status().ToString());
  auto relay_config = RelayConfigOf(*config);
  if (!relay_config.ok()) return Fail(relay_config.status().ToString());
  if (relay_config->api_key.empty()) {
    LogWarn("corrald", "relay.api_key_file is not set: agents in sandboxes cannot reach a model");
  }

  base.config = &*config;
  base.backend = backend->get();
  base.placed = &*placed;
  base.store = store->get();
  base.issuers = issuers->get();
  base.init_path = init_path;
  base.relay_config = std::move(*relay_config);
  base.hop_signer = std::move(*hop_signer);
  return Serve(base);
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }
