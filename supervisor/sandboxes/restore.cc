// SandboxManager: a stopped sandbox's files replaced by a snapshot's (sandbox_manager.h Restore;
// a checkpoint's restore in place, supervisor/sessions/checkpoints.cc). The copy runs on the
// worker pool while the sandbox is busy, as a fork's does, into the sandbox's own layer.
#include <utility>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "supervisor/sandboxes/layer_owners.h"
#include "supervisor/sandboxes/sandbox_manager.h"

namespace corral::supervisor {

namespace asio = boost::asio;

void SandboxManager::Restore(const Caller& caller, const std::string& id, const std::string& snapshot_id,
                             Done<SandboxRow> done) {
  auto row = Owned(caller, id);
  if (!row.ok()) return done(row.status());
  auto snapshot = OwnedSnapshot(caller, snapshot_id);
  if (!snapshot.ok()) return done(snapshot.status());
  if (snapshot->image != row->image) {
    return done(Status::Error("snapshot " + snapshot_id + " is of image " + snapshot->image + ", sandbox " + id +
                                  " of " + row->image + ": its files are a layer over that image alone",
                              EINVAL));
  }
  if (busy_[id] || Busy(snapshot_id) || (row->state != "stopped" && row->state != "created")) {
    return done(Status::Error("sandbox " + id + " is " + row->state + ": a restore replaces a stopped sandbox's files",
                              EBUSY));
  }
  busy_[id] = true;
  asio::post(pool_, [this, row = *row, snapshot = *snapshot, done = std::move(done)]() mutable {
    Status restored = [&]() -> Status {
      // The snapshot's kind of layer (what is on disk), in the sandbox's place: the sandbox's
      // files go first (a restore discards them), then the copy, moved to its uid range.
      const WritableLayer from = host_.SnapshotLayer(snapshot.id, host_.new_layer_kind());
      RETURN_IF_ERROR(RemoveLayer(host_.SandboxLayer(row.id)));
      const WritableLayer layer = host_.SandboxLayer(row.id, from.kind);
      if (layer.kind == LayerKind::kQuotaDir) {
        RETURN_IF_ERROR(MakeLayer(layer, row.uid_base, row.limits.disk_bytes.value_or(0)));
      }
      RETURN_IF_ERROR(CopyLayer(from, layer));
      return ShiftLayerOwners(layer, config_.run_dir + "/layers", snapshot.uid_base, row.uid_base, kUidStep).status();
    }();
    // A copy that failed leaves no half of it: the next start gets an empty layer, and the
    // snapshot is there to restore again.
    if (!restored.ok()) (void)RemoveLayer(host_.SandboxLayer(row.id));
    asio::post(io_, [this, row = std::move(row), snapshot_id = snapshot.id, restored, done = std::move(done)]() mutable {
      busy_.erase(row.id);
      if (!restored.ok()) {
        LogError("sandbox", "restore failed", {{"sandbox", row.id}, {"snapshot", snapshot_id}, {"error", restored.ToString()}});
        return done(Status::Error("restoring " + snapshot_id + " into " + row.id + " failed (its files are gone; " +
                                      "restore again): " + restored.message(),
                                  EIO));
      }
      (void)store_.AppendEvent(row.id, "sandbox.restored", nlohmann::json{{"snapshot", snapshot_id}}.dump());
      LogInfo("sandbox", "restored", {{"sandbox", row.id}, {"snapshot", snapshot_id}});
      auto fresh = store_.GetSandbox(row.id);
      if (fresh.ok() && fresh->has_value()) return done(**fresh);
      done(row);
    });
  });
}

}  // namespace corral::supervisor
