// A drained node moving its stopped sandboxes, and its snapshots, to the other nodes of its fleet
// (`corral admin node drain --move`: supervisor/fleet/node_registry.h kNodeMovingOut).
//
// While this node is drained so, every kRound it takes one of its stopped sandboxes or snapshots
// (SandboxManager::Movable), places it as a create would be (FleetRouter::Place: another
// node that takes new sandboxes, best of two by room), packs its layer into a tar (layer_move.h)
// and sends it to that node over the fleet's internal channel (PeerHttp: a hop mark under the
// cluster secret, no user's token), in parts of kPartBytes, each with its SHA-256 in the
// (marked) target:
//   PUT  /v1/internal/moves/{id}?offset=N&sha256=H    a part, at offset N of the tar
//   POST /v1/internal/moves/{id}?bytes=N&sha256=H&kind=K&uid_base=U
//                                                     the whole: checked, unpacked, taken
// The node that takes it answers the POST once the catalog says it is its own (one
// transaction: store.h TakeSandbox, TakeSnapshot); then this node removes its copy. However the exchange
// ends, the catalog decides (SandboxManager::EndMoveOut): an answer lost after the take is still
// a move. One whose move failed is tried again after kRetryAfter (another node may be
// picked), while the rest go on. Sandboxes started meanwhile stay until they stop.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include "api/peer_http.h"
#include "api/server.h"
#include "supervisor/fleet/fleet_router.h"
#include "supervisor/fleet/node_registry.h"
#include "supervisor/sandboxes/sandbox_manager.h"

namespace corral::api {

// The routes another node's mover calls (Auth::kNode); the sandbox's node is the one whose mark
// the request bears.
void RegisterMoveRoutes(Server& server, supervisor::SandboxManager& manager);

class SandboxMover {
 public:
  static constexpr std::chrono::seconds kRound{1};
  static constexpr std::chrono::seconds kRetryAfter{30};
  static constexpr size_t kPartBytes = size_t{8} << 20;

  // `peers` null (no cluster secret): nothing moves.
  SandboxMover(boost::asio::io_context& io, boost::asio::thread_pool& pool, supervisor::SandboxManager& manager,
               supervisor::NodeRegistry& nodes, supervisor::FleetRouter& router, PeerHttp* peers);

  void Start();
  void Stop();

 private:
  struct Move {
    supervisor::MovePack pack;
    supervisor::FleetTarget to;
    uint64_t offset = 0;
    std::chrono::steady_clock::time_point began;
  };

  void Arm(std::chrono::milliseconds delay);
  void Round();
  void SendPart(Move move);
  void Commit(Move move);
  // However the move ended (`why`: its failure, if the exchange failed): what the catalog says.
  void Finish(Move move, const Status& why);

  boost::asio::io_context& io_;
  boost::asio::thread_pool& pool_;
  supervisor::SandboxManager& manager_;
  supervisor::NodeRegistry& nodes_;
  supervisor::FleetRouter& router_;
  PeerHttp* peers_;
  boost::asio::steady_timer timer_;
  std::map<std::string, std::chrono::steady_clock::time_point> failed_;  // id -> when to try again
  bool stopped_ = true;
};

}  // namespace corral::api
