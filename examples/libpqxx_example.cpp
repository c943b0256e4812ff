// holdfast over libpqxx: a transaction on your pqxx::connection, re-run after a
// serialization failure or deadlock because it says it may be, under a Shield.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <holdfast/adapters/libpqxx.hpp>
#include <pqxx/pqxx>

namespace libpqxx = holdfast::libpqxx;

int main(int argc, char** argv) {
  // A PostgreSQL URL, e.g. postgresql://app@127.0.0.1/club (or HOLDFAST_TEST_PG_URL).
  const char* url = argc > 1 ? argv[1] : std::getenv("HOLDFAST_TEST_PG_URL");
  if (url == nullptr || *url == '\0') return std::puts("no PostgreSQL URL: skipped"), 77;

  pqxx::connection conn(url);
  holdfast::Shield shield("club");
  holdfast::RequestScope request;  // one 6 s retry window for the whole request
  auto total =
      libpqxx::run(shield, holdfast::Operation::transaction(/*rerunnable=*/true, "payments.add"),
                   conn, [](pqxx::work& w) {
                     w.exec("CREATE TEMP TABLE IF NOT EXISTS payments(cents integer NOT NULL)");
                     w.exec("INSERT INTO payments(cents) VALUES (1250)");
                     return w.exec1("SELECT sum(cents) FROM payments")[0].as<long long>();
                   });

  if (!total.ok()) {
    // A lost connection (scope reconnect) stops the loop: reconnect, then call again.
    std::puts(total.status().to_string().c_str());
    return 1;
  }
  std::printf("libpqxx: %lld cents\n", *total);
  return 0;
}
