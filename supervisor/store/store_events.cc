// The store's event log.
#include "supervisor/store/store.h"

#include <ctime>
#include <mutex>

#include "supervisor/store/store_sqlite.h"

namespace corral::supervisor {

using namespace store_internal;  // the store's own SQLite helpers

StatusOr<int64_t> Store::AppendEvent(const std::string& sandbox_id, const std::string& type,
                                     const std::string& data_json) {
  const int64_t at = static_cast<int64_t>(time(nullptr));
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(Run(db_,
                      "INSERT INTO events (sandbox_id, type, data_json, at) "
                      "VALUES (?1, ?2, ?3, ?4)",
                      {sandbox_id, type, data_json, at},
                      "append event " + type + " of " + sandbox_id));
  // Per connection, and the mutex keeps other inserts on this connection out until we read it.
  const int64_t seq = static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
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
