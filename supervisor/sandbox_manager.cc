#include "supervisor/sandbox_manager.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "isolation/sandbox_spec.h"
#include "common/file_util.h"
#include "supervisor/egress_policy.h"
#include "supervisor/egress_proxy.h"
#include "supervisor/full_network.h"
#include "supervisor/ids.h"
#include "supervisor/layer_owners.h"

namespace corral::supervisor {
namespace {

namespace asio = boost::asio;
using initproto::MsgType;

// The CIDR ranges of a sandbox's stored egress rules (full network mode's filter accepts them).
std::vector<Cidr> EgressCidrs(const std::string& egress_json) {
  if (egress_json.empty()) return {};
  auto rules = ParseEgressRules(nlohmann::json::parse(egress_json, nullptr, false), "stored egress", {});
  return rules.ok() ? rules->cidrs : std::vector<Cidr>{};
}

constexpr size_t kRecentCommands = 256;
constexpr auto kIdleSweep = std::chrono::seconds(5);  // also the compute meter's interval
constexpr auto kHelloTimeout = std::chrono::milliseconds(5000);
// How stale the store's last_active_at of a running sandbox may be (the daemon holds the
// newer value; a crash loses at most this much of it).
constexpr auto kActivityWrite = std::chrono::seconds(10);

int64_t Now() { return static_cast<int64_t>(time(nullptr)); }

Status NotFound(const std::string& what) { return Status::Error("no " + what + " for this user", ENOENT); }

std::string LimitsJson(const SandboxLimits& limits) {
  return nlohmann::json{{"memory_bytes", limits.memory_bytes},
                        {"cpu_millicores", limits.cpu_millicores},
                        {"pids", limits.pids},
                        {"disk_bytes", limits.disk_bytes}}
      .dump();
}

// A requested value, or the default, checked against the token's cap and the daemon's maximum.
StatusOr<uint64_t> Pick(const char* name, std::optional<uint64_t> requested, uint64_t fallback,
                        std::optional<uint64_t> cap, uint64_t maximum, uint64_t minimum) {
  uint64_t limit = maximum;
  if (cap && *cap < limit) limit = *cap;
  uint64_t value = requested.value_or(std::min(fallback, limit));
  if (value > limit) {
    return Status::Error(std::string(name) + " " + std::to_string(value) + " is above the limit of " +
                             std::to_string(limit),
                         EDQUOT);
  }
  if (value < minimum) {
    return Status::Error(std::string(name) + " must be at least " + std::to_string(minimum), EINVAL);
  }
  return value;
}

}  // namespace

StatusOr<SandboxLimits> ParseLimits(const std::string& limits_json) {
  auto j = nlohmann::json::parse(limits_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::Error("bad limits in the store", EINVAL);
  SandboxLimits limits;
  limits.memory_bytes = j.value("memory_bytes", uint64_t{0});
  limits.cpu_millicores = j.value("cpu_millicores", uint64_t{0});
  limits.pids = j.value("pids", uint64_t{0});
  limits.disk_bytes = j.value("disk_bytes", uint64_t{0});
  return limits;
}

// A running sandbox: its init, the control connection, its live commands by seq.
struct SandboxManager::Live {
  std::string id;
  SandboxProcess process;
  std::unique_ptr<asio::posix::stream_descriptor> control;
  std::unique_ptr<asio::posix::stream_descriptor> init_exit;
  std::map<uint64_t, std::shared_ptr<Command>> commands;
  bool adopting = false;
  // Activity is kept here and written to the store at most every kActivityWrite: every exec
  // would otherwise cost a write. Readers of last_active_at take the newer of the two (Fresh).
  int64_t active_at = 0;
  int64_t active_stored = 0;
  // Compute metering: whose CPU time this is, against which budget, and how much of the
  // cgroup's usage the ledger already holds.
  std::string iss;
  std::string sub;
  Budget budget;
  int64_t cpu_billed_usec = 0;
  bool exhausted = false;
  int control_fd() const { return control ? control->native_handle() : -1; }
};

SandboxManager::SandboxManager(asio::io_context& io, asio::thread_pool& pool, const DaemonConfig& config,
                               Store& store, SandboxHost& host, CommandObserver* observer)
    : io_(io), pool_(pool), config_(config), store_(store), host_(host), observer_(observer), idle_timer_(io) {}

SandboxManager::~SandboxManager() { Detach(); }

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
  if (!row || (!caller.admin && (row->iss != caller.iss || row->sub != caller.sub))) {
    return NotFound("sandbox " + id);
  }
  Fresh(*row);
  return *row;
}

StatusOr<std::string> SandboxManager::EgressRulesFor(const UserCaps& caps, const std::string& requested,
                                                     const std::string& current) {
  // The token's caps: what it names, within the config's (an axis it does not name is the config's).
  EgressRules token_caps = config_.egress_allowed;
  if (!caps.egress_json.empty()) {
    ASSIGN_OR_RETURN(token_caps, ParseEgressRules(nlohmann::json::parse(caps.egress_json, nullptr, false),
                                                  "limits.egress", config_.egress_allowed));
  }
  EgressRules rules;
  if (requested.empty()) {
    rules = NarrowToCaps(NarrowToCaps(config_.egress_defaults, config_.egress_allowed), token_caps);
  } else {
    const nlohmann::json j = nlohmann::json::parse(requested, nullptr, false);
    EgressRules base = config_.egress_defaults;
    if (!current.empty()) {
      ASSIGN_OR_RETURN(base, ParseEgressRules(nlohmann::json::parse(current, nullptr, false), "stored egress", {}));
    }
    ASSIGN_OR_RETURN(rules, ParseEgressRules(j, "egress", base));
    RETURN_IF_ERROR(CheckWithinCaps(rules, config_.egress_allowed, "the daemon's egress.allowed_*"));
    RETURN_IF_ERROR(CheckWithinCaps(rules, token_caps, "the token's limits.egress"));
  }
  return EgressRulesJson(rules).dump();
}

Status SandboxManager::CheckNetwork(const Caller& caller, const UserCaps& caps, const std::string& network) const {
  if (network == kNetworkLoopback) return Status();
  if (network != kNetworkFull) {
    return Status::Error("network: \"" + network + "\" is not a network mode (\"loopback\" or \"full\")", EINVAL);
  }
  if (!caller.admin && !caps.full_network) {
    return Status::Error("network \"full\" needs the scope unsafe:full_network in the token", EPERM);
  }
  if (network_ == nullptr) return Status::Error("network \"full\" is not available on this daemon", EAGAIN);
  return Status();
}

StatusOr<SandboxRow> SandboxManager::SetEgress(const Caller& caller, const UserCaps& caps, const std::string& id,
                                               const std::string& egress_json) {
  ASSIGN_OR_RETURN(SandboxRow row, Owned(caller, id));
  ASSIGN_OR_RETURN(std::string rules, EgressRulesFor(caps, egress_json, row.egress_json));
  RETURN_IF_ERROR(store_.SetSandboxEgress(id, rules));
  row.egress_json = rules;
  if (egress_ != nullptr) {
    auto parsed = ParseEgressRules(nlohmann::json::parse(rules), "egress", {});
    if (parsed.ok()) egress_->SetRules(id, *parsed);
  }
  if (network_ != nullptr && row.network == kNetworkFull && live_.count(id)) {
    // A few milliseconds of netlink on the loop: the answer says the filter is in place.
    Status updated = network_->Update(id, EgressCidrs(rules));
    if (!updated.ok()) {
      LogError("sandbox", "cannot update the network filter", {{"sandbox", id}, {"error", updated.ToString()}});
      return Status::Error("the rules are stored but the network filter was not updated: " + updated.ToString(), EIO);
    }
  }
  (void)store_.AppendEvent(id, "sandbox.egress", nlohmann::json{{"rules", nlohmann::json::parse(rules)}}.dump());
  LogInfo("sandbox", "egress rules changed", {{"sandbox", id}, {"rules", rules}});
  return row;
}

void SandboxManager::Fresh(SandboxRow& row) const {
  auto it = live_.find(row.id);
  if (it != live_.end()) row.last_active_at = std::max(row.last_active_at, it->second->active_at);
}

StatusOr<SandboxLimits> SandboxManager::Resolve(const UserCaps& caps, const CreateRequest& request) const {
  SandboxLimits limits;
  ASSIGN_OR_RETURN(limits.memory_bytes, Pick("memory_bytes", request.memory_bytes, config_.default_memory_bytes,
                                             caps.memory_bytes, config_.max_memory_bytes, 16ull << 20));
  ASSIGN_OR_RETURN(limits.cpu_millicores, Pick("cpus (millicores)", request.cpu_millicores,
                                               config_.default_cpu_millicores, caps.cpu_millicores,
                                               config_.max_cpu_millicores, 10));
  ASSIGN_OR_RETURN(limits.pids, Pick("pids", request.pids, config_.default_pids, caps.pids, config_.max_pids, 8));
  ASSIGN_OR_RETURN(limits.disk_bytes, Pick("disk_bytes", request.disk_bytes, config_.default_disk_bytes,
                                           caps.disk_bytes, config_.max_disk_bytes, 64ull << 20));
  return limits;
}

SandboxShape SandboxManager::ShapeOf(const SandboxRow& row) const {
  SandboxShape shape;
  shape.id = row.id;
  shape.uid_base = row.uid_base;
  auto limits = ParseLimits(row.limits_json);
  if (limits.ok()) {
    shape.memory_bytes = limits->memory_bytes;
    shape.cpu_millicores = limits->cpu_millicores;
    shape.pids = limits->pids;
    shape.disk_bytes = limits->disk_bytes;
  }
  if (loopback_) shape.loopback_ports = loopback_->Ports();
  if (row.network == kNetworkFull) {
    for (const IpAddress& server : config_.network_dns) shape.nameservers.push_back(server.ToString());
  }
  return shape;
}

void SandboxManager::Create(const Caller& caller, const UserCaps& caps, CreateRequest request,
                            Done<SandboxRow> done) {
  if (request.image != isolation::kHostImage) {
    return done(Status::Error("image " + request.image + " is not available (only \"host\")", EINVAL));
  }
  if (request.name.size() > 128) return done(Status::Error("name: at most 128 characters", EINVAL));
  std::optional<SnapshotRow> snapshot;
  if (!request.snapshot.empty()) {
    auto found = OwnedSnapshot(caller, request.snapshot);
    if (!found.ok()) return done(found.status());
    auto taken = ParseLimits(found->limits_json);
    if (!taken.ok() || taken->disk_bytes == 0) {
      return done(Status::Error("snapshot " + found->id + " does not record its disk size", EIO));
    }
    // The copy is an image of the snapshot's size: a file system does not shrink or grow here.
    if (request.disk_bytes && *request.disk_bytes != taken->disk_bytes) {
      return done(Status::Error("disk_bytes: a sandbox made from snapshot " + found->id + " keeps its disk size (" +
                                    std::to_string(taken->disk_bytes) + ")",
                                EINVAL));
    }
    request.disk_bytes = taken->disk_bytes;
    snapshot = *found;
  }
  auto limits = Resolve(caps, request);
  if (!limits.ok()) return done(limits.status());
  auto idle = Pick("idle_timeout_s", request.idle_timeout_s, config_.default_idle_timeout_s, caps.idle_timeout_s,
                   config_.max_idle_timeout_s, 0);
  if (!idle.ok()) return done(idle.status());
  auto egress = EgressRulesFor(caps, request.egress_json);
  if (!egress.ok()) return done(egress.status());
  if (Status allowed = CheckNetwork(caller, caps, request.network); !allowed.ok()) return done(allowed);

  SandboxRow row;
  row.id = NewId("sb");
  row.iss = caller.iss;
  row.sub = caller.sub;
  row.name = request.name;
  row.image = request.image;
  row.state = "created";
  row.limits_json = LimitsJson(*limits);
  row.idle_timeout_s = static_cast<int64_t>(*idle);
  row.created_at = row.updated_at = row.last_active_at = Now();
  row.budget_json = BudgetToJson(caller.budget);
  row.egress_json = *egress;
  row.network = request.network;
  if (request.start && !caller.admin) {
    Status compute = CheckCompute(caller.iss, caller.sub, caller.budget);
    if (!compute.ok()) return done(compute);
  }
  if (snapshot) {
    row.state = "creating";
    row.source = snapshot->id;
  }
  auto created = InsertSandbox(caller, caps, row);
  if (!created.ok()) return done(created.status());
  if (snapshot) {
    LayerSource source;
    source.snapshot_id = snapshot->id;
    source.uid_base = snapshot->uid_base;
    return FillLayer(*created, std::move(source), request.start, std::move(done));
  }
  (void)store_.AppendEvent(created->id, "sandbox.created", "{}");
  LogInfo("sandbox", "created", {{"sandbox", created->id}, {"iss", caller.iss}, {"sub", caller.sub}});
  if (!request.start) return done(*created);
  busy_[created->id] = true;
  DoStart(*created, std::move(done));
}

StatusOr<SnapshotRow> SandboxManager::OwnedSnapshot(const Caller& caller, const std::string& id) {
  if (!IsWellFormedId(id, "snap")) return NotFound("snapshot " + id);
  ASSIGN_OR_RETURN(std::optional<SnapshotRow> row, store_.GetSnapshot(id));
  if (!row || (!caller.admin && (row->iss != caller.iss || row->sub != caller.sub))) {
    return NotFound("snapshot " + id);
  }
  return *row;
}

// The copy (and the move to the new uid range) runs on the worker pool while the new sandbox is
// `creating` and busy; the request is answered once it is `created` (or running). A daemon that
// dies meanwhile never answered, and recovery removes the half-made sandbox.
void SandboxManager::FillLayer(SandboxRow row, LayerSource source, bool start, Done<SandboxRow> done) {
  busy_[row.id] = true;
  asio::post(pool_, [this, row, source, start, done = std::move(done)]() mutable {
    const std::string layer = host_.LayerPath(row.id);
    Status filled = [&]() -> Status {
      RETURN_IF_ERROR(MakeDirs(layer.substr(0, layer.rfind('/')), 0700));
      if (!source.snapshot_id.empty()) {
        RETURN_IF_ERROR(host_.CopyLayer(host_.SnapshotPath(source.snapshot_id), layer));
      } else {
        RETURN_IF_ERROR(host_.Prepare(source.sandbox_shape));
        RETURN_IF_ERROR(host_.CopySandboxLayer(source.sandbox_id, source.sandbox_init_pid, layer));
      }
      auto shifted = ShiftLayerOwners(layer, config_.run_dir + "/layers", source.uid_base, row.uid_base, kUidStep);
      if (!shifted.ok()) return shifted.status();
      LogInfo("sandbox", "layer copied",
              {{"sandbox", row.id},
               {"from", source.snapshot_id.empty() ? source.sandbox_id : source.snapshot_id},
               {"inodes", std::to_string(shifted->inodes)}});
      return Status();
    }();
    if (!filled.ok()) (void)host_.Destroy(row.id);
    asio::post(io_, [this, row = std::move(row), source, start, filled, done = std::move(done)]() mutable {
      busy_.erase(row.id);
      if (!source.sandbox_id.empty()) busy_.erase(source.sandbox_id);
      const std::string from = source.snapshot_id.empty() ? source.sandbox_id : source.snapshot_id;
      if (!filled.ok()) {
        LogError("sandbox", "copying a layer failed", {{"sandbox", row.id}, {"from", from}, {"error", filled.ToString()}});
        (void)store_.DeleteSandbox(row.id);
        return done(Status::Error("copying the files of " + from + " failed: " + filled.message(), EIO));
      }
      if (detached_) return;
      SetState(row, "created");
      (void)store_.AppendEvent(row.id, "sandbox.created", nlohmann::json{{"source", from}}.dump());
      LogInfo("sandbox", "created", {{"sandbox", row.id}, {"source", from}, {"iss", row.iss}, {"sub", row.sub}});
      if (!start) return done(row);
      busy_[row.id] = true;
      DoStart(row, std::move(done));
    });
  });
}

void SandboxManager::Snapshot(const Caller& caller, const std::string& id, Done<SnapshotRow> done) {
  auto row = Owned(caller, id);
  if (!row.ok()) return done(row.status());
  if (busy_[id] || (row->state != "running" && row->state != "stopped" && row->state != "created")) {
    return done(Status::Error("sandbox " + id + " is " + row->state, EBUSY));
  }
  if (config_.max_snapshots_per_user == 0) return done(Status::Error("snapshots are turned off here", EPERM));
  auto mine = store_.CountSnapshots(row->iss, row->sub);
  if (!mine.ok()) return done(mine.status());
  if (static_cast<uint64_t>(*mine) >= config_.max_snapshots_per_user) {
    return done(Status::Error("this user already has " + std::to_string(*mine) + " snapshots (the limit)", EDQUOT));
  }
  SnapshotRow snapshot;
  snapshot.id = NewId("snap");
  snapshot.sandbox_id = id;
  snapshot.iss = row->iss;
  snapshot.sub = row->sub;
  snapshot.image = row->image;
  snapshot.uid_base = row->uid_base;
  snapshot.limits_json = row->limits_json;
  pid_t pid = 0;
  if (auto it = live_.find(id); it != live_.end()) pid = it->second->process.pid;
  SandboxShape shape = ShapeOf(*row);
  busy_[id] = true;
  asio::post(pool_, [this, snapshot, shape, pid, done = std::move(done)]() mutable {
    const std::string path = host_.SnapshotPath(snapshot.id);
    Status copied = host_.Prepare(shape);
    if (copied.ok()) copied = host_.CopySandboxLayer(shape.id, pid, path);
    struct stat st;
    if (copied.ok() && stat(path.c_str(), &st) == 0) snapshot.bytes = static_cast<int64_t>(st.st_blocks) * 512;
    asio::post(io_, [this, snapshot, copied, path, done = std::move(done)]() mutable {
      busy_.erase(snapshot.sandbox_id);
      if (!copied.ok()) {
        LogError("sandbox", "snapshot failed", {{"sandbox", snapshot.sandbox_id}, {"error", copied.ToString()}});
        unlink(path.c_str());
        return done(Status::Error("snapshot of " + snapshot.sandbox_id + " failed: " + copied.message(), EIO));
      }
      snapshot.created_at = Now();
      // Counted again with the insert: two sandboxes of one user may be snapshotted at once.
      Status stored = store_.InTransaction([&]() -> Status {
        ASSIGN_OR_RETURN(int64_t held, store_.CountSnapshots(snapshot.iss, snapshot.sub));
        if (static_cast<uint64_t>(held) >= config_.max_snapshots_per_user) {
          return Status::Error("this user already has " + std::to_string(held) + " snapshots (the limit)", EDQUOT);
        }
        return store_.InsertSnapshot(snapshot);
      });
      if (!stored.ok()) {
        unlink(path.c_str());
        return done(stored);
      }
      (void)store_.AppendEvent(snapshot.sandbox_id, "sandbox.snapshot", nlohmann::json{{"snapshot", snapshot.id}}.dump());
      LogInfo("sandbox", "snapshot taken", {{"sandbox", snapshot.sandbox_id}, {"snapshot", snapshot.id}});
      done(snapshot);
    });
  });
}

void SandboxManager::Fork(const Caller& caller, const UserCaps& caps, const std::string& id, ForkRequest request,
                          Done<SandboxRow> done) {
  auto source = Owned(caller, id);
  if (!source.ok()) return done(source.status());
  if (request.name.size() > 128) return done(Status::Error("name: at most 128 characters", EINVAL));
  if (busy_[id] || (source->state != "running" && source->state != "stopped" && source->state != "created")) {
    return done(Status::Error("sandbox " + id + " is " + source->state, EBUSY));
  }
  auto taken = ParseLimits(source->limits_json);
  if (!taken.ok()) return done(taken.status());
  // The source's limits, held against what this token allows now.
  CreateRequest wanted;
  wanted.memory_bytes = taken->memory_bytes;
  wanted.cpu_millicores = taken->cpu_millicores;
  wanted.pids = taken->pids;
  wanted.disk_bytes = taken->disk_bytes;
  auto limits = Resolve(caps, wanted);
  if (!limits.ok()) return done(limits.status());
  auto idle = Pick("idle_timeout_s", static_cast<uint64_t>(source->idle_timeout_s), config_.default_idle_timeout_s,
                   caps.idle_timeout_s, config_.max_idle_timeout_s, 0);
  if (!idle.ok()) return done(idle.status());
  // The source's egress rules too, held against what this token allows now.
  auto egress = EgressRulesFor(caps, source->egress_json);
  if (!egress.ok()) return done(egress.status());
  // And its network mode, if this token may still have it.
  if (Status allowed = CheckNetwork(caller, caps, source->network); !allowed.ok()) return done(allowed);

  SandboxRow row;
  row.id = NewId("sb");
  row.iss = source->iss;
  row.sub = source->sub;
  row.name = request.name.empty() ? source->name : request.name;
  row.image = source->image;
  row.state = "creating";
  row.source = source->id;
  row.limits_json = LimitsJson(*limits);
  row.idle_timeout_s = static_cast<int64_t>(*idle);
  row.egress_json = *egress;
  row.network = source->network;
  row.created_at = row.updated_at = row.last_active_at = Now();
  auto created = InsertSandbox(caller, caps, row);
  if (!created.ok()) return done(created.status());

  LayerSource from;
  from.sandbox_id = source->id;
  from.sandbox_shape = ShapeOf(*source);
  from.uid_base = source->uid_base;
  if (auto it = live_.find(id); it != live_.end()) from.sandbox_init_pid = it->second->process.pid;
  busy_[id] = true;
  FillLayer(*created, std::move(from), request.start, std::move(done));
}

StatusOr<std::vector<SnapshotRow>> SandboxManager::ListSnapshots(const Caller& caller) {
  return store_.ListSnapshots(caller.iss, caller.sub);
}

StatusOr<SnapshotRow> SandboxManager::GetSnapshot(const Caller& caller, const std::string& id) {
  return OwnedSnapshot(caller, id);
}

void SandboxManager::DeleteSnapshot(const Caller& caller, const std::string& id, Done<bool> done) {
  auto snapshot = OwnedSnapshot(caller, id);
  if (!snapshot.ok()) return done(snapshot.status());
  // The row goes first: a daemon that dies before the file is gone leaves an orphan file, which
  // recovery removes, never a row without its file.
  Status deleted = store_.DeleteSnapshot(id);
  if (!deleted.ok()) return done(deleted);
  LogInfo("sandbox", "snapshot deleted", {{"snapshot", id}});
  asio::post(pool_, [this, id, done = std::move(done)]() mutable {
    const std::string path = host_.SnapshotPath(id);
    Status removed;
    if (unlink(path.c_str()) != 0 && errno != ENOENT) removed = ErrnoError("unlink " + path);
    asio::post(io_, [removed, done = std::move(done)]() mutable {
      if (!removed.ok()) return done(removed);
      done(true);
    });
  });
}

void SandboxManager::RemoveOrphanSnapshots() {
  const std::string dir = config_.state_dir + "/snapshots";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (struct dirent* entry = readdir(d)) {
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    const std::string suffix = ".img";
    bool keep = false;
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      auto row = store_.GetSnapshot(name.substr(0, name.size() - suffix.size()));
      keep = !row.ok() || row->has_value();  // a store error keeps the file
    }
    if (!keep) {
      LogInfo("recovery", "removing an orphan snapshot file", {{"file", name}});
      unlinkat(dirfd(d), name.c_str(), 0);
    }
  }
  closedir(d);
}

