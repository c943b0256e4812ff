// The same three lines on both drivers: open the database, give the request one retry
// window, then read, or write once under an idempotency key. The README shows the parts
// between the [sqlite] and [postgres] markers.
#include <cstdint>
#include <cstdio>
#include <string>

// [sqlite]
#include <holdfast/core/shield.hpp>
#include <holdfast/core/window.hpp>
#include <holdfast/sqlite.hpp>
namespace sqlite = holdfast::sqlite;

int on_sqlite() {
  holdfast::Shield reads("club.reads"), writes("club.writes");
  auto db = sqlite::ResilientDatabase::open({.path = ":memory:"}, reads, writes);
  if (!db.ok() || !db->execute_script("CREATE TABLE payments(cents INTEGER)").ok() ||
      !db->create_idempotency_table().ok())
    return 1;

  holdfast::RequestScope request;  // one 6 s retry window for the whole request
  auto paid = db->once("order-42", [](sqlite::Transaction& tx) {
    return tx.execute("INSERT INTO payments(cents) VALUES (?)", 1250).status();
  });
  auto total = db->query_one<std::int64_t>("SELECT sum(cents) FROM payments");

  if (!paid.ok() || !total.ok()) return 1;
  std::printf("sqlite: %lld cents\n", static_cast<long long>(total->value_or(0)));
  return 0;
}
// [/sqlite]

// [postgres]
#include <holdfast/core/window.hpp>
#include <holdfast/pg.hpp>
namespace pg = holdfast::pg;

int on_postgres(const char* url) {
  auto opened = pg::Database::open({.url = url});
  if (!opened.ok()) return std::puts(opened.status().to_string().c_str()), 1;
  pg::Database& db = **opened;
  if (auto made = db.write("CREATE TABLE IF NOT EXISTS example_payments(cents integer)");
      !made.ok())
    return std::puts(made.status().to_string().c_str()), 1;
  if (auto keys = db.create_idempotency_table(); !keys.ok())
    return std::puts(keys.to_string().c_str()), 1;

  holdfast::RequestScope request;  // one 6 s retry window for the whole request
  auto paid = db.once("example-order-42", [](pg::Transaction& tx) {
    return tx.query("INSERT INTO example_payments(cents) VALUES ($1)", {1250}).status();
  });
  auto total = db.read("SELECT sum(cents) FROM example_payments");

  if (!paid.ok()) return std::puts(paid.status().to_string().c_str()), 1;
  if (!total.ok()) return std::puts(total.status().to_string().c_str()), 1;
  std::printf("postgres: %s cents\n", std::string(total->text(0, 0)).c_str());
  return 0;
}
// [/postgres]

int main(int argc, char** argv) {
  if (on_sqlite() != 0) return 1;
  // With a PostgreSQL URL (e.g. postgresql://app@127.0.0.1/club), the same on PostgreSQL.
  return argc > 1 && argv[1][0] != '\0' ? on_postgres(argv[1]) : 0;
}
