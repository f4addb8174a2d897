// SandboxManager: snapshots and forks (sandbox_manager.h). A snapshot is a copy of a sandbox's
// writable layer in <state_dir>/snapshots/<id>.img (or <id>.layer/, writable_layer.h); a fork is
// a new sandbox whose layer is a copy of another's. The copies run on the worker pool, the source
// frozen while it runs.
#include "supervisor/sandboxes/sandbox_manager.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/log.h"
#include "supervisor/ids.h"
#include "supervisor/sandboxes/layer_owners.h"

namespace corral::supervisor {

namespace asio = boost::asio;

StatusOr<SnapshotRow> SandboxManager::OwnedSnapshot(const Caller& caller, const std::string& id) {
  if (!IsWellFormedId(id, "snap")) return NotFound("snapshot " + id);
  ASSIGN_OR_RETURN(std::optional<SnapshotRow> row, store_.GetSnapshot(id));
  if (!row || (!caller.admin && (row->iss != caller.iss || row->sub != caller.sub))) {
    return NotFound("snapshot " + id);
  }
  RETURN_IF_ERROR(OnThisNode("snapshot " + id, row->node_id));
  return *row;
}

// The copy (and the move to the new uid range) runs on the worker pool while the new sandbox is
// `creating` and busy; the request is answered once it is `created` (or running). A daemon that
// dies meanwhile never answered, and recovery removes the half-made sandbox.
void SandboxManager::FillLayer(SandboxRow row, LayerSource source, bool start, Done<SandboxRow> done) {
  busy_[row.id] = true;
  asio::post(pool_, [this, row, source, start, done = std::move(done)]() mutable {
    Status filled = [&]() -> Status {
      // The copy is of the source's kind (a snapshot taken before the host's kind changed keeps
      // its own); a project-quota directory is made with the new sandbox's project and cap
      // first, so that everything copied in is charged to it.
      WritableLayer from;
      if (!source.snapshot_id.empty()) {
        from = host_.SnapshotLayer(source.snapshot_id, host_.new_layer_kind());
      } else {
        if (!source.sandbox_spec) return Status::Error("no spec of sandbox " + source.sandbox_id, EINVAL);
        RETURN_IF_ERROR(host_.Prepare(*source.sandbox_spec));
        from = host_.SandboxLayer(source.sandbox_id);
      }
      const WritableLayer layer = host_.SandboxLayer(row.id, from.kind);
      if (layer.kind == LayerKind::kQuotaDir) {
        RETURN_IF_ERROR(MakeLayer(layer, row.uid_base, row.limits.disk_bytes.value_or(0)));
      }
      if (!source.snapshot_id.empty()) {
        RETURN_IF_ERROR(CopyLayer(from, layer));
      } else {
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
      AppendLifecycle(row, WebhookEventType::kSandboxCreated, nlohmann::json{{"source", from}}.dump());
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
  snapshot.image_name = row->image_name;
  snapshot.uid_base = row->uid_base;
  snapshot.limits = row->limits;
  pid_t pid = 0;
  if (auto it = live_.find(id); it != live_.end()) pid = it->second->process.pid;
  StatusOr<isolation::SandboxSpec> spec = SpecOf(*row);
  busy_[id] = true;
  asio::post(pool_, [this, snapshot, spec, pid, done = std::move(done)]() mutable {
    const WritableLayer layer = host_.SnapshotLayer(snapshot.id, host_.SandboxLayer(snapshot.sandbox_id).kind);
    Status copied = spec.ok() ? host_.Prepare(*spec) : spec.status();
    if (copied.ok()) copied = host_.CopySandboxLayer(snapshot.sandbox_id, pid, layer);
    if (copied.ok()) {
      auto bytes = LayerDiskBytes(layer);
      if (bytes.ok()) snapshot.bytes = static_cast<int64_t>(*bytes);
    }
    asio::post(io_, [this, snapshot, copied, layer, done = std::move(done)]() mutable {
      busy_.erase(snapshot.sandbox_id);
      if (!copied.ok()) {
        LogError("sandbox", "snapshot failed", {{"sandbox", snapshot.sandbox_id}, {"error", copied.ToString()}});
        (void)RemoveLayer(layer);
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
        (void)RemoveLayer(layer);
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
  if (Status named = CheckSandboxName(request.name); !named.ok()) return done(named);
  if (Status open = TakesNewSandboxes(); !open.ok()) return done(open);
  if (busy_[id] || (source->state != "running" && source->state != "stopped" && source->state != "created")) {
    return done(Status::Error("sandbox " + id + " is " + source->state, EBUSY));
  }
  // The source's limits, held against what this token allows now.
  auto limits = admission_.Limits(caps, source->limits);
  if (!limits.ok()) return done(limits.status());
  auto idle = admission_.IdleTimeout(caps, static_cast<uint64_t>(source->idle_timeout_s));
  if (!idle.ok()) return done(idle.status());
  // The source's egress rules too, held against what this token allows now.
  auto egress = admission_.EgressRulesFor(
      caps, source->egress ? std::optional(EgressRulesChange::Whole(*source->egress)) : std::nullopt);
  if (!egress.ok()) return done(egress.status());
  // And its network mode, if this token may still have it.
  Status allowed = Admission::CheckNetwork(caller, caps, source->network, network_ != nullptr);
  if (!allowed.ok()) return done(allowed);

  SandboxRow row;
  row.id = NewId("sb");
  row.iss = source->iss;
  row.sub = source->sub;
  row.name = request.name.empty() ? source->name : request.name;
  row.image = source->image;
  row.image_name = source->image_name;
  row.state = "creating";
  row.source = source->id;
  row.limits = *limits;
  row.idle_timeout_s = static_cast<int64_t>(*idle);
  row.egress = *egress;
  row.network = source->network;
  row.secrets = source->secrets;  // the same user's: the names go with the copy
  row.created_at = row.updated_at = row.last_active_at = Now();
  auto created = admission_.Insert(caller, caps, row);
  if (!created.ok()) return done(created.status());

  LayerSource from;
  from.sandbox_id = source->id;
  auto source_spec = SpecOf(*source);
  if (source_spec.ok()) from.sandbox_spec = std::move(*source_spec);
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
  if (Busy(id)) return done(Status::Error("snapshot " + id + " is moving to another node", EBUSY));
  // The row goes first: a daemon that dies before the file is gone leaves an orphan file, which
  // recovery removes, never a row without its file.
  Status deleted = store_.DeleteSnapshot(id);
  if (!deleted.ok()) return done(deleted);
  LogInfo("sandbox", "snapshot deleted", {{"snapshot", id}});
  asio::post(pool_, [this, id, done = std::move(done)]() mutable {
    Status removed = RemoveLayer(host_.SnapshotLayer(id, LayerKind::kImage));
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
    bool keep = false;
    for (const std::string suffix : {".img", ".layer"}) {
      if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        auto row = store_.GetSnapshot(name.substr(0, name.size() - suffix.size()));
        keep = !row.ok() || row->has_value();  // a store error keeps the file
      }
    }
    if (!keep) {
      // An orphan, or a copy a crash left half made (<id>.img.partial, <id>.layer.partial).
      LogInfo("recovery", "removing an orphan snapshot file", {{"file", name}});
      struct stat st;
      if (fstatat(dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
        (void)RemoveTreeUnder(dirfd(d), name);
      } else {
        unlinkat(dirfd(d), name.c_str(), 0);
      }
    }
  }
  closedir(d);
}

}  // namespace corral::supervisor
