// The store's event log.
#include "supervisor/store/store.h"

#include <ctime>
#include <mutex>

#include "supervisor/store/store_sql.h"

namespace corral::supervisor {

using namespace store_internal;  // the store's own SQL helpers

StatusOr<int64_t> Store::AppendEvent(const std::string& sandbox_id, const std::string& type,
                                     const std::string& data_json) {
  const int64_t at = static_cast<int64_t>(time(nullptr));
  std::lock_guard lock(mu_);
  const std::string what = "append event " + type + " of " + sandbox_id;
  ASSIGN_OR_RETURN(std::optional<int64_t> assigned,
                   QueryInt(db_,
                            "INSERT INTO events (sandbox_id, type, data_json, at) "
                            "VALUES (?1, ?2, ?3, ?4) RETURNING seq",
                            {sandbox_id, type, data_json, at}, what));
  if (!assigned) return Status::Error("store: " + what + ": no seq was assigned");
  const int64_t seq = *assigned;
  if (event_listener_) event_listener_(EventRow{seq, sandbox_id, type, data_json, at});
  return seq;
}

void Store::SetEventListener(std::function<void(const EventRow&)> listener) {
  std::lock_guard lock(mu_);
  event_listener_ = std::move(listener);
}

StatusOr<std::vector<EventRow>> Store::ListEvents(const std::string& sandbox_id, int64_t after_seq,
                                                  int64_t limit) {
  std::lock_guard lock(mu_);
  return Query<EventRow>(db_,
                         Sql({"SELECT ", kEventColumns,
                              " FROM events WHERE sandbox_id = ?1 AND seq > ?2 "
                              "ORDER BY seq LIMIT ?3"}),
                         {sandbox_id, after_seq, ClampLimit(limit)},
                         "list events of " + sandbox_id);
}

}  // namespace corral::supervisor
