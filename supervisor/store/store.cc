// The store itself: opening it on either engine, its schema version, and transactions.
#include "supervisor/store/store.h"

#include <mutex>

#include "supervisor/store/sql_db.h"
#include "supervisor/store/store_schema.h"

namespace corral::supervisor {

using namespace store_internal;  // NOLINT: the store's own SQL helpers

StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path, Synchronous synchronous) {
  StoreOptions options;
  options.path = path;
  options.synchronous = synchronous;
  return Open(options);
}

StatusOr<std::unique_ptr<Store>> Store::Open(const StoreOptions& options) {
  StatusOr<std::unique_ptr<SqlDb>> db = options.backend == StoreBackend::kPostgresql
                                            ? OpenPostgresStore(options.url)
                                            : OpenSqliteStore(options.path, options.synchronous == Synchronous::kFull);
  if (!db.ok()) return db.status();
  std::unique_ptr<Store> store(new Store());
  store->db_ = db->release();
  store->backend_ = options.backend;
  store->node_id_ = options.node_id;
  if (options.backend == StoreBackend::kSqlite) RETURN_IF_ERROR(store->ClaimEveryRow());
  return store;
}

Store::~Store() { delete db_; }

int Store::schema_version() const {
  std::lock_guard lock(mu_);
  StatusOr<int64_t> version =
      backend_ == StoreBackend::kPostgresql ? PostgresSchemaVersion(db_) : SqliteSchemaVersion(db_);
  return version.ok() ? static_cast<int>(*version) : -1;
}

int Store::latest_schema_version(StoreBackend backend) {
  return backend == StoreBackend::kPostgresql ? PostgresLatestSchemaVersion() : SqliteLatestSchemaVersion();
}

Status Store::InTransaction(const std::function<Status()>& body) {
  std::lock_guard lock(mu_);
  if (transaction_depth_ > 0) return body();  // Joins the outer transaction.
  ++transaction_depth_;
  Status status = db_->Transaction(body);
  --transaction_depth_;
  return status;
}

Status Store::InLockedTransaction(const std::function<Status()>& body) {
  std::lock_guard lock(mu_);
  if (transaction_depth_ > 0) return body();
  ++transaction_depth_;
  Status status = db_->LockedTransaction(body);
  --transaction_depth_;
  return status;
}

}  // namespace corral::supervisor
