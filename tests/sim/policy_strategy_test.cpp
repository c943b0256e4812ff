// A holdfast strategy run with given Shield options (a policy file's): the simulator uses
// them, and the library defaults given as options change nothing.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "holdfast/sim.hpp"
#include "sim_check.hpp"

namespace holdfast::sim {
namespace {

using std::chrono::seconds;

Scenario short_outage() {
  Scenario s = *builtin_scenario("outage");
  s.trigger.start = seconds(5);
  s.duration = seconds(25);
  return s;
}

TEST(SimPolicyOptions, TheDefaultsGivenAsOptionsGiveTheSameRun) {
  Strategy given = Strategy::holdfast();
  given.options = Shield::Options{};
  const Result<Report> plain = run(short_outage(), Strategy::holdfast());
  const Result<Report> with = run(short_outage(), given);
  ASSERT_TRUE(plain.ok() && with.ok());
  EXPECT_EQ(plain->db_attempts, with->db_attempts);
  EXPECT_EQ(plain->successes, with->successes);
  EXPECT_EQ(plain->breaker_rejections, with->breaker_rejections);
}

TEST(SimPolicyOptions, TheOptionsReachTheShields) {
  Strategy never_opens = Strategy::holdfast();
  Shield::Options o;
  o.breaker.consecutive_failures = 0;
  o.breaker.busy_consecutive_failures = 0;
  o.breaker.minimum_calls = std::numeric_limits<int>::max();
  never_opens.options = o;
  const Result<Report> r = run(short_outage(), never_opens);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->breaker_rejections, 0u);
  const Result<Report> plain = run(short_outage(), Strategy::holdfast());
  ASSERT_TRUE(plain.ok());
  EXPECT_GT(plain->breaker_rejections, 0u);
}

TEST(SimPolicyOptions, TheReadsScheduleIsThePolicys) {
  Strategy st = Strategy::holdfast();
  Shield::Options o;
  o.reads.backoff(Backoff::steps({std::chrono::milliseconds(7)}, Jitter::none()));
  st.options = o;
  ManualClock clock;
  const RetryPolicy p = retry_policy(st, clock);
  EXPECT_EQ(p.backoff().nominal(3), std::chrono::milliseconds(7));
  EXPECT_EQ(p.max_attempts(), st.max_attempts);
  EXPECT_EQ(shield_options(st, clock).reads.backoff().nominal(1), std::chrono::milliseconds(7));
}

// sim --check runs every built-in scenario, the hang included, with the policy's options.
TEST(SimPolicyOptions, TheCheckOfAPolicyRunsTheHangToo) {
  cli::PolicyChoice defaults;
  defaults.path = "defaults";
  ::testing::internal::CaptureStdout();
  const int rc = cli::check_policy(defaults, false);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("6 built-in scenarios"), std::string::npos) << out;
  EXPECT_NE(out.find("  ok    hang "), std::string::npos) << out;
}

// ... and the spike with classes: the library defaults keep critical requests and shed
// background first.
TEST(SimPolicyOptions, TheCheckOfAPolicyJudgesTheClasses) {
  cli::PolicyChoice defaults;
  defaults.path = "defaults";
  ::testing::internal::CaptureStdout();
  const int rc = cli::check_policy(defaults, false);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("  ok    spike+classes "), std::string::npos) << out;
  EXPECT_NE(out.find("served: critical "), std::string::npos) << out;
  // Without a line to wait in, nothing keeps the critical requests' places.
  cli::PolicyChoice no_line;
  no_line.path = "no-line";
  no_line.options.queue_wait = Duration::zero();
  ::testing::internal::CaptureStdout();
  (void)cli::check_policy(no_line, false);
  const std::string refused = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(refused.find("  FAIL  spike+classes "), std::string::npos) << refused;
}

}  // namespace
}  // namespace holdfast::sim
