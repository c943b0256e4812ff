// A program outside the holdfast tree, built against an installed holdfast: with CMake
// (find_package COMPONENTS) or pkg-config. CONSUMER_USES_<COMPONENT> says which of the
// component libraries it links, and then it calls into each, so that the link needs them and
// their dependencies (SQLite, libpq).
#include <cstdint>
#include <cstdio>

#include <holdfast/core/classify.hpp>
#include <holdfast/core/retry.hpp>
#if CONSUMER_USES_SQLITE
#include <holdfast/sqlite/database.hpp>
#endif
#if CONSUMER_USES_PG
#include <holdfast/pg/connection.hpp>
#endif
#if CONSUMER_USES_SIM
#include <holdfast/sim.hpp>
#endif
#if CONSUMER_USES_POLICY
#include <holdfast/policy_file.hpp>
#endif

namespace {

int fail(const char* what) {
  std::fprintf(stderr, "consumer: %s\n", what);
  return 1;
}

}  // namespace

int main() {
  holdfast::ManualClock clock;
  holdfast::RetryPolicy policy;
  policy.clock(clock).seed(1);
  int calls = 0;
  holdfast::Status s = holdfast::retry(policy, holdfast::Operation::read("consumer"), [&] {
    return ++calls < 3 ? holdfast::sqlite_status(5, "database is locked") : holdfast::Status();
  });
  if (!s.ok() || calls != 3) return fail("core: retry did not retry twice and succeed");

#if CONSUMER_USES_SQLITE
  auto db = holdfast::sqlite::Database::open({.path = ":memory:"});
  if (!db.ok()) return fail("sqlite: opening :memory: failed");
  auto one = db->query_one<std::int64_t>("SELECT 1");
  if (!one.ok() || !*one || **one != 1) return fail("sqlite: SELECT 1 did not give 1");
#endif
#if CONSUMER_USES_PG
  // No server needed: libpq refuses the malformed connection string itself.
  auto conn = holdfast::pg::Connection::open("not a connection string");
  if (conn.ok()) return fail("pg: a malformed connection string was accepted");
#endif
#if CONSUMER_USES_SIM
  if (holdfast::sim::builtin_scenario_names().empty()) return fail("sim: no built-in scenario");
  if (!holdfast::sim::builtin_scenario(holdfast::sim::builtin_scenario_names().front()).ok()) {
    return fail("sim: the first built-in scenario does not load");
  }
#endif
#if CONSUMER_USES_POLICY
  // nlohmann-json is private to the library's build: the consumer needs no JSON library.
  auto options = holdfast::parse_policy(R"({"reads": {"max_attempts": 2}})");
  if (!options.ok() || options->reads.max_attempts() != 2) return fail("policy: parse failed");
  if (holdfast::parse_policy(R"({"raeds": {}})").ok()) return fail("policy: a typo was accepted");
#endif
  return 0;
}
