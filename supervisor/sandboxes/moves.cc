// SandboxManager: stopped sandboxes, and snapshots, moving between the nodes of a fleet
// (sandbox_manager.h; a drain that moves them: api/sandbox_mover.h). A snapshot moves as a
// sandbox does, but keeps its files' owners (its row says whose they are) and has no state.
// The files go as one tar (layer_move.h) in <state_dir>/moves/: <id>.out.tar on the node it leaves, <id>.in.tar on the node it moves to,
// which unpacks it into a layer of its own, moves its owners to a free uid range of its own, and
// only then takes the row (store.h TakeSandbox): until that one transaction the sandbox is the
// first node's, whole; after it, the second's. A crash on either side before it leaves the
// sandbox where it was (recovery removes the half-made copy); after it, the first node removes
// its old files when it learns (EndMoveOut, or its recovery).
#include "supervisor/sandboxes/sandbox_manager.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <set>
#include <utility>
#include <vector>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/log.h"
#include "common/sha256.h"
#include "supervisor/ids.h"
#include "supervisor/sandboxes/layer_move.h"
#include "supervisor/sandboxes/layer_owners.h"

namespace corral::supervisor {

namespace asio = boost::asio;

namespace {

// A uid range taken between FreeUidBase and TakeSandbox (a create here meanwhile) is picked again.
constexpr int kTakeAttempts = 5;

bool IsSnapshotId(const std::string& id) { return IsWellFormedId(id, "snap"); }

// The snapshots sandboxes are being made of here (their files are being copied); none begins on
// a drained node.
std::set<std::string> SnapshotsBeingCopied(const std::vector<SandboxRow>& sandboxes) {
  std::set<std::string> copied;
  for (const SandboxRow& row : sandboxes) {
    if (row.state == "creating" && !row.source.empty()) copied.insert(row.source);
  }
  return copied;
}

}  // namespace

const char* LayerKindName(LayerKind kind) { return kind == LayerKind::kImage ? "image" : "quota_dir"; }

StatusOr<LayerKind> LayerKindNamed(const std::string& name) {
  if (name == "image") return LayerKind::kImage;
  if (name == "quota_dir") return LayerKind::kQuotaDir;
  return Status::Error("no layer kind " + name + " (image or quota_dir)", EINVAL);
}

std::string SandboxManager::MoveFile(const std::string& id, bool out) const {
  return config_.state_dir + "/moves/" + id + (out ? ".out.tar" : ".in.tar");
}

bool SandboxManager::Busy(const std::string& id) const {
  auto it = busy_.find(id);
  return it != busy_.end() && it->second;
}

StatusOr<std::optional<std::string>> SandboxManager::NodeOfMoving(const std::string& id) {
  if (IsSnapshotId(id)) {
    ASSIGN_OR_RETURN(std::optional<SnapshotRow> row, store_.GetSnapshot(id));
    return row ? std::optional<std::string>(row->node_id) : std::nullopt;
  }
  ASSIGN_OR_RETURN(std::optional<SandboxRow> row, store_.GetSandbox(id));
  return row ? std::optional<std::string>(row->node_id) : std::nullopt;
}

WritableLayer SandboxManager::MovingLayer(const std::string& id, std::optional<LayerKind> kind) const {
  if (IsSnapshotId(id)) return host_.SnapshotLayer(id, kind.value_or(LayerKind::kImage));
  return host_.SandboxLayer(id, kind);
}

Status SandboxManager::RemoveMovingFiles(const std::string& id) {
  if (IsSnapshotId(id)) return RemoveLayer(host_.SnapshotLayer(id, LayerKind::kImage));  // the one on disk
  return host_.Destroy(id);
}

bool SandboxManager::SnapshotInUse(const std::string& id) const {
  if (Busy(id)) return true;  // moving
  auto rows = store_.ListNodeSandboxes();
  return !rows.ok() || SnapshotsBeingCopied(*rows).count(id) != 0;
}

StatusOr<std::vector<std::string>> SandboxManager::Movable() {
  ASSIGN_OR_RETURN(std::vector<SandboxRow> sandboxes, store_.ListNodeSandboxes());
  ASSIGN_OR_RETURN(std::vector<SnapshotRow> snapshots, store_.ListNodeSnapshots());
  const std::set<std::string> copied = SnapshotsBeingCopied(sandboxes);
  std::vector<std::string> movable;
  for (const SandboxRow& row : sandboxes) {
    if (row.state == "stopped" && !Busy(row.id) && !live_.count(row.id)) movable.push_back(row.id);
  }
  for (const SnapshotRow& row : snapshots) {
    if (!Busy(row.id) && !copied.count(row.id)) movable.push_back(row.id);
  }
  return movable;
}

void SandboxManager::PackForMove(const std::string& id, Done<MovePack> done) {
  MovePack pack;
  pack.id = id;
  pack.path = MoveFile(id, true);
  if (IsSnapshotId(id)) {
    auto row = store_.GetSnapshot(id);
    if (!row.ok()) return done(row.status());
    if (!row->has_value() || (*row)->node_id != store_.node_id()) return done(NotFound("snapshot " + id));
    if (SnapshotInUse(id)) return done(Status::Error("snapshot " + id + " is in use", EBUSY));
    pack.uid_base = (*row)->uid_base;
  } else {
    auto row = store_.GetSandbox(id);
    if (!row.ok()) return done(row.status());
    if (!row->has_value() || (*row)->node_id != store_.node_id()) return done(NotFound("sandbox " + id));
    if (Busy(id) || live_.count(id) || (*row)->state != "stopped") {
      return done(Status::Error("sandbox " + id + " is " + (*row)->state + ", not stopped", EBUSY));
    }
    pack.uid_base = (*row)->uid_base;
  }
  pack.kind = MovingLayer(id).kind;
  busy_[id] = true;
  asio::post(pool_, [this, pack, done = std::move(done)]() mutable {
    StatusOr<PackedLayer> packed = PackLayer(MovingLayer(pack.id), pack.path);
    asio::post(io_, [this, pack, packed, done = std::move(done)]() mutable {
      if (!packed.ok()) {
        busy_.erase(pack.id);
        return done(packed.status());
      }
      pack.bytes = packed->bytes;
      pack.sha256 = packed->sha256;
      done(pack);
    });
  });
}

StatusOr<bool> SandboxManager::EndMoveOut(const MovePack& pack) {
  auto node = NodeOfMoving(pack.id);
  if (!node.ok()) return node.status();  // not known yet: the caller asks again
  (void)unlink(pack.path.c_str());
  busy_.erase(pack.id);
  // Gone from the catalog too (taken, then destroyed there): not this node's either.
  const bool moved = !node->has_value() || **node != store_.node_id();
  if (!moved) return false;
  asio::post(pool_, [this, id = pack.id] {
    Status removed = RemoveMovingFiles(id);
    if (!removed.ok()) LogWarn("fleet", "cannot remove what moved away", {{"id", id}, {"error", removed.ToString()}});
  });
  return true;
}

void SandboxManager::ReceiveMoveData(const std::string& id, uint64_t offset, const std::string& sha256,
                                     std::string data, Done<uint64_t> done) {
  if (!IsWellFormedId(id, "sb") && !IsSnapshotId(id)) return done(NotFound(id));
  auto node = NodeOfMoving(id);
  if (!node.ok()) return done(node.status());
  if (!node->has_value()) return done(NotFound(id));
  if (**node == store_.node_id()) return done(Status::Error(id + " is on this node already", EEXIST));
  if (Status open = TakesNewSandboxes(); !open.ok()) return done(open);
  if (Busy(id) || !receiving_.insert(id).second) return done(Status::Error(id + " is moving here already", EBUSY));
  asio::post(pool_, [this, id, offset, sha256, data = std::move(data), done = std::move(done)]() mutable {
    StatusOr<uint64_t> written = [&]() -> StatusOr<uint64_t> {
      if (Sha256Hex(data) != sha256) {
        return Status::Error(id + "'s part at " + std::to_string(offset) + " does not match its sha256", EINVAL);
      }
      const std::string path = MoveFile(id, false);
      RETURN_IF_ERROR(MakeDirs(config_.state_dir + "/moves", 0700));
      UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (offset == 0 ? O_TRUNC : 0), 0600));
      if (!fd) return ErrnoError("open " + path);
      struct stat st;
      if (fstat(fd.get(), &st) != 0) return ErrnoError("stat " + path);
      if (static_cast<uint64_t>(st.st_size) != offset) {
        return Status::Error(id + "'s move has " + std::to_string(st.st_size) + " bytes, not " +
                                 std::to_string(offset),
                             ERANGE);
      }
      size_t done_bytes = 0;
      while (done_bytes < data.size()) {
        const ssize_t n = pwrite(fd.get(), data.data() + done_bytes, data.size() - done_bytes,
                                 static_cast<off_t>(offset + done_bytes));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return ErrnoError("write " + path);
        done_bytes += static_cast<size_t>(n);
      }
      return offset + data.size();
    }();
    asio::post(io_, [this, id, written, done = std::move(done)] {
      receiving_.erase(id);
      done(written);
    });
  });
}

