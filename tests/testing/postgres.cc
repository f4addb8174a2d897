#include "tests/testing/postgres.h"

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <memory>

namespace corral::test {

namespace {

// Runs `command` with the shell; its exit status (or -1).
int Shell(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string Script() { return std::string(CORRAL_SOURCE_DIR) + "/tests/fixtures/postgres.py"; }

std::string DatabaseOf(const std::string& url) {
  const size_t slash = url.find("@/");
  const size_t query = url.find('?');
  if (slash == std::string::npos || query == std::string::npos) return "";
  return url.substr(slash + 2, query - slash - 2);
}

struct ConnDeleter {
  void operator()(PGconn* conn) const { PQfinish(conn); }
};
struct ResultDeleter {
  void operator()(PGresult* result) const { PQclear(result); }
};

}  // namespace

Postgres& Postgres::Get() {
  static Postgres server;
  return server;
}

Postgres::Postgres() {
  if (const char* dir = getenv("CORRAL_TEST_POSTGRES_DIR"); dir != nullptr && *dir != '\0') {
    dir_ = dir;
    return;
  }
  char pattern[] = "/tmp/corral-pg-XXXXXX";
  if (mkdtemp(pattern) == nullptr) {
    why_not_ = "mkdtemp failed";
    return;
  }
  // The script makes the directory again (as the server's user); it must not exist yet.
  ::rmdir(pattern);
  const std::string command = "/usr/bin/python3 " + Script() + " start " + pattern + " > /dev/null";
  if (Shell(command) != 0) {
    why_not_ = "no PostgreSQL server could be started here (" + command + " failed; see its stderr)";
    return;
  }
  dir_ = pattern;
  own_ = true;
}

Postgres::~Postgres() {
  if (own_) (void)Shell("/usr/bin/python3 " + Script() + " stop " + dir_);
}

std::optional<std::string> Postgres::CreateDatabase() {
  if (dir_.empty()) return std::nullopt;
  const std::string name = "t_" + std::to_string(::getpid()) + "_" + std::to_string(++next_);
  Exec(AdminUrl(), "CREATE DATABASE " + name);
  return "postgresql://corral@/" + name + "?host=" + dir_;
}

void Postgres::DropDatabase(const std::string& url) {
  const std::string name = DatabaseOf(url);
  if (name.empty() || dir_.empty()) return;
  Exec(AdminUrl(), "DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
}

std::string Postgres::Exec(const std::string& url, const std::string& sql) {
  std::unique_ptr<PGconn, ConnDeleter> conn(PQconnectdb(url.c_str()));
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    ADD_FAILURE() << "connect to " << url << ": " << PQerrorMessage(conn.get());
    return "";
  }
  PQsetNoticeProcessor(conn.get(), [](void*, const char*) {}, nullptr);
  std::unique_ptr<PGresult, ResultDeleter> result(PQexec(conn.get(), sql.c_str()));
  const ExecStatusType status = PQresultStatus(result.get());
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    ADD_FAILURE() << sql << ": " << PQresultErrorMessage(result.get());
    return "";
  }
  const int rows = PQntuples(result.get());
  if (rows == 0 || PQnfields(result.get()) == 0) return "";
  return PQgetisnull(result.get(), rows - 1, 0) ? "NULL" : PQgetvalue(result.get(), rows - 1, 0);
}

}  // namespace corral::test
