#include "api/sandbox_mover.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <utility>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "api/protocol_json.h"
#include "common/log.h"
#include "common/sha256.h"
#include "common/unique_fd.h"

namespace corral::api {
namespace {

constexpr char kFleetLog[] = "fleet";

std::string MoveTarget(const std::string& id) { return "/v1/internal/moves/" + id; }

// A part of the tar, from `offset`: at most `max` bytes.
StatusOr<std::string> ReadPart(const std::string& path, uint64_t offset, size_t max) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + path);
  std::string part(max, '\0');
  size_t got = 0;
  while (got < max) {
    const ssize_t n = pread(fd.get(), part.data() + got, max - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("read " + path);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  part.resize(got);
  return part;
}

// The answer's error as a status (the other node's words, for the log).
Status AnswerError(const HttpResponse& response) {
  std::string message = response.body;
  try {
    message = nlohmann::json::parse(response.body).at("error").at("message").get<std::string>();
  } catch (const std::exception&) {
  }
  return Status::Error("HTTP " + std::to_string(response.status) + ": " + message, EIO);
}

}  // namespace

SandboxMover::SandboxMover(boost::asio::io_context& io, boost::asio::thread_pool& pool,
                           supervisor::SandboxManager& manager, supervisor::NodeRegistry& nodes,
                           supervisor::FleetRouter& router, PeerHttp* peers)
    : io_(io), pool_(pool), manager_(manager), nodes_(nodes), router_(router), peers_(peers), timer_(io) {}

void SandboxMover::Start() {
  if (peers_ == nullptr) return;
  stopped_ = false;
  Arm(kRound);
}

void SandboxMover::Stop() {
  stopped_ = true;
  timer_.cancel();
}

void SandboxMover::Arm(std::chrono::milliseconds delay) {
  if (stopped_) return;
  timer_.expires_after(delay);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec && !stopped_) Round();
  });
}

void SandboxMover::Round() {
  if (!nodes_.moving_out()) return Arm(kRound);
  auto movable = manager_.Movable();
  if (!movable.ok()) {
    LogWarn(kFleetLog, "cannot list what to move", {{"error", movable.status().ToString()}});
    return Arm(kRound);
  }
  const auto now = std::chrono::steady_clock::now();
  std::string next;
  for (const std::string& id : *movable) {
    auto failed = failed_.find(id);
    if (failed == failed_.end() || failed->second <= now) {
      next = id;
      break;
    }
  }
  if (next.empty()) return Arm(kRound);
  StatusOr<supervisor::FleetTarget> to = router_.Place("");
  if (!to.ok() || to->here) {
    LogWarn(kFleetLog, "no node to move to",
            {{"id", next}, {"error", to.ok() ? "this node is open again" : to.status().ToString()}});
    return Arm(kRetryAfter);
  }
  Move move;
  move.to = *to;
  move.began = now;
  manager_.PackForMove(next, [this, move = std::move(move), id = next](StatusOr<supervisor::MovePack> pack) mutable {
    if (stopped_) {
      if (pack.ok()) (void)manager_.EndMoveOut(*pack);
      return;
    }
    if (!pack.ok()) {
      LogWarn(kFleetLog, "cannot pack what was to move", {{"id", id}, {"error", pack.status().ToString()}});
      failed_[id] = std::chrono::steady_clock::now() + kRetryAfter;
      return Arm(kRound);
    }
    move.pack = std::move(*pack);
    SendPart(std::move(move));
  });
}

void SandboxMover::SendPart(Move move) {
  if (stopped_) return Finish(std::move(move), Status::Error("corrald is stopping", ECANCELED));
  if (move.offset >= move.pack.bytes) return Commit(std::move(move));
  // Read and hashed on the worker pool: 8 MiB of SHA-256 is tens of milliseconds of the loop.
  boost::asio::post(pool_, [this, move = std::move(move)]() mutable {
    StatusOr<std::string> part = ReadPart(move.pack.path, move.offset, kPartBytes);
    std::string sha256 = part.ok() ? Sha256Hex(*part) : "";
    boost::asio::post(io_, [this, move = std::move(move), part = std::move(part), sha256]() mutable {
      if (!part.ok()) return Finish(std::move(move), part.status());
      if (part->empty()) return Finish(std::move(move), Status::Error(move.pack.path + " is shorter than it was", EIO));
      HttpRequest request;
      request.method = "PUT";
      request.target = MoveTarget(move.pack.id) + "?offset=" + std::to_string(move.offset) + "&sha256=" + sha256;
      request.headers["content-type"] = "application/octet-stream";
      const size_t size = part->size();
      request.body = std::move(*part);
      const std::string node = move.to.node_id, address = move.to.address;
      peers_->Forward(node, address, request, [this, move = std::move(move), size](HttpResponse response) mutable {
        if (response.status != 200) return Finish(std::move(move), AnswerError(response));
        move.offset += size;
        SendPart(std::move(move));
      });
    });
  });
}