// Whether `row`'s image (as a sandbox or snapshot names it) has its layers on this node.
Status SandboxManager::ImageHere(const std::string& id, const std::string& image) const {
  SandboxRow of;
  of.id = id;
  of.image = image;
  StatusOr<std::vector<std::string>> layers = ImageLayersOf(of);
  if (!layers.ok()) return Status::Error(id + "'s image: " + layers.status().message(), EAGAIN);
  for (const std::string& dir : *layers) {
    struct stat st;
    if (stat(dir.c_str(), &st) != 0) return Status::Error(id + "'s image " + image + " has no layers on this node", EAGAIN);
  }
  return Status();
}

void SandboxManager::AdoptMove(const std::string& id, const MoveManifest& manifest, Done<Moved> done) {
  const bool snapshot = IsSnapshotId(id);
  if (!IsWellFormedId(id, "sb") && !snapshot) return done(NotFound(id));
  std::string node, image, state = "stopped";
  int64_t disk_bytes = 0;
  if (snapshot) {
    auto row = store_.GetSnapshot(id);
    if (!row.ok()) return done(row.status());
    if (!row->has_value()) return done(NotFound("snapshot " + id));
    node = (*row)->node_id;
    image = (*row)->image;
  } else {
    auto row = store_.GetSandbox(id);
    if (!row.ok()) return done(row.status());
    if (!row->has_value()) return done(NotFound("sandbox " + id));
    node = (*row)->node_id;
    image = (*row)->image;
    state = (*row)->state;
    disk_bytes = static_cast<int64_t>((*row)->limits.disk_bytes.value_or(0));
  }
  if (node == store_.node_id()) return done(Status::Error(id + " is on this node already", EEXIST));
  if (node != manifest.from_node || state != "stopped") {
    return done(Status::Error(id + " is " + state + " on node " + node + ", not stopped on " + manifest.from_node, EBUSY));
  }
  if (Status open = TakesNewSandboxes(); !open.ok()) return done(open);
  if (Busy(id) || receiving_.count(id)) return done(Status::Error(id + " is moving here already", EBUSY));
  // Its image's layers must be on this node already (each node has its own copies).
  if (Status here = ImageHere(id, image); !here.ok()) return done(here);
  // A sandbox's files move to a free uid range of this node; a snapshot's keep their owners.
  int64_t uid = manifest.uid_base;
  if (!snapshot) {
    auto free = store_.FreeUidBase(kUidFirst, kUidStep, kUidSlots);
    if (!free.ok()) return done(free.status());
    uid = *free;
  }
  busy_[id] = true;
  asio::post(pool_, [this, id, snapshot, manifest, uid, disk_bytes, done = std::move(done)]() mutable {
    Status made = [&]() -> Status {
      const std::string tar = MoveFile(id, false);
      struct stat st;
      if (stat(tar.c_str(), &st) != 0) return ErrnoError("stat " + tar);
      if (static_cast<uint64_t>(st.st_size) != manifest.bytes) {
        return Status::Error(id + "'s move has " + std::to_string(st.st_size) + " bytes, not " +
                                 std::to_string(manifest.bytes),
                             EINVAL);
      }
      ASSIGN_OR_RETURN(std::string sha256, Sha256File(tar));
      if (sha256 != manifest.sha256) return Status::Error(id + "'s move does not match its sha256 (" + sha256 + ")", EINVAL);
      RETURN_IF_ERROR(RemoveMovingFiles(id));  // what an earlier move that failed here left
      const WritableLayer layer = MovingLayer(id, manifest.kind);
      if (layer.kind == LayerKind::kQuotaDir) {
        // A sandbox's is charged to its project; a snapshot's is a plain directory (as a copy is).
        RETURN_IF_ERROR(snapshot ? MakeDirs(layer.path, 0700)
                                 : MakeLayer(layer, uid, static_cast<uint64_t>(disk_bytes)));
      }
      RETURN_IF_ERROR(UnpackLayer(tar, layer));
      if (snapshot) return Status();
      ASSIGN_OR_RETURN(ShiftCounts shifted,
                       ShiftLayerOwners(layer, config_.run_dir + "/layers", manifest.uid_base, uid, kUidStep));
      LogInfo("fleet", "moved layer unpacked",
              {{"sandbox", id}, {"from", manifest.from_node}, {"inodes", std::to_string(shifted.inodes)}});
      return Status();
    }();
    asio::post(io_, [this, id, manifest, uid, made, done = std::move(done)]() mutable {
      if (!made.ok()) return FailAdopt(id, made, std::move(done));
      TakeMoved(id, manifest, uid, kTakeAttempts, std::move(done));
    });
  });
}

