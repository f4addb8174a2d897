#include "supervisor/sandboxes/sandbox_manager.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "isolation/sandbox_spec.h"
#include "supervisor/egress/egress_proxy.h"
#include "supervisor/sandboxes/trust_bundle.h"
#include "supervisor/sandboxes/full_network.h"
#include "supervisor/ids.h"

namespace corral::supervisor {
namespace {

namespace asio = boost::asio;

constexpr auto kIdleSweep = std::chrono::seconds(5);  // also the compute meter's interval
// How stale the store's last_active_at of a running sandbox may be (the daemon holds the
// newer value; a crash loses at most this much of it).
constexpr auto kActivityWrite = std::chrono::seconds(10);

}  // namespace

SandboxManager::SandboxManager(asio::io_context& io, asio::thread_pool& pool, const DaemonConfig& config,
                               Store& store, SandboxHost& host, CommandObserver* observer)
    : io_(io), pool_(pool), config_(config), store_(store), host_(host), observer_(observer),
      admission_(config, store), meter_(store, host), idle_timer_(io), pool_retry_(io) {}

SandboxManager::~SandboxManager() { Detach(); }

int64_t SandboxManager::Now() { return static_cast<int64_t>(time(nullptr)); }

Status SandboxManager::NotFound(const std::string& what) {
  return Status::Error("no " + what + " for this user", ENOENT);
}

Command::Context SandboxManager::CommandContext() {
  Command::Context ctx;
  ctx.io = &io_;
  ctx.pool = &pool_;
  ctx.host = &host_;
  ctx.store = &store_;
  ctx.observer = observer_;
  ctx.replay_buffer_bytes = config_.replay_buffer_bytes;
  return ctx;
}

void SandboxManager::SetState(SandboxRow& row, const std::string& state) {
  row.state = state;
  row.updated_at = Now();
  Status stored = store_.UpdateSandbox(row);
  if (!stored.ok()) {
    LogError("sandbox", "cannot store the sandbox's state", {{"sandbox", row.id}, {"error", stored.ToString()}});
  }
}

StatusOr<SandboxRow> SandboxManager::Owned(const Caller& caller, const std::string& id) {
  if (!IsWellFormedId(id, "sb")) return NotFound("sandbox " + id);
  ASSIGN_OR_RETURN(std::optional<SandboxRow> row, store_.GetSandbox(id));
  // A pooled sandbox is nobody's until a create claims it, not even the admin's to start, exec
  // in or snapshot (Destroy takes it out of the pool first).
  if (!row || row->state == kPooled || (!caller.admin && (row->iss != caller.iss || row->sub != caller.sub))) {
    return NotFound("sandbox " + id);
  }
  RETURN_IF_ERROR(OnThisNode("sandbox " + id, row->node_id));
  Fresh(*row);
  return *row;
}

Status SandboxManager::TakesNewSandboxes() const {
  if (!drained_ || !drained_()) return Status();
  return Status::Error("node " + store_.node_id() + " is drained: it takes no new sandboxes", EAGAIN);
}

// What another node of the fleet holds is that node's to act on (its files, cgroups and
// processes are there): unavailable here, until requests are forwarded between nodes.
Status SandboxManager::OnThisNode(const std::string& what, const std::string& node_id) const {
  if (node_id == store_.node_id()) return Status();
  return Status::Error(what + " is on node " + node_id + ", not on this one (" + store_.node_id() + ")", EAGAIN);
}

void SandboxManager::Fresh(SandboxRow& row) const {
  auto it = live_.find(row.id);
  if (it != live_.end()) row.last_active_at = std::max(row.last_active_at, it->second->active_at);
}

StatusOr<isolation::SandboxSpec> SandboxManager::SpecOf(const SandboxRow& row, bool starting) const {
  isolation::SandboxSpecBuilder spec;
  spec.SetInitMode(isolation::InitMode::kControl)
      .SetHostUidBase(static_cast<uid_t>(row.uid_base))
      .SetNofileLimit(SandboxOpenFiles());
  // The writable layer: an image on a loop device, or a project-quota directory, which the
  // launch takes as a workspace (its upper/ and work/ are the overlay's).
  const WritableLayer layer = host_.SandboxLayer(row.id);
  if (layer.kind == LayerKind::kImage) spec.SetLayerImage(layer.path);
  else spec.SetWorkspace(layer.path);
  ASSIGN_OR_RETURN(std::vector<std::string> layers, ImageLayersOf(row));
  // A sandbox that names secrets trusts the egress proxy's CA (trust_bundle.h).
  if (starting && !row.secrets.empty() && trust_ != nullptr) {
    ASSIGN_OR_RETURN(std::vector<isolation::BindMount> binds, trust_->Prepare(row.id, layers));
    for (const isolation::BindMount& bind : binds) spec.AddBind(bind);
  }
  if (!layers.empty()) spec.SetImageLayers(std::move(layers));
  const isolation::ResourceLimits& limits = row.limits;
  if (limits.memory_bytes.value_or(0) > 0) spec.SetMemoryLimit(*limits.memory_bytes);
  if (limits.cpu_millicores.value_or(0) > 0) spec.SetCpuLimit(*limits.cpu_millicores);
  if (limits.pids.value_or(0) > 0) spec.SetPidsLimit(*limits.pids);
  if (limits.disk_bytes.value_or(0) > 0) {
    // The layer is the disk image; the scratch tmpfs holds /tmp, at most 1 GiB of it.
    spec.SetDiskLimit(*limits.disk_bytes).SetScratchLimit(std::min<uint64_t>(*limits.disk_bytes, 1ull << 30));
  }
  if (loopback_) spec.SetLoopbackPorts(loopback_->Ports());
  if (row.network == kNetworkFull) {
    // Admission let only a token with the scope ask for it (network "full").
    std::vector<std::string> nameservers;
    for (const IpAddress& server : config_.network_dns) nameservers.push_back(server.ToString());
    spec.AllowFullNetwork(isolation::UnsafeFullNetwork{}, std::move(nameservers));
  }
  if (auto mcp = host_.McpBind()) spec.AddBind(*mcp);
  // Claude Code for agent sessions: an image has its own /usr, so the host's is bound read-only.
  if (!row.image.empty() && row.image != isolation::kHostImage) {
    for (const isolation::BindMount& bind : host_.ClaudeBinds()) spec.AddBind(bind);
  }
  return spec.Build();
}

StatusOr<SandboxRow> SandboxManager::SetEgress(const Caller& caller, const UserCaps& caps, const std::string& id,
                                               const EgressRulesChange& change) {
  ASSIGN_OR_RETURN(SandboxRow row, Owned(caller, id));
  ASSIGN_OR_RETURN(EgressRules rules, admission_.EgressRulesFor(caps, change, row.egress));
  RETURN_IF_ERROR(store_.SetSandboxEgress(id, rules));
  row.egress = rules;
  const nlohmann::json stored = EgressRulesJson(rules);
  // The proxy holds the rules of running sandboxes; a stopped one's are handed when it starts.
  if (egress_ != nullptr && live_.count(id)) egress_->SetRules(id, rules);
  if (network_ != nullptr && row.network == kNetworkFull && live_.count(id)) {
    // A few milliseconds of netlink on the loop: the answer says the filter is in place.
    Status updated = network_->Update(id, rules.cidrs);
    if (!updated.ok()) {
      LogError("sandbox", "cannot update the network filter", {{"sandbox", id}, {"error", updated.ToString()}});
      return Status::Error("the rules are stored but the network filter was not updated: " + updated.ToString(), EIO);
    }
  }
  (void)store_.AppendEvent(id, "sandbox.egress", nlohmann::json{{"rules", stored}}.dump());
  LogInfo("sandbox", "egress rules changed", {{"sandbox", id}, {"rules", stored.dump()}});
  return row;
}

StatusOr<std::vector<SandboxRow>> SandboxManager::List(const Caller& caller) {
  auto rows = caller.admin ? store_.ListSandboxes() : store_.ListSandboxes(caller.iss, caller.sub);
  if (rows.ok()) {
    // Pooled sandboxes are nobody's yet (metrics count them).
    std::erase_if(*rows, [](const SandboxRow& row) { return row.state == kPooled; });
    for (SandboxRow& row : *rows) Fresh(row);
  }
  return rows;
}

StatusOr<SandboxRow> SandboxManager::Get(const Caller& caller, const std::string& id) { return Owned(caller, id); }

StatusOr<FileAccess> SandboxManager::OpenFiles(const Caller& caller, const std::string& sandbox_id) {
  ASSIGN_OR_RETURN(SandboxRow row, Owned(caller, sandbox_id));
  auto it = live_.find(row.id);
  if (it != live_.end() && busy_[row.id] && row.state == "running") {
    return Status::Error("sandbox " + row.id + " is busy (its files are being copied); try again", EBUSY);
  }
  if (it == live_.end() || busy_[row.id]) {
    return Status::Error("sandbox " + row.id + " is not running (it is " + row.state + ")", EBUSY);
  }
  const std::string root = "/proc/" + std::to_string(it->second->process.pid) + "/root";
  FileAccess access;
  access.root.reset(open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!access.root) return ErrnoError("open the sandbox's root");
  // The pid could have been reused between the lookup and the open: check it is still init.
  if (ProcessStartTime(it->second->process.pid) != it->second->process.start_time) {
    return Status::Error("sandbox " + row.id + " is not running", EBUSY);
  }
  access.uid = static_cast<uid_t>(row.uid_base + isolation::kAgentUid);
  access.gid = static_cast<gid_t>(row.uid_base + isolation::kAgentGid);
  Touch(row.id);
  return access;
}

void SandboxManager::Touch(const std::string& sandbox_id) {
  const int64_t now = Now();
  if (auto it = live_.find(sandbox_id); it != live_.end()) {
    Live& live = *it->second;
    live.active_at = now;
    if (now - live.active_stored < kActivityWrite.count()) return;
    live.active_stored = now;
  }
  auto row = store_.GetSandbox(sandbox_id);
  if (!row.ok() || !row->has_value()) return;
  (*row)->last_active_at = std::max((*row)->last_active_at, now);
  (void)store_.UpdateSandbox(**row);
}

// The activity not yet written, written (before the sandbox leaves live_, and at shutdown).
void SandboxManager::StoreActivity(const Live& live) {
  if (live.active_at <= live.active_stored) return;
  auto row = store_.GetSandbox(live.id);
  if (!row.ok() || !row->has_value() || (*row)->last_active_at >= live.active_at) return;
  (*row)->last_active_at = live.active_at;
  (void)store_.UpdateSandbox(**row);
}

void SandboxManager::StartTimers() {
  idle_timer_.expires_after(kIdleSweep);
  idle_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || detached_) return;
    SweepIdle();
    MeterCompute();
    StartTimers();
  });
}

