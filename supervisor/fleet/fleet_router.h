// Where a request of the fleet is served: the node that holds what it names (a sandbox, a
// snapshot, a session, an execution, a command), from the store's catalog, or, for a new sandbox, the node
// with the most room. The API forwards a request whose answer is another node's (api/forwarding.h);
// this says only where.
//
// Placement is the best of two: of the nodes that take new sandboxes (alive, not drained, with an
// address the others reach, or this one), two at random, and of those the one with the larger
// room, room being the smaller of its free memory share (MemAvailable / MemTotal at its last
// heartbeat) and its free sandbox share (1 - sandboxes / sandbox.max_sandboxes); rooms within
// kSameRoom of each other count as the same, and the first of the two is taken. Two random
// choices spread creates almost as evenly as asking every node, without every node's create
// going to the same emptiest node between two heartbeats.
//
// A store that is one node's (SQLite, or PostgreSQL with a single node) answers "here" for
// everything without reading the catalog.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/status.h"
#include "supervisor/fleet/node_registry.h"
#include "supervisor/store/store.h"

namespace corral::supervisor {

enum class FleetResource { kSandbox, kSnapshot, kSession, kExecution, kCommand };

// Where to serve: here, or on `node` (its row as of its last heartbeat).
struct FleetTarget {
  bool here = true;
  std::string node_id;
  std::string address;  // host:port; "" when here
};

class FleetRouter {
 public:
  FleetRouter(Store& store, NodeRegistry& nodes);

  // The node that holds `id`. Here when the store has no such thing (the local handler answers
  // not_found, as it would for a stranger's), when it is this node's, or when the fleet is one
  // node. EAGAIN (the API's 503 unavailable) when it is another node's and that node is down
  // ("... on node n2, not heard from since 2026-11-27T10:00:00Z") or has no node.address.
  StatusOr<FleetTarget> Locate(FleetResource kind, const std::string& id);

  // Where a new sandbox goes: the node of `snapshot` when it is made from one (its files are
  // there; EAGAIN when that node is down), else the best of two nodes by room (see above).
  // EAGAIN when no node takes new sandboxes.
  StatusOr<FleetTarget> Place(const std::string& snapshot);

  // For tests: replaces the source of randomness: pick(n) is in [0, n); the first candidate is
  // pick(n) of the n open nodes, the second pick(n - 1) of the others.
  void SetRandom(std::function<size_t(size_t n)> pick) { pick_ = std::move(pick); }

  // The room of a node, in [0, 1]: see above. Public for tests.
  static double Room(const NodeRow& row);
  // Two rooms closer than this are taken as the same.
  static constexpr double kSameRoom = 0.05;

 private:
  StatusOr<FleetTarget> On(const std::string& what, const std::string& node_id);
  StatusOr<std::optional<std::string>> NodeOf(FleetResource kind, const std::string& id);
  // False when the store is one node's: the catalog need not be read.
  bool Shared() const { return store_.backend() == StoreBackend::kPostgresql; }

  Store& store_;
  NodeRegistry& nodes_;
  std::mt19937_64 random_;
  std::function<size_t(size_t n)> pick_;
};

}  // namespace corral::supervisor