void SandboxManager::TakeMoved(const std::string& id, const MoveManifest& manifest, int64_t uid, int attempts,
                               Done<Moved> done) {
  const bool snapshot = IsSnapshotId(id);
  StatusOr<bool> taken =
      snapshot ? store_.TakeSnapshot(id, manifest.from_node) : store_.TakeSandbox(id, manifest.from_node, uid, Now());
  if (!taken.ok() && taken.status().error_number() == EEXIST && !snapshot && attempts > 1) {
    // The range went to a sandbox made here meanwhile: another, and the files moved to it.
    auto next = store_.FreeUidBase(kUidFirst, kUidStep, kUidSlots);
    if (!next.ok()) return FailAdopt(id, next.status(), std::move(done));
    asio::post(pool_, [this, id, manifest, uid, next = *next, attempts, done = std::move(done)]() mutable {
      auto shifted = ShiftLayerOwners(host_.SandboxLayer(id), config_.run_dir + "/layers", uid, next, kUidStep);
      asio::post(io_, [this, id, manifest, next, attempts, ok = shifted.status(), done = std::move(done)]() mutable {
        if (!ok.ok()) return FailAdopt(id, ok, std::move(done));
        TakeMoved(id, manifest, next, attempts - 1, std::move(done));
      });
    });
    return;
  }
  if (!taken.ok()) return FailAdopt(id, taken.status(), std::move(done));
  if (!*taken) {
    return FailAdopt(id, Status::Error(id + " is no longer " + (snapshot ? "" : "stopped ") + "on node " + manifest.from_node,
                                       EBUSY),
                     std::move(done));
  }
  busy_.erase(id);
  (void)unlink(MoveFile(id, false).c_str());  // this node's now: its files stay (see recovery)
  if (!snapshot) {
    (void)store_.AppendEvent(id, "sandbox.moved",
                             nlohmann::json{{"from", manifest.from_node}, {"to", store_.node_id()}}.dump());
  }
  LogInfo("fleet", snapshot ? "snapshot moved here" : "sandbox moved here",
          {{"id", id}, {"from", manifest.from_node}, {"uid_base", std::to_string(uid)}});
  done(Moved{id, store_.node_id(), uid});
}

