// holdfast over SQLiteCpp: a statement retried as SQLite judges it (a read as a read, a write
// only when nothing was applied) and a transaction re-run only because it says it may be.
#include <cstdio>

#include <SQLiteCpp/SQLiteCpp.h>
#include <holdfast/adapters/sqlitecpp.hpp>

namespace sqlitecpp = holdfast::sqlitecpp;

int main() {
  SQLite::Database db(":memory:", SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
  db.exec("CREATE TABLE payments(cents INTEGER NOT NULL)");
  holdfast::Shield shield("club");

  holdfast::RequestScope request;  // one 6 s retry window for the whole request
  auto paid = sqlitecpp::run_transaction(
      shield, holdfast::Operation::transaction(/*rerunnable=*/true, "payments.add"), db,
      [](SQLite::Database& d) { return d.exec("INSERT INTO payments(cents) VALUES (1250)"); });

  SQLite::Statement total(db, "SELECT sum(cents) FROM payments");  // judged a read
  auto cents = sqlitecpp::run(shield, db, total, [](SQLite::Statement& q) {
    return q.executeStep() ? q.getColumn(0).getInt64() : 0;
  });

  if (!paid.ok()) return std::puts(paid.status().to_string().c_str()), 1;
  if (!cents.ok()) return std::puts(cents.status().to_string().c_str()), 1;
  std::printf("sqlitecpp: %lld cents\n", static_cast<long long>(*cents));
  return 0;
}