void SandboxManager::SweepIdle() {
  const int64_t now = Now();
  std::vector<std::string> idle;
  // From what the daemon holds: a store read per running sandbox every sweep would cost
  // thousands of them at a time on a full host.
  for (const auto& [id, live] : live_) {
    if (busy_[id] || !live->commands.empty()) continue;
    if (live->idle_timeout_s > 0 && now - live->active_at >= live->idle_timeout_s) idle.push_back(id);
  }
  for (const std::string& id : idle) {
    LogInfo("sandbox", "idle timeout: stopping", {{"sandbox", id}});
    busy_[id] = true;
    stop_reasons_[id] = StopReason::kIdle;
    DoStop(id, /*by_request=*/false, [this, id](Status) {
      busy_.erase(id);
      (void)store_.AppendEvent(id, "sandbox.idle_stopped", "{}");
    });
  }
}

void SandboxManager::AppendLifecycle(const SandboxRow& row, WebhookEventType type, const std::string& data_json,
                                     StopReason reason) {
  WebhookEvent event;
  event.type = type;
  event.iss = row.iss;
  event.sub = row.sub;
  event.sandbox_id = row.id;
  event.source = type == WebhookEventType::kSandboxCreated ? row.source : "";
  event.reason = reason;
  std::string name(WebhookEventName(type));
  auto appended = supervisor::AppendEvent(store_, webhooks_, row.id, name, data_json, event);
  if (!appended.ok()) {
    LogError("sandbox", "cannot record an event",
             {{"sandbox", row.id}, {"event", name}, {"error", appended.status().ToString()}});
  }
}

