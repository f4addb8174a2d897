// The store's sandbox ports (preview URLs) and the key signed port URLs are made with.
#include <mutex>

#include "supervisor/store/store.h"
#include "supervisor/store/store_sql.h"

namespace corral::supervisor {

using namespace store_internal;  // the store's own SQL helpers

StatusOr<bool> Store::PutPort(const PortRow& row) {
  std::lock_guard lock(mu_);
  const std::string what = "put port " + std::to_string(row.port) + " of " + row.sandbox_id;
  ASSIGN_OR_RETURN(int64_t inserted,
                   db_->Execute("INSERT INTO sandbox_ports (sandbox_id, port, public, created_at) VALUES (?1, ?2, ?3, ?4) "
                                "ON CONFLICT (sandbox_id, port) DO NOTHING",
                                {row.sandbox_id, row.port, int64_t{row.is_public ? 1 : 0}, row.created_at}, what,
                                nullptr));
  if (inserted > 0) return true;
  RETURN_IF_ERROR(Run(db_, "UPDATE sandbox_ports SET public = ?3 WHERE sandbox_id = ?1 AND port = ?2",
                      {row.sandbox_id, row.port, int64_t{row.is_public ? 1 : 0}}, what));
  return false;
}

StatusOr<std::vector<PortRow>> Store::ListPorts(const std::string& sandbox_id) {
  std::vector<PortRow> rows;
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(db_->Execute("SELECT sandbox_id, port, public, created_at FROM sandbox_ports WHERE sandbox_id = ?1 "
                               "ORDER BY port",
                               {sandbox_id}, "list the ports of " + sandbox_id,
                               [&rows](const SqlRow& r) {
                                 rows.push_back(PortRow{r.Text(0), r.Int(1), r.Int(2) != 0, r.Int(3)});
                               })
                      .status());
  return rows;
}

Status Store::DeletePort(const std::string& sandbox_id, int64_t port) {
  std::lock_guard lock(mu_);
  return RunOnExistingRow(db_, "DELETE FROM sandbox_ports WHERE sandbox_id = ?1 AND port = ?2", {sandbox_id, port},
                          "delete port " + std::to_string(port) + " of " + sandbox_id);
}

StatusOr<std::vector<int64_t>> Store::DeleteSandboxPorts(const std::string& sandbox_id) {
  std::vector<int64_t> ports;
  RETURN_IF_ERROR(InTransaction([&]() -> Status {
    ports.clear();
    ASSIGN_OR_RETURN(std::vector<PortRow> rows, ListPorts(sandbox_id));
    for (const PortRow& row : rows) ports.push_back(row.port);
    std::lock_guard lock(mu_);
    return Run(db_, "DELETE FROM sandbox_ports WHERE sandbox_id = ?1", {sandbox_id},
               "delete the ports of " + sandbox_id);
  }));
  return ports;
}

StatusOr<std::string> Store::PortUrlKey(const std::string& candidate) {
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(Run(db_, "INSERT INTO port_url_key (id, key) VALUES (1, ?1) ON CONFLICT (id) DO NOTHING",
                      {Blob{candidate}}, "store the port URL key"));
  std::string key;
  RETURN_IF_ERROR(db_->Execute("SELECT key FROM port_url_key WHERE id = 1", {}, "read the port URL key",
                               [&key](const SqlRow& r) { key = r.Text(0); })
                      .status());
  if (key.size() < 32) return Status::Error("store: the port URL key is shorter than 32 bytes", EINVAL);
  return key;
}

}  // namespace corral::supervisor
