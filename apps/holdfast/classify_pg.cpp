// `holdfast classify --pg URL "SQL"`: says whether holdfast::pg treats a statement as a read
// (retried, on a READ ONLY session, possibly on a replica) or a write, and why. The same
// output shape as the SQLite form:
//
//   $ holdfast classify --pg postgresql://app@127.0.0.1/app "SELECT * FROM game WHERE id = \$1"
//   read because query (SELECT)
//   $ holdfast classify --pg ... "WITH gone AS (DELETE FROM game RETURNING *) SELECT * FROM gone"
//   write because data-modifying statement in WITH (DELETE)
//   $ holdfast classify --pg ... "SELEC 1"
//   error cannot prepare 'SELEC 1': syntax error at or near "SELEC"      (exit code 1)
//
// The first word is "read", "write" or "error", for scripts. The verdict is lexical
// (holdfast::pg::classify_sql); the server is asked only to prepare the statement, on a
// read-only session, so it is checked against the real schema and never run.
#include <fmt/core.h>

#include <chrono>
#include <string>

#include "holdfast/pg/connection.hpp"
#include "holdfast/pg/sql.hpp"

namespace holdfast::cli {

// Prints the verdict for `sql` against the server at `url`; returns the exit code (0, or 1
// for "error").
int classify_pg_sql(const std::string& url, const std::string& sql) {
  pg::ConnectOptions options;
  options.conninfo = url;
  options.application_name = "holdfast classify";
  options.settings = {{"default_transaction_read_only", "on"}, {"statement_timeout", "5000"}};
  options.connect_timeout = std::chrono::seconds(5);
  Result<pg::Connection> conn = pg::Connection::open(options);
  if (!conn.ok()) {
    fmt::print("error cannot connect: {}\n", conn.status().message());
    return 1;
  }
  const pg::SqlClass verdict = pg::classify_sql(sql, conn->standard_conforming_strings());
  if (verdict.kind == pg::SqlKind::kInvalid) {
    fmt::print("error {}\n", verdict.explain());
    return 1;
  }
  // The unnamed statement: parsed and checked by the server, never executed.
  if (Status s = conn->prepare("", sql); !s.ok()) {
    fmt::print("error cannot prepare '{}': {}\n", sql, s.message());
    return 1;
  }
  fmt::print("{} because {}\n", pg::to_string(verdict.kind), verdict.explain());
  return 0;
}

}  // namespace holdfast::cli
