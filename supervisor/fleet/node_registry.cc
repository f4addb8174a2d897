#include "supervisor/fleet/node_registry.h"

#include <cerrno>
#include <chrono>
#include <fstream>
#include <sstream>
#include <tuple>

#include "common/log.h"
#include "common/unix_time.h"

namespace corral::supervisor {

std::pair<int64_t, int64_t> HostMemory() {
  std::ifstream meminfo("/proc/meminfo");
  int64_t total = 0, available = 0;
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    fields >> key >> kib;
    if (key == "MemTotal:") total = kib * 1024;
    if (key == "MemAvailable:") available = kib * 1024;
  }
  return {total, available};
}

NodeRegistry::NodeRegistry(boost::asio::io_context& io, Store& store, NodeSettings settings)
    : io_(io), store_(store), settings_(std::move(settings)), timer_(io) {}

NodeRow NodeRegistry::Row() const {
  NodeRow row;
  row.id = store_.node_id();
  row.address = settings_.address;
  row.version = settings_.version;
  row.started_at = started_at_;
  row.heartbeat_at = UnixNowMs();
  row.max_sandboxes = settings_.max_sandboxes;
  StatusOr<int64_t> held = store_.CountAllSandboxes();
  row.sandboxes = held.ok() ? *held : 0;
  std::tie(row.memory_total, row.memory_available) = HostMemory();
  return row;
}

Status NodeRegistry::Start() {
  started_at_ = UnixNow();
  RETURN_IF_ERROR(store_.RegisterNode(Row()));
  ASSIGN_OR_RETURN(std::optional<NodeRow> stored, store_.GetNode(id()));
  drain_ = stored ? stored->drained : kNodeOpen;
  LogInfo("fleet", "node registered",
          {{"node", id()}, {"address", settings_.address}, {"drained", DrainName(drain_)}});
  Arm();
  return Status();
}

void NodeRegistry::Stop() {
  stopped_ = true;
  timer_.cancel();
}

void NodeRegistry::Arm() {
  if (stopped_) return;
  timer_.expires_after(std::chrono::seconds(settings_.heartbeat_s));
  timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || stopped_) return;
    Heartbeat();
    Arm();
  });
}

void NodeRegistry::Heartbeat() {
  const NodeRow row = Row();
  Status beat = store_.HeartbeatNode(row.id, row.heartbeat_at, row.sandboxes, row.memory_available);
  if (beat.error_number() == ENOENT) beat = store_.RegisterNode(row);  // its row was removed
  StatusOr<std::optional<NodeRow>> stored = beat.ok() ? store_.GetNode(row.id) : StatusOr<std::optional<NodeRow>>(beat);
  if (!stored.ok()) {
    if (!failing_) LogWarn("fleet", "heartbeat failed", {{"node", row.id}, {"error", stored.status().ToString()}});
    failing_ = true;
    return;
  }
  if (failing_) LogInfo("fleet", "heartbeat again", {{"node", row.id}});
  failing_ = false;
  drain_ = *stored ? (*stored)->drained : kNodeOpen;
}

NodeView NodeRegistry::ViewOf(NodeRow row, int64_t now_ms) const {
  NodeView view;
  view.silent_ms = std::max<int64_t>(now_ms - row.heartbeat_at, 0);
  view.alive = view.silent_ms <= settings_.dead_after_s * 1000;
  view.row = std::move(row);
  return view;
}

bool NodeRegistry::DrainedNow() {
  StatusOr<std::optional<NodeRow>> stored = store_.GetNode(id());
  if (stored.ok() && stored->has_value()) drain_ = (*stored)->drained;
  return drained();
}

StatusOr<std::vector<NodeView>> NodeRegistry::List() const {
  ASSIGN_OR_RETURN(std::vector<NodeRow> rows, store_.ListNodes());
  const int64_t now = UnixNowMs();
  std::vector<NodeView> nodes;
  for (NodeRow& row : rows) nodes.push_back(ViewOf(std::move(row), now));
  return nodes;
}

StatusOr<std::optional<NodeView>> NodeRegistry::Get(const std::string& node) const {
  ASSIGN_OR_RETURN(std::optional<NodeRow> row, store_.GetNode(node));
  if (!row) return std::optional<NodeView>();
  return std::optional<NodeView>(ViewOf(std::move(*row), UnixNowMs()));
}

Status NodeRegistry::SetDrained(const std::string& node, int64_t drain) {
  RETURN_IF_ERROR(store_.SetNodeDrained(node, drain));
  if (node == id()) drain_ = drain;
  LogInfo("fleet", drain != kNodeOpen ? "node drained" : "node undrained", {{"node", node}, {"drained", DrainName(drain)}});
  return Status();
}

const char* DrainName(int64_t drain) {
  switch (drain) {
    case kNodeOpen:
      return "no";
    case kNodeDrained:
      return "yes";
    case kNodeMovingOut:
      return "moving out";
    default:
      return "?";
  }
}

}  // namespace corral::supervisor