StatusOr<SandboxRow> SandboxManager::InsertSandbox(const Caller& caller, const UserCaps& caps, const SandboxRow& row) {
  uint64_t per_user = config_.max_sandboxes_per_user;
  if (caps.sandboxes && *caps.sandboxes < per_user) per_user = *caps.sandboxes;
  StatusOr<SandboxRow> created = Status::Error("unreachable");
  Status counted = store_.InTransaction([&]() -> Status {
    ASSIGN_OR_RETURN(int64_t mine, store_.CountSandboxes(caller.iss, caller.sub));
    if (static_cast<uint64_t>(mine) >= per_user) {
      return Status::Error("this user already has " + std::to_string(mine) + " sandboxes (the limit)", EDQUOT);
    }
    ASSIGN_OR_RETURN(auto all, store_.ListSandboxes());
    if (all.size() >= config_.max_sandboxes) {
      return Status::Error("the daemon holds its maximum of sandboxes", EDQUOT);
    }
    if (config_.max_sandboxes_per_issuer > 0 && !caller.admin) {
      const auto issuer = std::count_if(all.begin(), all.end(), [&](const SandboxRow& r) { return r.iss == caller.iss; });
      if (static_cast<uint64_t>(issuer) >= config_.max_sandboxes_per_issuer) {
        return Status::Error("the users of issuer " + caller.iss + " already have " + std::to_string(issuer) +
                                 " sandboxes (the issuer's limit)",
                             EDQUOT);
      }
    }
    created = store_.CreateSandbox(row, kUidFirst, kUidStep, kUidSlots);
    return created.status();
  });
  if (!counted.ok()) return counted;
  return created;
}