void SandboxManager::MeterCompute() {
  // The cgroups' CPU time is read on the worker pool: a file per running sandbox, thousands on a
  // full host, which the event loop must not wait for. The debits and budget checks follow on
  // the loop (OnMeterRead), for the sandboxes that are still the ones read.
  if (metering_) return;
  std::vector<std::pair<std::string, std::shared_ptr<Live>>> targets;
  for (auto& [id, live] : live_) {
    if (busy_[id] || live->compute.exhausted || !live->control) continue;
    targets.emplace_back(id, live);
  }
  if (targets.empty()) return;
  metering_ = true;
  asio::post(pool_, [this, targets = std::move(targets)]() mutable {
    std::vector<MeterReading> readings;
    readings.reserve(targets.size());
    for (auto& [id, live] : targets) {
      if (auto used = host_.CpuUsageUsec(id); used.ok()) readings.push_back({std::move(live), *used});
    }
    asio::post(io_, [this, readings = std::move(readings)] { OnMeterRead(readings); });
  });
}

void SandboxManager::OnMeterRead(const std::vector<MeterReading>& readings) {
  metering_ = false;
  if (detached_) return;
  // Users over budget, each checked once per round.
  std::map<std::pair<std::string, std::string>, std::optional<ComputeSpent>> checked;
  std::vector<std::pair<std::string, ComputeSpent>> exhausted;
  for (const MeterReading& reading : readings) {
    const std::string& id = reading.live->id;
    auto it = live_.find(id);
    // Stopped (or stopped and started again: a new cgroup) since it was read: not this reading's.
    if (it == live_.end() || it->second != reading.live || busy_[id] || reading.live->compute.exhausted) continue;
    cgroups::CgroupStats stats;
    stats.cpu_usage_usec = reading.cpu_usage_usec;
    meter_.Debit(reading.live->compute, stats);
    if (!reading.live->compute.budget.compute_ms) continue;
    auto key = std::make_pair(reading.live->compute.iss, reading.live->compute.sub);
    auto found = checked.find(key);
    if (found == checked.end()) found = checked.emplace(key, meter_.Spent(reading.live->compute)).first;
    if (found->second) exhausted.push_back({id, *found->second});
  }
  for (const auto& [id, spent] : exhausted) ComputeExhausted(id, spent);
}

