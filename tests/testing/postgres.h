// A real PostgreSQL server for C++ tests (tests/fixtures/postgres.py starts it): the one ctest's
// fixture started for the whole run (CORRAL_TEST_POSTGRES_DIR, its socket directory), or, when a
// test program runs on its own, one of the process's own, started at the first use and stopped
// at exit. Each test gets a database of its own.
//
//   auto url = test::Postgres::Get().CreateDatabase();   // "postgresql://corral@/t_...?host=..."
//   if (!url) GTEST_SKIP() << test::Postgres::Get().why_not();
#pragma once

#include <optional>
#include <string>

namespace corral::test {

class Postgres {
 public:
  static Postgres& Get();

  // A new, empty database; its connection string. nullopt (and why_not() says why) when no
  // server runs here.
  std::optional<std::string> CreateDatabase();
  // Drops a database CreateDatabase made, ending its connections first.
  void DropDatabase(const std::string& url);
  // The server's own database "postgres", for what is done from outside a test's database.
  std::string AdminUrl() const { return "postgresql://corral@/postgres?host=" + dir_; }
  // Runs SQL as the superuser in the database of `url`; the first column of the last row ("" if
  // none). Fails the running test on an error.
  std::string Exec(const std::string& url, const std::string& sql);

  const std::string& why_not() const { return why_not_; }

 private:
  Postgres();
  ~Postgres();
  std::string dir_;      // the server's socket directory
  bool own_ = false;     // started by this process (stopped at exit)
  std::string why_not_;
  int next_ = 0;
};

}  // namespace corral::test
