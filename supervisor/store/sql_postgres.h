// The store's PostgreSQL engine (internal to supervisor/store/), on libpq: one connection, made
// again by the next call after it is lost; statements prepared once per connection; parameters
// sent in binary (no quoting, no text copies); SERIALIZABLE transactions retried on a
// serialization failure or deadlock. Serialized by the caller (the store's lock).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "supervisor/store/sql_db.h"

namespace corral::supervisor::store_internal {

// Connects to `url`, a libpq connection string ("postgresql://user@host/db?sslmode=..." or
// "host=... dbname=..."); what it does not set defaults to connect_timeout 5 s and
// application_name "corrald". ECONNREFUSED when the server cannot be reached; EINVAL when the
// string does not parse. Errors never repeat the string (it may hold a password).
StatusOr<std::unique_ptr<SqlDb>> ConnectPostgres(const std::string& url);

// `sql` with ?1 .. ?n written as $1 .. $n, outside quoted literals and identifiers (exposed for
// its unit test).
std::string PostgresParameters(std::string_view sql);

}  // namespace corral::supervisor::store_internal