void SandboxManager::ComputeExhausted(const std::string& id, const ComputeSpent& spent) {
  auto it = live_.find(id);
  if (it == live_.end() || busy_[id]) return;
  std::shared_ptr<Live> live = it->second;
  live->compute.exhausted = true;
  busy_[id] = true;
  meter_.CountStop();
  LogInfo("sandbox", "compute budget spent: freezing and stopping",
          {{"sandbox", id},
           {"spent_ms", std::to_string(spent.spent_ms)},
           {"budget_ms", std::to_string(spent.budget_ms)}});
  stop_reasons_[id] = StopReason::kComputeBudget;
  (void)AppendEvent(store_, webhooks_, id, "sandbox.compute_exhausted",
                    nlohmann::json{{"spent_ms", spent.spent_ms}, {"budget_ms", spent.budget_ms}}.dump(),
                    BudgetExhaustedEvent(live->compute.iss, live->compute.sub, id, "compute", live->compute.budget,
                                         spent.budget_ms, spent.spent_ms, Now()));
  const auto running = live->commands;  // a copy, as in DoStop
  for (auto& [seq, command] : running) command->MarkBudgetExhausted();
  const std::string cgroup = host_.SandboxCgroup(id);
  // Frozen first, so nothing more runs (or is charged) while it is taken down; then killed
  // whole (the backend's kill works on a frozen cgroup), and stopped without a grace period.
  asio::post(pool_, [this, id, cgroup]() {
    Status frozen = host_.backend().Freeze(cgroup);
    if (!frozen.ok()) LogWarn("sandbox", "cannot freeze", {{"sandbox", id}, {"error", frozen.ToString()}});
    Status killed = host_.backend().Kill(cgroup);
    if (!killed.ok()) LogWarn("sandbox", "cannot kill", {{"sandbox", id}, {"error", killed.ToString()}});
    asio::post(io_, [this, id]() {
      if (detached_) return;
      DoStop(id, /*by_request=*/false, [this, id](Status) { busy_.erase(id); }, /*immediate=*/true);
    });
  });
}