StatusOr<std::vector<SandboxRow>> SandboxManager::List(const Caller& caller) {
  auto rows = caller.admin ? store_.ListSandboxes() : store_.ListSandboxes(caller.iss, caller.sub);
  if (rows.ok()) {
    for (SandboxRow& row : *rows) Fresh(row);
  }
  return rows;
}

StatusOr<SandboxRow> SandboxManager::Get(const Caller& caller, const std::string& id) { return Owned(caller, id); }

void SandboxManager::Start(const Caller& caller, const std::string& id, Done<SandboxRow> done) {
  auto row = Owned(caller, id);
  if (!row.ok()) return done(row.status());
  if (busy_[id]) return done(Status::Error("sandbox " + id + " is " + row->state, EBUSY));
  if (row->state == "running") return done(*row);
  if (!caller.admin) {
    // Its CPU time is debited against the budget of the token that starts it.
    Status compute = CheckCompute(caller.iss, caller.sub, caller.budget);
    if (!compute.ok()) return done(compute);
    row->budget_json = BudgetToJson(caller.budget);
  }
  busy_[id] = true;
  DoStart(*row, std::move(done));
}

Status SandboxManager::CheckCompute(const std::string& iss, const std::string& sub, const Budget& budget) {
  if (!budget.compute_ms) return Status();
  const WindowRange window = CurrentWindow(budget, Now());
  ASSIGN_OR_RETURN(int64_t spent, store_.LedgerSum(iss, sub, "compute", window.start, window.end));
  if (spent < *budget.compute_ms) return Status();
  if (budget_observer_ != nullptr) budget_observer_->OnBudgetRefusal(BudgetRefusal::kCompute);
  return Status::Error("the compute budget of this " + std::string(WindowName(budget.window)) + " is spent (" +
                           std::to_string(spent / 1000) + " of " + std::to_string(*budget.compute_ms / 1000) +
                           " CPU-seconds); it renews at " + std::to_string(window.end),
                       EKEYEXPIRED);
}

