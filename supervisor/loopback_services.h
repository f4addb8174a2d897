// What the daemon serves on each sandbox's own loopback: the model relay, the tool bridge and
// the egress proxy (ports in loopback_ports.h). The sandbox's init listens on Ports() from its
// start and holds the sockets; the sandbox manager hands them over when a sandbox starts or is
// adopted, and says when it stops.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/unique_fd.h"

namespace corral::supervisor {

class LoopbackServices {
 public:
  virtual ~LoopbackServices() = default;
  // Ports on the sandbox's 127.0.0.1, at most isolation::kMaxLoopbackListeners.
  virtual std::vector<uint16_t> Ports() const = 0;
  // The listening sockets of a running sandbox, in the order of Ports() when it started.
  virtual void Serve(const std::string& sandbox_id, std::vector<UniqueFd> listeners) = 0;
  // The sandbox stopped: stop accepting for it and drop its connections.
  virtual void Forget(const std::string& sandbox_id) = 0;
};

}  // namespace corral::supervisor
