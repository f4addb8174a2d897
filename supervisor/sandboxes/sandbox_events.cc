#include "supervisor/sandboxes/sandbox_events.h"

#include <utility>

namespace corral::supervisor {

StatusOr<std::vector<EventRow>> SandboxEvents::List(const std::string& sandbox_id, int64_t after_seq,
                                                    int64_t limit) const {
  return store_.ListEvents(sandbox_id, after_seq, limit);
}

void SandboxEvents::Watch(std::function<void(const EventRow&)> listener) {
  store_.SetEventListener(std::move(listener));
}

}  // namespace corral::supervisor