void SandboxMover::Commit(Move move) {
  HttpRequest request;
  request.method = "POST";
  request.target = MoveTarget(move.pack.id) + "?bytes=" + std::to_string(move.pack.bytes) +
                   "&sha256=" + move.pack.sha256 + "&kind=" + supervisor::LayerKindName(move.pack.kind) +
                   "&uid_base=" + std::to_string(move.pack.uid_base);
  const std::string node = move.to.node_id, address = move.to.address;
  peers_->Forward(node, address, request, [this, move = std::move(move)](HttpResponse response) mutable {
    Finish(std::move(move), response.status == 200 ? Status() : AnswerError(response));
  });
}

void SandboxMover::Finish(Move move, const Status& why) {
  StatusOr<bool> moved = manager_.EndMoveOut(move.pack);
  if (!moved.ok()) {
    // The catalog cannot be read: whether the other node took it is not known yet.
    LogWarn(kFleetLog, "cannot tell whether it moved; asking again", {{"id", move.pack.id},
                                                                        {"error", moved.status().ToString()}});
    auto retry = std::make_shared<boost::asio::steady_timer>(io_, kRound);
    retry->async_wait([this, retry, move = std::move(move), why](boost::system::error_code) mutable {
      Finish(std::move(move), why);  // also when stopping: the sandbox is not left busy
    });
    return;
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - move.began);
  if (*moved) {
    failed_.erase(move.pack.id);
    LogInfo(kFleetLog, "moved",
            {{"id", move.pack.id}, {"to", move.to.node_id}, {"bytes", std::to_string(move.pack.bytes)},
             {"ms", std::to_string(ms.count())}});
    return Arm(std::chrono::milliseconds(0));  // the next one at once
  }
  failed_[move.pack.id] = std::chrono::steady_clock::now() + kRetryAfter;
  LogWarn(kFleetLog, "a move failed; it stays here for now",
          {{"id", move.pack.id}, {"to", move.to.node_id},
           {"error", why.ok() ? "the other node did not take it" : why.ToString()}});
  Arm(kRound);
}

// ---------------------------------------------------------------------------------------------
// The other side: a sandbox moving here.

void RegisterMoveRoutes(Server& server, supervisor::SandboxManager& manager) {
  RouteOptions parts;
  parts.max_body_bytes = SandboxMover::kPartBytes;
  server.Route("PUT", "/v1/internal/moves/{id}", Auth::kNode, parts,
               [&manager](HttpRequest request, Responder respond) {
                 StatusOr<int64_t> offset = QueryInt(request.query, "offset", -1);
                 if (!offset.ok() || *offset < 0 || request.query["sha256"].empty()) {
                   return respond(ErrorResponse(Status::Error("offset and sha256 are required", EINVAL)));
                 }
                 manager.ReceiveMoveData(request.params["id"], static_cast<uint64_t>(*offset),
                                         request.query["sha256"], std::move(request.body),
                                         [respond](StatusOr<uint64_t> size) {
                                           if (!size.ok()) return respond(ErrorResponse(size.status()));
                                           respond(JsonResponse(200, {{"bytes", *size}}));
                                         });
               });
  server.Route("POST", "/v1/internal/moves/{id}", Auth::kNode, [&manager](HttpRequest request, Responder respond) {
    supervisor::MoveManifest manifest;
    manifest.from_node = request.forwarded_by;  // the node that signed: the sandbox's own
    StatusOr<int64_t> bytes = QueryInt(request.query, "bytes", -1);
    StatusOr<int64_t> uid_base = QueryInt(request.query, "uid_base", -1);
    auto kind = supervisor::LayerKindNamed(request.query["kind"]);
    if (!bytes.ok() || *bytes < 0 || !uid_base.ok() || *uid_base < 0 || request.query["sha256"].size() != 64 ||
        !kind.ok()) {
      return respond(ErrorResponse(Status::Error("bytes, sha256, kind and uid_base are required", EINVAL)));
    }
    manifest.bytes = static_cast<uint64_t>(*bytes);
    manifest.sha256 = request.query["sha256"];
    manifest.kind = *kind;
    manifest.uid_base = *uid_base;
    manager.AdoptMove(request.params["id"], manifest, [respond](StatusOr<supervisor::Moved> moved) {
      if (!moved.ok()) return respond(ErrorResponse(moved.status()));
      respond(JsonResponse(200, {{"id", moved->id}, {"node", moved->node_id}, {"uid_base", moved->uid_base}}));
    });
  });
}

}  // namespace corral::api