void SandboxManager::FailAdopt(const std::string& id, const Status& why, Done<Moved> done) {
  LogWarn("fleet", "a move here failed", {{"id", id}, {"error", why.ToString()}});
  asio::post(pool_, [this, id, why, done = std::move(done)]() mutable {
    (void)unlink(MoveFile(id, false).c_str());
    Status removed = RemoveMovingFiles(id);
    if (!removed.ok()) LogWarn("fleet", "cannot remove a failed move's files", {{"id", id}, {"error", removed.ToString()}});
    asio::post(io_, [this, id, why, done = std::move(done)] {
      busy_.erase(id);
      done(why);
    });
  });
}

// At start, before any move, what the previous daemon's moves left in <state_dir>/moves/, by
// where the catalog has the sandbox now:
//   <id>.out.tar (moving away): on another node (or gone), its files here go; else they stay.
//   <id>.in.tar (moving here, the tar kept until the row is taken): on another node, the copy
//   here never became this node's and goes; this node's: the move was done, the files stay.
// A store that cannot be read leaves everything for the next start.
void SandboxManager::RemoveMoveLeftovers() {
  const std::string dir = config_.state_dir + "/moves";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  std::vector<std::string> names;
  while (struct dirent* entry = readdir(d)) names.emplace_back(entry->d_name);
  closedir(d);
  for (const std::string& name : names) {
    if (name == "." || name == "..") continue;
    const size_t dot = name.find('.');
    const std::string id = name.substr(0, dot);
    if ((IsWellFormedId(id, "sb") || IsSnapshotId(id)) && (name == id + ".out.tar" || name == id + ".in.tar")) {
      auto node = NodeOfMoving(id);
      if (!node.ok()) return;
      const bool here = node->has_value() && **node == store_.node_id();
      if (!here) {
        LogInfo("recovery", "removing the files of what is not this node's", {{"id", id}, {"move", name}});
        Status removed = RemoveMovingFiles(id);
        if (!removed.ok()) {
          LogWarn("recovery", "cannot remove", {{"id", id}, {"error", removed.ToString()}});
          continue;
        }
      }
    }
    (void)unlink((dir + "/" + name).c_str());
  }
}

}  // namespace corral::supervisor