void SandboxManager::DoStart(SandboxRow row, Done<SandboxRow> done) {
  SetState(row, "starting");
  SandboxShape shape = ShapeOf(row);
  asio::post(pool_, [this, row, shape, done = std::move(done)]() mutable {
    auto started = host_.Start(shape);
    // What init holds for us: its loopback listeners (a new sandbox holds no commands).
    StatusOr<InitHello> hello = Status::Error("not started");
    if (started.ok()) {
      hello = Hello(started->control.get(), kHelloTimeout, nullptr);
      if (!hello.ok()) {
        (void)host_.Stop(shape.id, &*started);
        started = Status::Error("corral-init did not answer: " + hello.status().ToString(), EIO);
      }
    }
    // A full-network sandbox gets its interface before anyone can run a command in it.
    std::optional<NetworkAttachment> attached;
    if (started.ok() && row.network == kNetworkFull) {
      StatusOr<NetworkAttachment> attach = Status::Error("network \"full\" is not available on this daemon", EAGAIN);
      if (network_ != nullptr) attach = network_->Attach(row.id, started->pidfd.get(), EgressCidrs(row.egress_json));
      if (attach.ok()) {
        attached = *attach;
      } else {
        (void)host_.Stop(shape.id, &*started);
        started = Status::Error("its network: " + attach.status().ToString(), attach.status().error_number());
      }
    }
    asio::post(io_, [this, row = std::move(row), started = std::move(started), hello = std::move(hello),
                     attached = std::move(attached), done = std::move(done)]() mutable {
      busy_.erase(row.id);
      if (!started.ok()) {
        LogError("sandbox", "start failed", {{"sandbox", row.id}, {"error", started.status().ToString()}});
        SetState(row, "stopped");
        return done(Status::Error("sandbox " + row.id + " could not start: " + started.status().ToString(), EIO));
      }
      if (detached_) return;
      row.init_pid = started->pid;
      row.init_start_time = static_cast<int64_t>(started->start_time);
      row.cpu_billed_usec = 0;  // a new cgroup: its CPU time starts at zero
      row.last_active_at = Now();
      SetState(row, "running");
      (void)store_.AppendEvent(row.id, "sandbox.started", "{}");
      if (attached) {
        (void)store_.AppendEvent(row.id, "network",
                                 nlohmann::json{{"mode", kNetworkFull},
                                                {"address", attached->address},
                                                {"gateway", attached->gateway},
                                                {"interface", attached->interface}}
                                     .dump());
        LogInfo("sandbox", "full network attached",
                {{"sandbox", row.id}, {"address", attached->address}, {"interface", attached->interface}});
      }
      OnStarted(row, std::move(*started), std::move(hello->listeners));
      done(row);
    });
  });
}