std::map<std::string, int64_t> SandboxManager::UnmeteredCompute(const std::string& iss, const std::string& sub) {
  std::map<std::string, int64_t> by_sandbox;
  for (const auto& [id, live] : live_) {
    if (live->compute.iss != iss || live->compute.sub != sub) continue;
    if (const int64_t ms = meter_.Unmetered(live->compute); ms > 0) by_sandbox[id] = ms;
  }
  return by_sandbox;
}

int64_t SandboxManager::ComputeCountedMs() {
  int64_t total = meter_.debited_ms();
  for (const auto& [id, live] : live_) total += meter_.Unmetered(live->compute);
  return total;
}

void SandboxManager::Detach() {
  detached_ = true;
  idle_timer_.cancel();
  pool_retry_.cancel();
  // Pooled sandboxes hold memory and disk for nobody: destroyed on the worker pool, which corrald
  // joins before it exits (their rows go at the next start's recovery).
  DestroyUnclaimedFills();
  for (WarmPool::Entry& entry : warm_pool_.TakeAll()) {
    auto process = std::make_shared<SandboxProcess>(std::move(entry.process));
    asio::post(pool_, [this, id = entry.id, process] { DestroyPooled(id, process.get()); });
  }
  for (auto& [id, command] : commands_) command->Release();
  for (auto& [id, live] : live_) {
    StoreActivity(*live);
    // Release without closing what init must keep: the control connection closes (init waits
    // for the next daemon), the sandbox keeps running.
    live->control.reset();
    live->init_exit.reset();
  }
  live_.clear();
  commands_.clear();
  recent_.clear();
}

std::map<std::string, int64_t> SandboxManager::CountByState() {
  std::map<std::string, int64_t> counts;
  for (const char* state : {"creating", "created", "starting", "running", "stopping", "stopped", "destroying", kPooled}) {
    counts[state] = 0;
  }
  auto rows = store_.ListNodeSandboxes();
  if (rows.ok()) {
    for (const auto& row : *rows) ++counts[row.state];
  }
  return counts;
}

std::vector<std::shared_ptr<Command>> SandboxManager::LiveCommands(const std::string& sandbox_id) const {
  std::vector<std::shared_ptr<Command>> out;
  auto it = live_.find(sandbox_id);
  if (it == live_.end()) return out;
  for (const auto& [seq, command] : it->second->commands) out.push_back(command);
  return out;
}

int64_t SandboxManager::running_commands() const {
  return std::count_if(commands_.begin(), commands_.end(), [](const auto& entry) { return !entry.second->ended(); });
}

}  // namespace corral::supervisor
