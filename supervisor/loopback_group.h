// Several LoopbackServices as one (the manager takes one): the model relay and the tool bridge,
// each with its own ports on every sandbox's loopback. Listeners are handed out in the order of
// Ports(); a sandbox started by an older daemon with fewer listeners gives the later services
// none (they then serve nothing for it).
#pragma once

#include <utility>
#include <vector>

#include "supervisor/loopback_services.h"

namespace corral::supervisor {

class LoopbackGroup : public LoopbackServices {
 public:
  explicit LoopbackGroup(std::vector<LoopbackServices*> members) : members_(std::move(members)) {}

  std::vector<uint16_t> Ports() const override {
    std::vector<uint16_t> ports;
    for (LoopbackServices* member : members_) {
      for (uint16_t port : member->Ports()) ports.push_back(port);
    }
    return ports;
  }

  void Serve(const std::string& sandbox_id, std::vector<UniqueFd> listeners) override {
    size_t next = 0;
    for (LoopbackServices* member : members_) {
      std::vector<UniqueFd> mine;
      for (size_t i = 0; i < member->Ports().size() && next < listeners.size(); ++i) {
        mine.push_back(std::move(listeners[next++]));
      }
      if (!mine.empty()) member->Serve(sandbox_id, std::move(mine));
    }
  }

  void Forget(const std::string& sandbox_id) override {
    for (LoopbackServices* member : members_) member->Forget(sandbox_id);
  }

 private:
  std::vector<LoopbackServices*> members_;
};

}  // namespace corral::supervisor
