#include <cstdio>
#include <holdfast/core/classify.hpp>
#include <holdfast/core/retry.hpp>

// Your own database call: locked twice (SQLITE_BUSY), then it answers.
holdfast::Result<int> count_games(int& calls) {
  if (++calls < 3) return holdfast::sqlite_status(5, "database is locked");
  return 42;
}

int main() {
  holdfast::RetryPolicy reads;     // 200/600/1500/3000 ms ±50%, at most 5 attempts
  holdfast::RequestScope request;  // one 6 s retry window for the whole request
  int calls = 0;
  holdfast::RetryStats stats;
  auto games = holdfast::retry(
      reads, holdfast::Operation::read("schedule.games"), [&] { return count_games(calls); },
      &stats);
  if (!games.ok()) return std::puts(games.status().to_string().c_str()), 1;
  std::printf("%d games after %d attempts\n", *games, stats.attempts);
}
