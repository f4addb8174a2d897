// SandboxManager: the ports a running sandbox shows (sandbox_manager.h; issue 21 part 2). The
// daemon reaches them with sockets made in the sandbox's network namespace; nothing runs inside.
#include <fcntl.h>
#include <sys/socket.h>

#include <nlohmann/json.hpp>
#include <openssl/rand.h>

#include "common/log.h"
#include "isolation/netns.h"
#include "supervisor/ids.h"
#include "supervisor/sandboxes/port_urls.h"
#include "supervisor/sandboxes/sandbox_manager.h"

namespace corral::supervisor {

namespace {

std::string PortEvent(int64_t port, const std::string& key, nlohmann::json value) {
  return nlohmann::json{{"port", port}, {key, std::move(value)}}.dump();
}

}  // namespace

StatusOr<PortRow> SandboxManager::OpenPort(const Caller& caller, const std::string& id, int64_t port,
                                           bool is_public) {
  ASSIGN_OR_RETURN(SandboxRow row, Owned(caller, id));
  if (!IsShowablePort(port, config_.relay.port, config_.egress_port)) {
    return Status::Error("port: 1 to 65535, and not one of corral's own services in the sandbox (" +
                             std::to_string(config_.relay.port) + ", " + std::to_string(kToolBridgePort) + ", " +
                             std::to_string(config_.egress_port) + ")",
                         EINVAL);
  }
  if (row.state != "running" || live_.count(id) == 0) {
    return Status::Error("sandbox " + id + " is " + row.state + ": ports are shown while it runs", EBUSY);
  }
  ASSIGN_OR_RETURN(std::vector<PortRow> before, store_.ListPorts(id));
  bool was_public = false;
  for (const PortRow& r : before) was_public = was_public || (r.port == port && r.is_public);
  PortRow port_row{id, port, is_public, Now()};
  ASSIGN_OR_RETURN(bool added, store_.PutPort(port_row));
  if (added) {
    (void)store_.AppendEvent(id, "port.opened", PortEvent(port, "public", is_public));
    LogInfo("sandbox", "port opened", {{"sandbox", id}, {"port", std::to_string(port)}});
  }
  // No longer public: whoever reached it without a token or signature leaves.
  if (was_public && !is_public && ports_closed_) ports_closed_(id, port);
  ASSIGN_OR_RETURN(std::vector<PortRow> rows, store_.ListPorts(id));
  for (const PortRow& r : rows) {
    if (r.port == port) return r;
  }
  return Status::Error("port " + std::to_string(port) + " went away meanwhile", ENOENT);
}

StatusOr<std::vector<PortRow>> SandboxManager::ListPorts(const Caller& caller, const std::string& id) {
  RETURN_IF_ERROR(Owned(caller, id).status());
  return store_.ListPorts(id);
}

Status SandboxManager::ClosePort(const Caller& caller, const std::string& id, int64_t port) {
  RETURN_IF_ERROR(Owned(caller, id).status());
  Status deleted = store_.DeletePort(id, port);
  if (!deleted.ok()) {
    if (deleted.error_number() == ENOENT) return NotFound("port " + std::to_string(port) + " of sandbox " + id);
    return deleted;
  }
  (void)store_.AppendEvent(id, "port.closed", PortEvent(port, "reason", "request"));
  LogInfo("sandbox", "port closed", {{"sandbox", id}, {"port", std::to_string(port)}});
  if (ports_closed_) ports_closed_(id, port);
  return Status();
}

void SandboxManager::CloseAllPorts(const std::string& id, const std::string& reason) {
  auto ports = store_.DeleteSandboxPorts(id);
  if (!ports.ok()) {
    LogError("sandbox", "cannot close its ports", {{"sandbox", id}, {"error", ports.status().ToString()}});
    return;
  }
  for (int64_t port : *ports) (void)store_.AppendEvent(id, "port.closed", PortEvent(port, "reason", reason));
  if (ports_closed_) ports_closed_(id, 0);
}

StatusOr<std::string> SandboxManager::SignPort(const Caller& caller, const std::string& id, int64_t port,
                                               int64_t exp) {
  ASSIGN_OR_RETURN(SandboxRow row, Owned(caller, id));
  ASSIGN_OR_RETURN(std::vector<PortRow> rows, store_.ListPorts(id));
  bool shown = false;
  for (const PortRow& r : rows) shown = shown || r.port == port;
  if (!shown) return NotFound("port " + std::to_string(port) + " of sandbox " + id);
  if (port_url_key_.empty()) return Status::Error("no port URL key yet", EAGAIN);
  return SignPortGrant(port_url_key_, PortGrant{id, port, exp, row.iss, row.sub});
}

StatusOr<SandboxManager::PortTarget> SandboxManager::FindPort(const std::string& id, int64_t port) {
  if (!IsWellFormedId(id, "sb")) return NotFound("sandbox " + id);
  ASSIGN_OR_RETURN(std::optional<SandboxRow> row, store_.GetSandbox(id));
  if (!row || row->state == kPooled || row->node_id != store_.node_id()) return NotFound("sandbox " + id);
  ASSIGN_OR_RETURN(std::vector<PortRow> rows, store_.ListPorts(id));
  for (const PortRow& r : rows) {
    if (r.port != port) continue;
    if (live_.count(id) == 0) return Status::Error("sandbox " + id + " is not running", EAGAIN);
    return PortTarget{std::move(*row), r};
  }
  return NotFound("port " + std::to_string(port) + " of sandbox " + id);
}

bool SandboxManager::VerifyPortSignature(const PortTarget& target, int64_t exp, std::string_view signature) const {
  return VerifyPortGrant(port_url_key_, PortGrant{target.sandbox.id, target.port.port, exp, target.sandbox.iss,
                                                  target.sandbox.sub},
                         signature, Now());
}

Status SandboxManager::LoadPortUrlKey() {
  unsigned char random[32];
  if (RAND_bytes(random, sizeof(random)) != 1) return Status::Error("no random bytes for the port URL key", EIO);
  ASSIGN_OR_RETURN(port_url_key_, store_.PortUrlKey(std::string(reinterpret_cast<const char*>(random), sizeof(random))));
  return Status();
}

StatusOr<UniqueFd> SandboxManager::PortSocket(const std::string& id) {
  auto it = live_.find(id);
  if (it == live_.end() || !it->second->init_exit) return Status::Error("sandbox " + id + " is not running", EAGAIN);
  // init's pidfd names its network namespace (setns with a pidfd, Linux 5.8), and is never
  // another process's: a pid reused after init exited cannot be entered by mistake.
  UniqueFd pidfd(fcntl(it->second->init_exit->native_handle(), F_DUPFD_CLOEXEC, 0));
  if (!pidfd) return ErrnoError("dup the pidfd of sandbox " + id);
  return isolation::OnOwnThread([&]() -> StatusOr<UniqueFd> {
    ASSIGN_OR_RETURN(UniqueFd home, isolation::OpenThreadNetworkNamespace("open the daemon's network namespace"));
    return isolation::SocketInNetworkNamespace(pidfd.get(), home.get(), AF_INET,
                                               SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, "sandbox " + id);
  });
}

}  // namespace corral::supervisor
