// Shield options for the tests: seeded schedules, and retries that print nothing.
#pragma once

#include "holdfast/core/shield.hpp"

namespace holdfast::test_support {

inline Shield::Options quiet_options() {
  Shield::Options o;
  o.reads.seed(11).on_retry([](const RetryEvent&) {});
  o.writes.seed(12).on_retry([](const RetryEvent&) {});
  return o;
}

}  // namespace holdfast::test_support
