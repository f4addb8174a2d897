// This corrald as a node of a fleet: its row in the store's `nodes` (id, address, version,
// capacity), written at start and refreshed by a heartbeat (how many sandboxes it holds, the
// host's available memory) every node.heartbeat; the nodes as the store has them, each alive when
// it heartbeat within node.dead_after; and draining (a drained node takes no new sandboxes, and
// stays drained across restarts until undrained; drained "moving out", it also moves its stopped
// sandboxes to other nodes: api/sandbox_mover.h).
//
// With SQLite it is one node, the only one; with PostgreSQL every corrald sharing the database is
// one. The heartbeat runs on the event loop (one short UPDATE); a failed one is logged, and the
// next is tried at its time (a node whose row was removed registers again).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/status.h"
#include "supervisor/store/store.h"

namespace corral::supervisor {

struct NodeSettings {
  std::string address;          // node.address
  std::string version;          // corrald's
  int64_t max_sandboxes = 0;    // sandbox.max_sandboxes
  int64_t heartbeat_s = 5;      // node.heartbeat
  int64_t dead_after_s = 20;    // node.dead_after
};

struct NodeView {
  NodeRow row;
  bool alive = false;           // heartbeat within dead_after of now
  int64_t silent_ms = 0;        // since its last heartbeat
};

// The host's memory from /proc/meminfo: {MemTotal, MemAvailable} in bytes ({0, 0} when unread).
std::pair<int64_t, int64_t> HostMemory();

// "no", "yes" or "moving out", for logs and the CLI.
const char* DrainName(int64_t drain);

class NodeRegistry {
 public:
  NodeRegistry(boost::asio::io_context& io, Store& store, NodeSettings settings);

  // Writes this node's row (its drained flag kept); then heartbeats until Stop.
  Status Start();
  void Stop();

  const std::string& id() const { return store_.node_id(); }
  // Whether this node is drained, as of its last heartbeat (or of a drain through this node), and
  // whether it also moves its stopped sandboxes out (kNodeMovingOut).
  bool drained() const { return drain_ != kNodeOpen; }
  bool moving_out() const { return drain_ == kNodeMovingOut; }
  // Whether it is drained as the store says now (a drain or undrain through another node is
  // seen at once, as the fleet's placement sees it); as of the last heartbeat when the store
  // cannot be read.
  bool DrainedNow();

  StatusOr<std::vector<NodeView>> List() const;
  // One node; nullopt when the store does not have it.
  StatusOr<std::optional<NodeView>> Get(const std::string& id) const;
  // kNodeOpen (undrain), kNodeDrained or kNodeMovingOut. ENOENT for a node the store does not have.
  Status SetDrained(const std::string& id, int64_t drain);

 private:
  NodeRow Row() const;
  NodeView ViewOf(NodeRow row, int64_t now_ms) const;
  void Heartbeat();
  void Arm();

  boost::asio::io_context& io_;
  Store& store_;
  NodeSettings settings_;
  boost::asio::steady_timer timer_;
  int64_t started_at_ = 0;
  int64_t drain_ = kNodeOpen;
  bool stopped_ = false;
  bool failing_ = false;  // the last heartbeat failed (logged once until one succeeds)
};

}  // namespace corral::supervisor
