// SandboxManager: stopped sandboxes moving between the nodes of a fleet (sandbox_manager.h; a
// drain that moves them: api/sandbox_mover.h). The files go as one tar (layer_move.h) in
// <state_dir>/moves/: <id>.out.tar on the node it leaves, <id>.in.tar on the node it moves to,
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

StatusOr<std::vector<SandboxRow>> SandboxManager::MovableSandboxes() {
  ASSIGN_OR_RETURN(std::vector<SandboxRow> rows, store_.ListNodeSandboxes());
  std::vector<SandboxRow> movable;
  for (SandboxRow& row : rows) {
    if (row.state == "stopped" && !Busy(row.id) && !live_.count(row.id)) movable.push_back(std::move(row));
  }
  return movable;
}

void SandboxManager::PackForMove(const std::string& id, Done<MovePack> done) {
  auto row = store_.GetSandbox(id);
  if (!row.ok()) return done(row.status());
  if (!row->has_value() || (*row)->node_id != store_.node_id()) return done(NotFound("sandbox " + id));
  if (Busy(id) || live_.count(id) || (*row)->state != "stopped") {
    return done(Status::Error("sandbox " + id + " is " + (*row)->state + ", not stopped", EBUSY));
  }
  MovePack pack;
  pack.sandbox_id = id;
  pack.path = MoveFile(id, true);
  pack.uid_base = (*row)->uid_base;
  pack.kind = host_.SandboxLayer(id).kind;
  busy_[id] = true;
  asio::post(pool_, [this, pack, done = std::move(done)]() mutable {
    StatusOr<PackedLayer> packed = PackLayer(host_.SandboxLayer(pack.sandbox_id), pack.path);
    asio::post(io_, [this, pack, packed, done = std::move(done)]() mutable {
      if (!packed.ok()) {
        busy_.erase(pack.sandbox_id);
        return done(packed.status());
      }
      pack.bytes = packed->bytes;
      pack.sha256 = packed->sha256;
      done(pack);
    });
  });
}

StatusOr<bool> SandboxManager::EndMoveOut(const MovePack& pack) {
  auto row = store_.GetSandbox(pack.sandbox_id);
  if (!row.ok()) return row.status();  // not known yet: the caller asks again
  (void)unlink(pack.path.c_str());
  busy_.erase(pack.sandbox_id);
  // Gone from the catalog too (taken, then destroyed there): not this node's either.
  const bool moved = !row->has_value() || (*row)->node_id != store_.node_id();
  if (!moved) return false;
  asio::post(pool_, [this, id = pack.sandbox_id] {
    Status removed = host_.Destroy(id);
    if (!removed.ok()) LogWarn("fleet", "cannot remove a moved sandbox's files", {{"sandbox", id}, {"error", removed.ToString()}});
  });
  return true;
}