void SandboxManager::OnStarted(SandboxRow row, SandboxProcess process, std::vector<UniqueFd> listeners) {
  if (loopback_ && !listeners.empty()) loopback_->Serve(row.id, std::move(listeners));
  auto live = std::make_shared<Live>();
  live->id = row.id;
  live->iss = row.iss;
  live->sub = row.sub;
  live->budget = BudgetFromJson(row.budget_json);
  live->cpu_billed_usec = row.cpu_billed_usec;
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
  auto finish = [this, id, by_request, live, full_network, done = std::move(done)]() mutable {
    // The commands that have not ended take their figures from the stop (below).
    std::vector<uint64_t> seqs;
    std::vector<std::shared_ptr<Command>> stopped_commands;
    if (live) {
      Meter(*live);  // what it used so far (the rest once it is killed, below)
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
    }
    auto process = std::make_shared<SandboxProcess>(live ? std::move(live->process) : SandboxProcess());
    if (live) {
      // The fds moved into the asio objects above; reopen the pidfd to wait for the exit.
      process->pidfd.reset();
    }
    pid_t pid = process->pid;
    uint64_t start_time = process->start_time;
    asio::post(pool_, [this, id, pid, start_time, process, full_network, live, seqs = std::move(seqs),
                       stopped_commands = std::move(stopped_commands), done = std::move(done)]() mutable {
      // The figures before the cgroups go: everything in the sandbox is killed first (init's
      // SIGKILL in Stop would take it down too), so what is read next is final.
      StopFigures figures;
      if (live) figures = KillAndRead(id, seqs);
      if (pid > 0 && ProcessStartTime(pid) == start_time) {
        process->pidfd.reset(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
      }
      Status stopped = host_.Stop(id, process->pidfd ? process.get() : nullptr);
      if (full_network && network_ != nullptr) {
        // The veth went with the sandbox's namespace; its filter and NAT go now.
        Status detached = network_->Detach(id);
        if (!detached.ok()) LogError("sandbox", "cannot remove its network", {{"sandbox", id}, {"error", detached.ToString()}});
        if (stopped.ok()) stopped = detached;
      }
      asio::post(io_, [this, id, stopped, live, figures = std::move(figures),
                       stopped_commands = std::move(stopped_commands), done = std::move(done)]() mutable {
        if (!stopped.ok()) LogError("sandbox", "stop failed", {{"sandbox", id}, {"error", stopped.ToString()}});
        if (live && figures.sandbox.ok()) Meter(*live, *figures.sandbox);  // the last of its CPU time
        for (size_t i = 0; i < stopped_commands.size() && i < figures.commands.size(); ++i) {
          stopped_commands[i]->OnStopped(std::move(figures.commands[i]), figures.killed_us);
        }
        auto current = store_.GetSandbox(id);
        if (current.ok() && current->has_value()) {
          (*current)->init_pid = 0;
          (*current)->init_start_time = 0;
          SetState(**current, "stopped");
          (void)store_.AppendEvent(id, "sandbox.stopped", "{}");
        }
        done(stopped);
      });
    });
  };
  if (immediate || !live || live->commands.empty() || !live->control) return finish();
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

void SandboxManager::Destroy(const Caller& caller, const std::string& id, Done<bool> done) {
  auto row = Owned(caller, id);
  if (!row.ok()) return done(row.status());
  if (busy_[id]) return done(Status::Error("sandbox " + id + " is " + row->state, EBUSY));
  busy_[id] = true;
  auto destroy = [this, id, done = std::move(done)](Status) mutable {
    auto current = store_.GetSandbox(id);
    if (current.ok() && current->has_value()) SetState(**current, "destroying");
    asio::post(pool_, [this, id, done = std::move(done)]() mutable {
      Status destroyed = host_.Destroy(id);
      asio::post(io_, [this, id, destroyed, done = std::move(done)]() mutable {
        busy_.erase(id);
        if (!destroyed.ok()) {
          LogError("sandbox", "destroy failed", {{"sandbox", id}, {"error", destroyed.ToString()}});
          return done(destroyed);
        }
        Status deleted = store_.DeleteSandbox(id);
        if (!deleted.ok() && deleted.error_number() != ENOENT) return done(deleted);
        (void)store_.AppendEvent(id, "sandbox.destroyed", "{}");
        LogInfo("sandbox", "destroyed", {{"sandbox", id}});
        done(true);
      });
    });
  };
  if (row->state == "running" || live_.count(id)) return DoStop(id, /*by_request=*/true, std::move(destroy));
  destroy(Status());
}

StatusOr<std::shared_ptr<Command>> SandboxManager::Exec(const Caller& caller, const UserCaps& caps,
                                                        const ExecSpec& spec) {
  ASSIGN_OR_RETURN(SandboxRow row, Owned(caller, spec.sandbox));
  auto it = live_.find(row.id);
  if (it != live_.end() && busy_[row.id] && row.state == "running") {
    return Status::Error("sandbox " + row.id + " is busy (its files are being copied); try again", EBUSY);
  }
  if (it == live_.end() || busy_[row.id] || !it->second->control) {
    return Status::Error("sandbox " + row.id + " is not running (it is " + row.state + ")", EBUSY);
  }
  std::shared_ptr<Live> live = it->second;
  if (spec.argv.empty()) return Status::Error("argv: must not be empty", EINVAL);
  uint64_t max_commands = config_.max_commands_per_sandbox;
  if (caps.commands && *caps.commands < max_commands) max_commands = *caps.commands;
  if (live->commands.size() >= max_commands) {
    return Status::Error("sandbox " + row.id + " already runs " + std::to_string(live->commands.size()) +
                             " commands (the limit)",
                         EDQUOT);
  }
  ExecRequest request;
  if (spec.user == "root") {
    request.uid = request.gid = 0;
  } else if (spec.user == "agent" || spec.user.empty()) {
    request.uid = isolation::kAgentUid;
    request.gid = isolation::kAgentGid;
  } else {
    return Status::Error("user: must be \"agent\" or \"root\"", EINVAL);
  }
  const std::string home = request.uid == 0 ? "/root" : "/home/agent";
  request.cwd = spec.cwd.empty() ? home : spec.cwd;
  if (request.cwd[0] != '/') return Status::Error("cwd: must be an absolute path", EINVAL);
  request.argv = spec.argv;
  request.env = {"PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin", "HOME=" + home,
                 std::string("USER=") + (request.uid == 0 ? "root" : "agent"), "LANG=C.UTF-8"};
  if (spec.pty) request.env.push_back("TERM=xterm-256color");
  if (egress_ != nullptr) {
    for (std::string& var : EgressProxyEnvironment(static_cast<uint16_t>(config_.egress_port))) {
      request.env.push_back(std::move(var));
    }
  }
  for (const auto& var : spec.env) {
    size_t eq = var.find('=');
    if (eq == 0 || eq == std::string::npos) return Status::Error("env: bad entry " + var, EINVAL);
    std::string key = var.substr(0, eq + 1);
    request.env.erase(std::remove_if(request.env.begin(), request.env.end(),
                                     [&](const std::string& e) { return e.compare(0, key.size(), key) == 0; }),
                      request.env.end());
    request.env.push_back(var);
  }
  request.pty = spec.pty;
  request.rows = spec.rows;
  request.cols = spec.cols;
  request.stdin_open = spec.stdin_open || spec.pty;
  if (!spec.private_stdio) {
    request.stdio_owner = ExecRequest::HostIds{static_cast<uid_t>(row.uid_base + request.uid),
                                               static_cast<gid_t>(row.uid_base + request.gid)};
  }

  CommandRow command_row;
  command_row.id = NewId("cmd");
  command_row.sandbox_id = row.id;
  command_row.iss = row.iss;
  command_row.sub = row.sub;
  command_row.argv_json = nlohmann::json(spec.argv).dump();
  command_row.pty = spec.pty;
  command_row.state = "starting";
  command_row.created_at = Now();
  ASSIGN_OR_RETURN(command_row, store_.InsertCommand(command_row));
  request.seq = static_cast<uint64_t>(command_row.init_seq);
  auto fail = [&](Status status) {
    command_row.state = "exited";
    OutcomeEvidence evidence;
    evidence.setup_failed = true;
    evidence.setup_step = status.message();
    evidence.setup_errno = status.error_number();
    command_row.outcome_json = OutcomeToJson(ClassifyOutcome(evidence)).dump();
    command_row.ended_at = Now();
    (void)store_.UpdateCommand(command_row);
    return status;
  };
  auto fds = SendExec(live->control_fd(), request);
  if (!fds.ok()) return fail(fds.status());
  std::string sandbox_id = row.id;
  uint64_t seq = request.seq;
  auto command = std::make_shared<Command>(
      CommandContext(), command_row, live->control_fd(), std::move(*fds),
      [this, sandbox_id, seq](Command& finished) { OnCommandFinished(sandbox_id, seq, finished); });
  live->commands[seq] = command;
  commands_[command_row.id] = command;
  // Made while corral-init clones the child: it waits for us before it runs anything of the
  // command's, and without its cgroup it never does (the command ends as a setup failure).
  command->SetCgroup(host_.CreateCommandCgroup(row.id, request.seq));
  command->Start();
  Touch(row.id);
  return command;
}

void SandboxManager::OnCommandFinished(const std::string& sandbox_id, uint64_t seq, Command& finished) {
  auto live_it = live_.find(sandbox_id);
  if (live_it != live_.end()) live_it->second->commands.erase(seq);
  // Ended commands stay reachable for a while, for clients that attach late.
  auto self = commands_.find(finished.id());
  if (self != commands_.end()) {
    recent_[finished.id()] = self->second;
    recent_order_.push_back(finished.id());
    commands_.erase(self);
    while (recent_order_.size() > kRecentCommands) {
      recent_.erase(recent_order_.front());
      recent_order_.pop_front();
    }
  }
  Touch(sandbox_id);
}

StatusOr<std::shared_ptr<Command>> SandboxManager::FindCommand(const Caller& caller, const std::string& command_id) {
  std::shared_ptr<Command> command;
  if (auto it = commands_.find(command_id); it != commands_.end()) command = it->second;
  if (!command) {
    if (auto it = recent_.find(command_id); it != recent_.end()) command = it->second;
  }
  if (!command || (!caller.admin && (command->row().iss != caller.iss || command->row().sub != caller.sub))) {
    return NotFound("live command " + command_id);
  }
  return command;
}

StatusOr<CommandRow> SandboxManager::GetCommand(const Caller& caller, const std::string& sandbox_id,
                                                const std::string& command_id) {
  RETURN_IF_ERROR(Owned(caller, sandbox_id).status());
  if (!IsWellFormedId(command_id, "cmd")) return NotFound("command " + command_id);
  ASSIGN_OR_RETURN(std::optional<CommandRow> row, store_.GetCommand(command_id));
  if (!row || row->sandbox_id != sandbox_id) return NotFound("command " + command_id);
  return *row;
}

StatusOr<std::vector<CommandRow>> SandboxManager::ListCommands(const Caller& caller, const std::string& sandbox_id) {
  RETURN_IF_ERROR(Owned(caller, sandbox_id).status());
  return store_.ListCommands(sandbox_id, /*active_only=*/false, 1000);
}

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

Status SandboxManager::Recover() {
  ASSIGN_OR_RETURN(auto rows, store_.ListSandboxes());
  int adopted = 0, cleaned = 0;
  for (SandboxRow& row : rows) {
    if (row.state == "destroying" || row.state == "creating") {
      // Destroy half done, or a copy never acknowledged: finish the one, undo the other.
      RETURN_IF_ERROR(host_.Destroy(row.id));
      (void)store_.DeleteSandbox(row.id);
      ++cleaned;
      continue;
    }
    if (row.state == "stopped" || row.state == "created") continue;
    auto process = host_.Adopt(row.id, static_cast<pid_t>(row.init_pid), static_cast<uint64_t>(row.init_start_time));
    if (process.ok() && process->has_value() && row.state == "running") {
      // A snapshot may have frozen it when the previous daemon died.
      Status thawed = host_.Thaw(row.id);
      if (!thawed.ok()) LogWarn("recovery", "cannot thaw", {{"sandbox", row.id}, {"error", thawed.ToString()}});
      // Ask init what it still holds; it answers at once.
      auto hello = Hello((*process)->control.get(), kHelloTimeout, nullptr);
      if (!hello.ok()) {
        LogWarn("recovery", "corral-init did not answer hello", {{"sandbox", row.id}, {"error", hello.status().ToString()}});
        hello = InitHello{};
      }
      OnStarted(row, std::move(**process), std::move(hello->listeners));
      AdoptCommands(live_[row.id], std::move(hello->commands));
      ++adopted;
      continue;
    }
    if (!process.ok()) {
      LogWarn("recovery", "cannot adopt; stopping it", {{"sandbox", row.id}, {"error", process.status().ToString()}});
    }
    // Gone (or half started, or half stopped): finish the stop, with what its cgroups counted
    // read before they go (its last CPU time to the ledger, its commands' figures).
    SandboxProcess leftover;
    if (process.ok() && process->has_value()) leftover = std::move(**process);
    ASSIGN_OR_RETURN(auto commands, store_.ListCommands(row.id, /*active_only=*/true));
    std::vector<uint64_t> seqs;
    for (const CommandRow& command : commands) seqs.push_back(static_cast<uint64_t>(command.init_seq));
    StopFigures figures = KillAndRead(row.id, seqs);
    RETURN_IF_ERROR(host_.Stop(row.id, leftover.pidfd ? &leftover : nullptr));
    if (figures.sandbox.ok()) {
      Live gone;
      gone.id = row.id;
      gone.iss = row.iss;
      gone.sub = row.sub;
      gone.cpu_billed_usec = row.cpu_billed_usec;
      Meter(gone, *figures.sandbox);
      if (auto fresh = store_.GetSandbox(row.id); fresh.ok() && fresh->has_value()) row = **fresh;
    }
    for (size_t i = 0; i < commands.size(); ++i) StoreLost(commands[i], figures.commands[i]);
    row.init_pid = 0;
    row.init_start_time = 0;
    SetState(row, "stopped");
    ++cleaned;
  }
  // cgroups that belong to no running sandbox (a crash between mkdir and the row, or a stop
  // that did not finish) go too: those named like a sandbox. The parent may be shared ("corral"
  // also holds `corral run`'s runs and other daemons' parents, e.g. the tests').
  auto children = host_.backend().ListChildren(host_.cgroup_parent());
  if (children.ok()) {
    for (const std::string& child : *children) {
      const std::string id = child.substr(child.rfind('/') + 1);
      if (IsWellFormedId(id, "sb") && !live_.count(id)) (void)host_.backend().Destroy(child);
    }
  }
  // Under an older corrald's parent (corral/), only what bears the name of one of our sandboxes:
  // other programs may keep cgroups there (`corral run`, another corrald).
  std::set<std::string> known;
  for (const SandboxRow& row : rows) known.insert(row.id);
  for (const std::string& parent : host_.legacy_cgroup_parents()) {
    auto legacy = host_.backend().ListChildren(parent);
    if (!legacy.ok()) continue;
    for (const std::string& child : *legacy) {
      const std::string id = child.substr(child.rfind('/') + 1);
      if (known.count(id) && !live_.count(id)) (void)host_.backend().Destroy(child);
    }
    (void)host_.backend().RemoveIfEmpty(parent);
  }
  // Full-network links and filters of sandboxes that are not running (they died with the previous
  // daemon, or it died halfway through a stop).
  if (network_ != nullptr) {
    std::set<std::string> running;
    for (const auto& [id, live] : live_) running.insert(id);
    Status cleaned_network = network_->Cleanup(running);
    if (!cleaned_network.ok()) {
      LogWarn("recovery", "cannot clean up full-network leftovers", {{"error", cleaned_network.ToString()}});
    }
  }
  RemoveOrphanSnapshots();
  LogInfo("recovery", "done", {{"adopted", std::to_string(adopted)}, {"cleaned", std::to_string(cleaned)}});
  return Status();
}

void SandboxManager::AdoptCommands(const std::shared_ptr<Live>& live, std::map<uint64_t, HeldCommand> held) {
  const int fd = live->control_fd();
  auto rows = store_.ListCommands(live->id, /*active_only=*/true);
  if (!rows.ok()) return;
  for (CommandRow& row : *rows) {
    auto it = held.find(static_cast<uint64_t>(row.init_seq));
    if (it == held.end()) {
      StoreLost(row, host_.CommandCgroupStats(live->id, static_cast<uint64_t>(row.init_seq)));
      continue;
    }
    row.state = "running";
    uint64_t seq = it->first;
    std::string sandbox_id = live->id;
    auto command = std::make_shared<Command>(
        CommandContext(), row, fd, it->second.state, std::move(it->second.fds),
        [this, sandbox_id, seq](Command& finished) { OnCommandFinished(sandbox_id, seq, finished); });
    live->commands[seq] = command;
    commands_[row.id] = command;
    held.erase(it);
    command->Start();
  }
  // What init holds that the store does not know (a crash between the exec and its row): let
  // it go.
  for (auto& [seq, entry] : held) {
    if (entry.state.running) (void)SendSignal(fd, seq, SIGKILL);
    else (void)SendAck(fd, seq);
  }
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
  for (const auto& [id, live] : live_) {
    if (busy_[id] || !live->commands.empty()) continue;
    auto row = store_.GetSandbox(id);
    if (!row.ok() || !row->has_value()) continue;
    const SandboxRow& r = **row;
    const int64_t active_at = std::max(r.last_active_at, live->active_at);
    if (r.idle_timeout_s > 0 && now - active_at >= r.idle_timeout_s) idle.push_back(id);
  }
  for (const std::string& id : idle) {
    LogInfo("sandbox", "idle timeout: stopping", {{"sandbox", id}});
    busy_[id] = true;
    DoStop(id, /*by_request=*/false, [this, id](Status) {
      busy_.erase(id);
      (void)store_.AppendEvent(id, "sandbox.idle_stopped", "{}");
    });
  }
}

void SandboxManager::Meter(Live& live) {
  auto stats = host_.backend().Stats(host_.SandboxCgroup(live.id));
  if (!stats.ok()) return;  // gone already: nothing more to read
  Meter(live, *stats);
}

void SandboxManager::Meter(Live& live, const cgroups::CgroupStats& stats) {
  const int64_t usage = static_cast<int64_t>(stats.cpu_usage_usec);
  // Whole milliseconds; the rest waits for the next reading.
  const int64_t ms = (usage - live.cpu_billed_usec) / 1000;
  if (ms <= 0) return;
  LedgerRow debit;
  debit.iss = live.iss;
  debit.sub = live.sub;
  debit.kind = "compute";
  debit.amount = ms;
  debit.at = Now();
  debit.sandbox_id = live.id;
  const int64_t billed = live.cpu_billed_usec + ms * 1000;
  // The debit and the mark of what it covered are one transaction: a crash between them would
  // otherwise debit the same time twice, or never.
  Status stored = store_.InTransaction([&]() -> Status {
    ASSIGN_OR_RETURN(std::optional<SandboxRow> row, store_.GetSandbox(live.id));
    if (!row) return Status();
    RETURN_IF_ERROR(store_.AddLedger(debit).status());
    row->cpu_billed_usec = billed;
    return store_.UpdateSandbox(*row);
  });
  if (!stored.ok()) {
    LogError("sandbox", "cannot debit compute", {{"sandbox", live.id}, {"error", stored.ToString()}});
    return;
  }
  live.cpu_billed_usec = billed;
  compute_debited_ms_ += ms;
}

int64_t SandboxManager::UnmeteredMs(const Live& live) {
  auto usage = host_.backend().CpuUsageUsec(host_.SandboxCgroup(live.id));
  if (!usage.ok()) return 0;
  return std::max<int64_t>(static_cast<int64_t>(*usage) - live.cpu_billed_usec, 0) / 1000;
}

std::map<std::string, int64_t> SandboxManager::UnmeteredCompute(const std::string& iss, const std::string& sub) {
  std::map<std::string, int64_t> by_sandbox;
  for (const auto& [id, live] : live_) {
    if (live->iss != iss || live->sub != sub) continue;
    if (const int64_t ms = UnmeteredMs(*live); ms > 0) by_sandbox[id] = ms;
  }
  return by_sandbox;
}

int64_t SandboxManager::ComputeCountedMs() {
  int64_t total = compute_debited_ms_;
  for (const auto& [id, live] : live_) total += UnmeteredMs(*live);
  return total;
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

void SandboxManager::StoreLost(CommandRow& row, const StatusOr<cgroups::CgroupStats>& figures) {
  OutcomeEvidence evidence;
  evidence.lost = true;
  if (figures.ok()) {
    evidence.lost_with_stats = true;
    evidence.stats = *figures;
  }
  row.state = "exited";
  row.outcome_json = OutcomeToJson(ClassifyOutcome(evidence)).dump();
  row.ended_at = Now();
  (void)store_.UpdateCommand(row);
}

void SandboxManager::MeterCompute() {
  // Users over budget, each checked once per round.
  std::map<std::pair<std::string, std::string>, std::optional<std::pair<int64_t, int64_t>>> checked;
  std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> exhausted;
  for (auto& [id, live] : live_) {
    if (busy_[id] || live->exhausted || !live->control) continue;
    Meter(*live);
    if (!live->budget.compute_ms) continue;
    auto key = std::make_pair(live->iss, live->sub);
    auto it = checked.find(key);
    if (it == checked.end()) {
      std::optional<std::pair<int64_t, int64_t>> over;
      const WindowRange window = CurrentWindow(live->budget, Now());
      auto spent = store_.LedgerSum(live->iss, live->sub, "compute", window.start, window.end);
      if (spent.ok() && *spent >= *live->budget.compute_ms) over = std::make_pair(*spent, *live->budget.compute_ms);
      it = checked.emplace(key, over).first;
    }
    if (it->second) exhausted.push_back({id, *it->second});
  }
  for (const auto& [id, figures] : exhausted) ComputeExhausted(id, figures.first, figures.second);
}

void SandboxManager::ComputeExhausted(const std::string& id, int64_t spent_ms, int64_t budget_ms) {
  auto it = live_.find(id);
  if (it == live_.end() || busy_[id]) return;
  std::shared_ptr<Live> live = it->second;
  live->exhausted = true;
  busy_[id] = true;
  if (budget_observer_ != nullptr) budget_observer_->OnBudgetRefusal(BudgetRefusal::kComputeStop);
  LogInfo("sandbox", "compute budget spent: freezing and stopping",
          {{"sandbox", id}, {"spent_ms", std::to_string(spent_ms)}, {"budget_ms", std::to_string(budget_ms)}});
  (void)store_.AppendEvent(id, "sandbox.compute_exhausted",
                           nlohmann::json{{"spent_ms", spent_ms}, {"budget_ms", budget_ms}}.dump());
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

void SandboxManager::Detach() {
  detached_ = true;
  idle_timer_.cancel();
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
  for (const char* state : {"creating", "created", "starting", "running", "stopping", "stopped", "destroying"}) counts[state] = 0;
  auto rows = store_.ListSandboxes();
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
