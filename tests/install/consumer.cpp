// A program outside the holdfast tree, built against an installed holdfast.
#include <holdfast/classify.hpp>
#include <holdfast/retry.hpp>

int main() {
  holdfast::ManualClock clock;
  holdfast::RetryPolicy policy;
  policy.clock(clock).seed(1);
  int calls = 0;
  holdfast::Status s = holdfast::retry(policy, holdfast::Operation::read("consumer"), [&] {
    return ++calls < 3 ? holdfast::sqlite_status(5, "database is locked") : holdfast::Status();
  });
  return s.ok() && calls == 3 ? 0 : 1;
}
