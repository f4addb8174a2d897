#include "supervisor/fleet/fleet_router.h"

#include <algorithm>
#include <cerrno>

#include "common/unix_time.h"

namespace corral::supervisor {

FleetRouter::FleetRouter(Store& store, NodeRegistry& nodes)
    : store_(store), nodes_(nodes), random_(std::random_device{}()) {
  pick_ = [this](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(random_); };
}

double FleetRouter::Room(const NodeRow& row) {
  double room = 1.0;
  if (row.memory_total > 0) {
    room = std::min(room, static_cast<double>(row.memory_available) / static_cast<double>(row.memory_total));
  }
  if (row.max_sandboxes > 0) {
    room = std::min(room, 1.0 - static_cast<double>(row.sandboxes) / static_cast<double>(row.max_sandboxes));
  }
  return std::clamp(room, 0.0, 1.0);
}

StatusOr<std::optional<std::string>> FleetRouter::NodeOf(FleetResource kind, const std::string& id) {
  switch (kind) {
    case FleetResource::kSandbox: {
      ASSIGN_OR_RETURN(std::optional<SandboxRow> row, store_.GetSandbox(id));
      if (!row) return std::optional<std::string>();
      return std::optional<std::string>(row->node_id);
    }
    case FleetResource::kSnapshot: {
      ASSIGN_OR_RETURN(std::optional<SnapshotRow> row, store_.GetSnapshot(id));
      if (!row) return std::optional<std::string>();
      return std::optional<std::string>(row->node_id);
    }
    case FleetResource::kSession: {
      // A session runs in its sandbox, on that sandbox's node.
      ASSIGN_OR_RETURN(std::optional<SessionRow> row, store_.GetSession(id));
      if (!row) return std::optional<std::string>();
      return NodeOf(FleetResource::kSandbox, row->sandbox_id);
    }
    case FleetResource::kCommand: {
      ASSIGN_OR_RETURN(std::optional<CommandRow> row, store_.GetCommand(id));
      if (!row) return std::optional<std::string>();
      return NodeOf(FleetResource::kSandbox, row->sandbox_id);
    }
    case FleetResource::kExecution: {
      ASSIGN_OR_RETURN(std::optional<ExecutionRow> row, store_.GetExecution(id));
      if (!row) return std::optional<std::string>();
      return std::optional<std::string>(row->node_id);
    }
  }
  return std::optional<std::string>();
}

StatusOr<FleetTarget> FleetRouter::On(const std::string& what, const std::string& node_id) {
  if (node_id == store_.node_id()) return FleetTarget{};
  ASSIGN_OR_RETURN(std::optional<NodeView> node, nodes_.Get(node_id));
  if (!node) return Status::Error(what + " is on node " + node_id + ", which is not in the fleet", EAGAIN);
  if (!node->alive) {
    return Status::Error(what + " is on node " + node_id + ", not heard from since " +
                             IsoTime(node->row.heartbeat_at / 1000),
                         EAGAIN);
  }
  if (node->row.address.empty()) {
    return Status::Error(what + " is on node " + node_id + ", which has no node.address to be reached at", EAGAIN);
  }
  return FleetTarget{false, node_id, node->row.address};
}

StatusOr<FleetTarget> FleetRouter::Locate(FleetResource kind, const std::string& id) {
  if (!Shared()) return FleetTarget{};
  ASSIGN_OR_RETURN(std::optional<std::string> node, NodeOf(kind, id));
  if (!node) return FleetTarget{};
  static constexpr const char* kWhat[] = {"sandbox ", "snapshot ", "session ", "execution ", "command "};
  return On(kWhat[static_cast<int>(kind)] + id, *node);
}

StatusOr<FleetTarget> FleetRouter::Place(const std::string& snapshot) {
  if (!Shared()) return FleetTarget{};
  if (!snapshot.empty()) return Locate(FleetResource::kSnapshot, snapshot);
  ASSIGN_OR_RETURN(std::vector<NodeView> nodes, nodes_.List());
  std::vector<const NodeView*> open;
  for (const NodeView& node : nodes) {
    const bool reachable = node.row.id == store_.node_id() || !node.row.address.empty();
    if (node.alive && !node.row.drained && reachable && Room(node.row) > 0) open.push_back(&node);
  }
  // None: here, whose own create answers why not (drained, or full).
  if (open.empty()) return FleetTarget{};
  const size_t first = pick_(open.size()) % open.size();
  const NodeView* best = open[first];
  if (open.size() > 1) {
    size_t second = pick_(open.size() - 1) % (open.size() - 1);
    if (second >= first) ++second;
    // Rooms this close are the same (memory readings differ by a little between heartbeats):
    // the first, a random one, so that creates between two heartbeats do not all go where a
    // few megabytes more were free.
    if (Room(open[second]->row) > Room(best->row) + kSameRoom) best = open[second];
  }
  if (best->row.id == store_.node_id()) return FleetTarget{};
  return FleetTarget{false, best->row.id, best->row.address};
}

}  // namespace corral::supervisor
