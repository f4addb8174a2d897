// A sandbox's event log as the API reads it: the events stored (lifecycle, command outcomes,
// egress decisions), from a seq on, and each new one as it is appended. Over the store
// (store.h); the caller checks first that the sandbox is its caller's (SandboxManager::Get).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "supervisor/store/store.h"

namespace corral::supervisor {

class SandboxEvents {
 public:
  explicit SandboxEvents(Store& store) : store_(store) {}

  // The sandbox's events with a seq above `after_seq`, oldest first, at most `limit`.
  StatusOr<std::vector<EventRow>> List(const std::string& sandbox_id, int64_t after_seq, int64_t limit) const;

  // Tells `listener` of every event appended from now on (every sandbox's), in seq order, on the
  // appending thread and under the store's lock: it must only hand the row on (post it to an
  // event loop), never call back. One listener; nullptr: none.
  void Watch(std::function<void(const EventRow&)> listener);

 private:
  Store& store_;
};

}  // namespace corral::supervisor
