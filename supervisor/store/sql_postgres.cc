#include "supervisor/store/sql_postgres.h"

#include <libpq-fe.h>
#include <poll.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "common/log.h"

namespace corral::supervisor::store_internal {

namespace {

// Type OIDs of the parameters we send (PostgreSQL's catalog/pg_type.h; stable across releases).
constexpr Oid kByteaOid = 17;
constexpr Oid kInt8Oid = 20;
constexpr Oid kTextOid = 25;

// How often a transaction that lost to a concurrent one is run again before EBUSY.
constexpr int kTransactionAttempts = 8;

struct ResultDeleter {
  void operator()(PGresult* result) const { PQclear(result); }
};
using PgResult = std::unique_ptr<PGresult, ResultDeleter>;

std::string_view SqlState(const PGresult* result) {
  const char* state = result != nullptr ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  return state != nullptr ? std::string_view(state) : std::string_view();
}

// The server's message without its trailing newline.
std::string Message(const PGconn* conn, const PGresult* result) {
  std::string text = result != nullptr ? PQresultErrorMessage(result) : "";
  if (text.empty()) text = PQerrorMessage(conn);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text.empty() ? "unknown error" : text;
}

// A serialization failure or deadlock: the transaction may succeed when run again.
bool Retryable(std::string_view state) { return state == "40001" || state == "40P01"; }

// A unique constraint that guards a value transactions allocate (store_schema_postgres.cc names
// them *_alloc): losing it to a concurrent transaction is a reason to run again, not a duplicate.
// (PostgreSQL reports such a loss as a serialization failure only when the loser's earlier read
// went through the same index.)
bool AllocationKey(const PGresult* result) {
  const char* name = result != nullptr ? PQresultErrorField(result, PG_DIAG_CONSTRAINT_NAME) : nullptr;
  const std::string_view constraint = name != nullptr ? name : "";
  return constraint.size() > 6 && constraint.substr(constraint.size() - 6) == "_alloc";
}

// The server cannot be reached or is going away: connection exceptions (class 08), the
// server shutting down or starting (57P01..57P03).
bool Unreachable(const PGconn* conn, std::string_view state) {
  return PQstatus(conn) != CONNECTION_OK || state.substr(0, 2) == "08" || state == "57P01" || state == "57P02" ||
         state == "57P03";
}

// An int8 in network byte order (the binary format of a parameter).
std::array<char, 8> BigEndian(int64_t number) {
  std::array<char, 8> bytes{};
  auto value = static_cast<uint64_t>(number);
  for (int i = 7; i >= 0; --i) {
    bytes[static_cast<size_t>(i)] = static_cast<char>(value & 0xff);
    value >>= 8;
  }
  return bytes;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class PostgresRow : public SqlRow {
 public:
  PostgresRow(const PGresult* result, int row) : result_(result), row_(row) {}

  bool IsNull(int column) const override { return PQgetisnull(result_, row_, column) != 0; }

  // Text format: an integer, a bigint or a numeric sum of integers, as digits.
  int64_t Int(int column) const override {
    const char* text = PQgetvalue(result_, row_, column);
    const char* end = text + PQgetlength(result_, row_, column);
    int64_t number = 0;
    (void)std::from_chars(text, end, number);
    return number;
  }

  // A BYTEA column arrives as "\x" and hex digits (bytea_output 'hex', set at connect).
  std::string Text(int column) const override {
    const char* text = PQgetvalue(result_, row_, column);
    const auto size = static_cast<size_t>(PQgetlength(result_, row_, column));
    if (PQftype(result_, column) != kByteaOid) return std::string(text, size);
    std::string bytes;
    if (size < 2) return bytes;
    bytes.reserve((size - 2) / 2);
    for (size_t i = 2; i + 1 < size; i += 2) {
      bytes.push_back(static_cast<char>(HexDigit(text[i]) * 16 + HexDigit(text[i + 1])));
    }
    return bytes;
  }

 private:
  const PGresult* result_;
  int row_;
};

void LogNotice(void*, const char* message) {
  std::string text = message != nullptr ? message : "";
  while (!text.empty() && text.back() == '\n') text.pop_back();
  LogInfo("store", "PostgreSQL notice", {{"notice", text}});
}

class PostgresDb : public SqlDb {
 public:
  explicit PostgresDb(PGconn* conn) : conn_(conn) {}
  ~PostgresDb() override { PQfinish(conn_); }
  PostgresDb(const PostgresDb&) = delete;
  PostgresDb& operator=(const PostgresDb&) = delete;

  // After the first connect: refused when it failed; the session configured.
  Status Connect() {
    if (PQstatus(conn_) != CONNECTION_OK) {
      return Status::Error("store: connect to PostgreSQL: " + Message(conn_, nullptr), ECONNREFUSED);
    }
    return Configure();
  }

  StatusOr<int64_t> Execute(std::string_view sql, const std::vector<Value>& values, std::string_view what,
                            const std::function<void(const SqlRow&)>& on_row) override {
    RETURN_IF_ERROR(Connected(what));
    // Parameters in binary: text and bytes as they are (a view, no copy), integers as 8 bytes.
    const size_t count = values.size();
    std::vector<Oid> types(count);
    std::vector<const char*> data(count);
    std::vector<int> lengths(count);
    std::vector<int> formats(count, 1);
    std::vector<std::array<char, 8>> numbers(count);
    for (size_t i = 0; i < count; ++i) {
      std::string_view bytes;
      if (const int64_t* number = std::get_if<int64_t>(&values[i])) {
        types[i] = kInt8Oid;
        numbers[i] = BigEndian(*number);
        bytes = std::string_view(numbers[i].data(), numbers[i].size());
      } else if (const Blob* blob = std::get_if<Blob>(&values[i])) {
        types[i] = kByteaOid;
        bytes = blob->data;
      } else if (const Bytes* any = std::get_if<Bytes>(&values[i])) {
        types[i] = kByteaOid;
        bytes = any->data;
      } else {
        types[i] = kTextOid;
        const std::string* owned = std::get_if<std::string>(&values[i]);
        bytes = owned != nullptr ? std::string_view(*owned) : std::get<std::string_view>(values[i]);
      }
      data[i] = bytes.data() != nullptr ? bytes.data() : "";  // a null pointer would be SQL NULL
      lengths[i] = static_cast<int>(bytes.size());
    }
    ASSIGN_OR_RETURN(std::string name, Prepared(sql, types, what));
    PgResult result(PQexecPrepared(conn_, name.c_str(), static_cast<int>(count), data.data(), lengths.data(),
                                 formats.data(), 0));
    RETURN_IF_ERROR(Check(result.get(), what));
    if (on_row) {
      const int rows = PQntuples(result.get());
      for (int r = 0; r < rows; ++r) on_row(PostgresRow(result.get(), r));
    }
    const char* changed = PQcmdTuples(result.get());
    int64_t number = 0;
    (void)std::from_chars(changed, changed + std::strlen(changed), number);
    return number;
  }

  Status ExecScript(std::string_view sql, std::string_view what) override {
    RETURN_IF_ERROR(Connected(what));
    const std::string text(sql);
    PgResult result(PQexec(conn_, text.c_str()));
    return Check(result.get(), what);
  }

  Status Transaction(const std::function<Status()>& body) override {
    Status status;
    std::minstd_rand jitter(std::random_device{}());
    for (int attempt = 1; attempt <= kTransactionAttempts; ++attempt) {
      retry_ = false;
      RETURN_IF_ERROR(ExecScript("BEGIN ISOLATION LEVEL SERIALIZABLE", "begin transaction"));
      in_transaction_ = true;
      status = body();
      if (status.ok()) status = ExecScript("COMMIT", "commit");
      in_transaction_ = false;
      if (status.ok()) return status;
      if (PQstatus(conn_) == CONNECTION_OK && PQtransactionStatus(conn_) != PQTRANS_IDLE) {
        (void)ExecScript("ROLLBACK", "rollback");
      }
      if (!retry_) return status;
      // Lost to a concurrent transaction: again, after a pause that grows and differs between
      // the contenders (1..2^attempt ms).
      std::this_thread::sleep_for(std::chrono::milliseconds(1 + jitter() % (1u << attempt)));
    }
    return Status::Error(status.message() + " (after " + std::to_string(kTransactionAttempts) + " attempts)", EBUSY);
  }

  Status LockedTransaction(const std::function<Status()>& body) override {
    RETURN_IF_ERROR(ExecScript("BEGIN ISOLATION LEVEL READ COMMITTED", "begin transaction"));
    in_transaction_ = true;
    Status status = ExecScript("SET LOCAL lock_timeout = " + std::to_string(kLockWaitMs), "begin transaction");
    if (status.ok()) status = body();
    if (status.ok()) status = ExecScript("COMMIT", "commit");
    in_transaction_ = false;
    if (!status.ok() && PQstatus(conn_) == CONNECTION_OK && PQtransactionStatus(conn_) != PQTRANS_IDLE) {
      (void)ExecScript("ROLLBACK", "rollback");
    }
    return status;
  }

 private:
  // The session's settings, at connect and after every reconnect.
  Status Configure() {
    PQsetNoticeProcessor(conn_, LogNotice, nullptr);
    return ExecScript("SET bytea_output = 'hex'; SET client_encoding = 'UTF8'", "configure the session");
  }

  // The connection, made again when it was lost. A connection the server closed while it was
  // idle (a restart, an administrator's pg_terminate_backend, an idle timeout) is seen here,
  // before a statement is sent on it (reading what is pending finds the end of the stream), and
  // replaced without an error: no statement was lost. Inside a transaction it is not replaced:
  // the transaction is gone with it, and only its caller can decide to run it again. At most
  // one attempt a second: the callers are on the daemon's event loop, and an attempt at a host
  // that drops packets blocks for the connect timeout; in between, calls fail at once.
  Status Connected(std::string_view what) {
    if (PQstatus(conn_) == CONNECTION_OK && (in_transaction_ || !ClosedByServer())) return Status();
    if (in_transaction_) {
      return Status::Error("store: " + std::string(what) + ": the connection to PostgreSQL was lost in a transaction",
                           ECONNREFUSED);
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_connect_) {
      prepared_.clear();
      PQreset(conn_);
      if (PQstatus(conn_) == CONNECTION_OK && Configure().ok()) {
        LogInfo("store", "connected to PostgreSQL again");
        return Status();
      }
      next_connect_ = now + std::chrono::seconds(1);
    }
    return Status::Error("store: " + std::string(what) + ": PostgreSQL unreachable: " + Message(conn_, nullptr),
                         ECONNREFUSED);
  }

  // Whether the server has closed this idle connection, or sent on it what an idle connection
  // is not sent but before closing it (a FATAL error). Either way it is not to be used again.
  bool ClosedByServer() {
    pollfd ready{PQsocket(conn_), POLLIN | POLLRDHUP, 0};
    if (ready.fd < 0) return true;
    if (::poll(&ready, 1, 0) <= 0) return false;
    if ((ready.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) return true;
    return PQconsumeInput(conn_) == 0 || PQstatus(conn_) != CONNECTION_OK;
  }

  // The name of `sql` prepared on this connection with these parameter types.
  StatusOr<std::string> Prepared(std::string_view sql, const std::vector<Oid>& types, std::string_view what) {
    std::string key(sql);
    for (Oid type : types) key += "\x1f" + std::to_string(type);
    auto it = prepared_.find(key);
    if (it != prepared_.end()) return it->second;
    std::string name = "corral_" + std::to_string(prepared_.size() + 1);
    const std::string text = PostgresParameters(sql);
    PgResult result(PQprepare(conn_, name.c_str(), text.c_str(), static_cast<int>(types.size()), types.data()));
    RETURN_IF_ERROR(Check(result.get(), what));
    prepared_.emplace(std::move(key), name);
    return name;
  }

  Status Check(const PGresult* result, std::string_view what) {
    const ExecStatusType status = result != nullptr ? PQresultStatus(result) : PGRES_FATAL_ERROR;
    if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY) return Status();
    const std::string_view state = SqlState(result);
    std::string message = "store: " + std::string(what) + ": " + Message(conn_, result);
    if (Retryable(state) || (in_transaction_ && state == "23505" && AllocationKey(result))) {
      retry_ = true;
      return Status::Error(std::move(message), EBUSY);
    }
    if (Unreachable(conn_, state)) return Status::Error(std::move(message), ECONNREFUSED);
    if (state == "23505") return Status::Error(std::move(message), EEXIST);  // unique_violation
    if (state == "55P03") return Status::Error(std::move(message), EBUSY);   // lock_not_available
    if (state == "23503") return Status::Error(std::move(message), ENOENT);  // foreign_key_violation
    // Text PostgreSQL cannot hold (a NUL byte, invalid UTF-8), which SQLite would have kept.
    if (state == "22021" || state == "22P05") return Status::Error(std::move(message), EINVAL);
    return Status::Error(std::move(message));
  }

  PGconn* conn_;
  std::chrono::steady_clock::time_point next_connect_{};  // no attempt before, after one failed
  std::map<std::string, std::string> prepared_;  // SQL text and parameter types -> statement name
  bool retry_ = false;           // the current transaction lost to a concurrent one
  bool in_transaction_ = false;  // between BEGIN and COMMIT or ROLLBACK
};

}  // namespace

std::string PostgresParameters(std::string_view sql) {
  std::string out;
  out.reserve(sql.size());
  char quote = 0;  // ' or " while inside a literal or a quoted identifier
  for (size_t i = 0; i < sql.size(); ++i) {
    const char c = sql[i];
    if (quote != 0) {
      if (c == quote) quote = 0;  // a doubled quote closes and opens again: same result
      out += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      out += c;
    } else if (c == '?' && i + 1 < sql.size() && sql[i + 1] >= '0' && sql[i + 1] <= '9') {
      out += '$';
    } else {
      out += c;
    }
  }
  return out;
}

StatusOr<std::unique_ptr<SqlDb>> ConnectPostgres(const std::string& url) {
  char* error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(url.c_str(), &error);
  if (parsed == nullptr) {
    std::string reason = error != nullptr ? error : "out of memory";
    PQfreemem(error);
    while (!reason.empty() && reason.back() == '\n') reason.pop_back();
    return Status::Error("store: the PostgreSQL connection string does not parse: " + reason, EINVAL);
  }
  PQconninfoFree(parsed);
  // Defaults first: the string's own settings, expanded at "dbname", come later and win.
  const char* keywords[] = {"connect_timeout", "application_name", "dbname", nullptr};
  const char* values[] = {"5", "corrald", url.c_str(), nullptr};
  PGconn* conn = PQconnectdbParams(keywords, values, 1);
  if (conn == nullptr) return Status::Error("store: connect to PostgreSQL: out of memory", ENOMEM);
  auto db = std::make_unique<PostgresDb>(conn);
  RETURN_IF_ERROR(db->Connect());
  return std::unique_ptr<SqlDb>(std::move(db));
}

}  // namespace corral::supervisor::store_internal