void SandboxManager::ReceiveMoveData(const std::string& id, uint64_t offset, std::string data, Done<uint64_t> done) {
  if (!IsWellFormedId(id, "sb")) return done(NotFound("sandbox " + id));
  auto row = store_.GetSandbox(id);
  if (!row.ok()) return done(row.status());
  if (!row->has_value()) return done(NotFound("sandbox " + id));
  if ((*row)->node_id == store_.node_id()) {
    return done(Status::Error("sandbox " + id + " is on this node already", EEXIST));
  }
  if (Status open = TakesNewSandboxes(); !open.ok()) return done(open);
  if (Busy(id) || !receiving_.insert(id).second) {
    return done(Status::Error("sandbox " + id + " is moving here already", EBUSY));
  }
  asio::post(pool_, [this, id, offset, data = std::move(data), done = std::move(done)]() mutable {
    StatusOr<uint64_t> written = [&]() -> StatusOr<uint64_t> {
      const std::string path = MoveFile(id, false);
      RETURN_IF_ERROR(MakeDirs(config_.state_dir + "/moves", 0700));
      UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (offset == 0 ? O_TRUNC : 0), 0600));
      if (!fd) return ErrnoError("open " + path);
      struct stat st;
      if (fstat(fd.get(), &st) != 0) return ErrnoError("stat " + path);
      if (static_cast<uint64_t>(st.st_size) != offset) {
        return Status::Error("sandbox " + id + "'s move has " + std::to_string(st.st_size) + " bytes, not " +
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

void SandboxManager::AdoptMove(const std::string& id, const MoveManifest& manifest, Done<SandboxRow> done) {
  if (!IsWellFormedId(id, "sb")) return done(NotFound("sandbox " + id));
  auto stored = store_.GetSandbox(id);
  if (!stored.ok()) return done(stored.status());
  if (!stored->has_value()) return done(NotFound("sandbox " + id));
  SandboxRow row = **stored;
  if (row.node_id == store_.node_id()) return done(Status::Error("sandbox " + id + " is on this node already", EEXIST));
  if (row.node_id != manifest.from_node || row.state != "stopped") {
    return done(Status::Error("sandbox " + id + " is " + row.state + " on node " + row.node_id + ", not stopped on " +
                                  manifest.from_node,
                              EBUSY));
  }
  if (Status open = TakesNewSandboxes(); !open.ok()) return done(open);
  if (Busy(id) || receiving_.count(id)) return done(Status::Error("sandbox " + id + " is moving here already", EBUSY));
  // Its image's layers must be on this node already (each node has its own copies).
  StatusOr<std::vector<std::string>> layers = ImageLayersOf(row);
  if (!layers.ok()) return done(Status::Error("sandbox " + id + "'s image: " + layers.status().message(), EAGAIN));
  for (const std::string& dir : *layers) {
    struct stat st;
    if (stat(dir.c_str(), &st) != 0) {
      return done(Status::Error("sandbox " + id + "'s image " + row.image + " has no layers on this node", EAGAIN));
    }
  }
  auto uid_base = store_.FreeUidBase(kUidFirst, kUidStep, kUidSlots);
  if (!uid_base.ok()) return done(uid_base.status());
  busy_[id] = true;
  asio::post(pool_, [this, id, manifest, row, uid = *uid_base, done = std::move(done)]() mutable {
    Status made = [&]() -> Status {
      const std::string tar = MoveFile(id, false);
      struct stat st;
      if (stat(tar.c_str(), &st) != 0) return ErrnoError("stat " + tar);
      if (static_cast<uint64_t>(st.st_size) != manifest.bytes) {
        return Status::Error("sandbox " + id + "'s move has " + std::to_string(st.st_size) + " bytes, not " +
                                 std::to_string(manifest.bytes),
                             EBADMSG);
      }
      ASSIGN_OR_RETURN(std::string sha256, Sha256File(tar));
      if (sha256 != manifest.sha256) {
        return Status::Error("sandbox " + id + "'s move does not match its sha256 (" + sha256 + ")", EBADMSG);
      }
      RETURN_IF_ERROR(host_.Destroy(id));  // what an earlier move that failed here left
      const WritableLayer layer = host_.SandboxLayer(id, manifest.kind);
      if (layer.kind == LayerKind::kQuotaDir) RETURN_IF_ERROR(MakeLayer(layer, uid, row.limits.disk_bytes.value_or(0)));
      RETURN_IF_ERROR(UnpackLayer(tar, layer));
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
                               Done<SandboxRow> done) {
  StatusOr<bool> taken = store_.TakeSandbox(id, manifest.from_node, uid, Now());
  if (!taken.ok() && taken.status().error_number() == EEXIST && attempts > 1) {
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
    return FailAdopt(id,
                     Status::Error("sandbox " + id + " is no longer stopped on node " + manifest.from_node, EBUSY),
                     std::move(done));
  }
  busy_.erase(id);
  (void)unlink(MoveFile(id, false).c_str());  // the sandbox is this node's: its files stay (see recovery)
  auto row = store_.GetSandbox(id);
  (void)store_.AppendEvent(id, "sandbox.moved",
                           nlohmann::json{{"from", manifest.from_node}, {"to", store_.node_id()}}.dump());
  LogInfo("fleet", "sandbox moved here", {{"sandbox", id}, {"from", manifest.from_node}, {"uid_base", std::to_string(uid)}});
  if (!row.ok() || !row->has_value()) return done(row.ok() ? NotFound("sandbox " + id) : row.status());
  done(**row);
}

void SandboxManager::FailAdopt(const std::string& id, const Status& why, Done<SandboxRow> done) {
  LogWarn("fleet", "a sandbox's move here failed", {{"sandbox", id}, {"error", why.ToString()}});
  asio::post(pool_, [this, id, why, done = std::move(done)]() mutable {
    (void)unlink(MoveFile(id, false).c_str());
    Status removed = host_.Destroy(id);
    if (!removed.ok()) LogWarn("fleet", "cannot remove a failed move's files", {{"sandbox", id}, {"error", removed.ToString()}});
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
    if (IsWellFormedId(id, "sb") && (name == id + ".out.tar" || name == id + ".in.tar")) {
      auto row = store_.GetSandbox(id);
      if (!row.ok()) return;
      const bool here = row->has_value() && (*row)->node_id == store_.node_id();
      if (!here) {
        LogInfo("recovery", "removing the files of a sandbox that is not this node's",
                {{"sandbox", id}, {"move", name}});
        Status removed = host_.Destroy(id);
        if (!removed.ok()) {
          LogWarn("recovery", "cannot remove", {{"sandbox", id}, {"error", removed.ToString()}});
          continue;
        }
      }
    }
    (void)unlink((dir + "/" + name).c_str());
  }
}

}  // namespace corral::supervisor
