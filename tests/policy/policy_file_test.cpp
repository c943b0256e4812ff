// Policy files: a good file gives the Shield options it says; every kind of bad field is an
// error naming the file, the JSON Pointer of the field and what is wrong.
#include "holdfast/policy_file.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>

namespace holdfast {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const std::string kExamples = HOLDFAST_POLICY_EXAMPLES;

std::string error_of(const std::string& text) {
  Result<Shield::Options> r = parse_policy(text, "p.json");
  EXPECT_FALSE(r.ok()) << text;
  if (r.ok()) return {};
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  return std::string(r.status().message());
}

void expect_same_backoff(const Backoff& a, const Backoff& b) {
  for (int n = 1; n <= 6; ++n)
    EXPECT_EQ(a.nominal(n), b.nominal(n)) << "retry " << n;
  EXPECT_EQ(a.jitter().kind(), b.jitter().kind());
  EXPECT_EQ(a.jitter().ratio(), b.jitter().ratio());
}

void expect_same_retry(const RetryPolicy& a, const RetryPolicy& b) {
  EXPECT_EQ(a.max_attempts(), b.max_attempts());
  EXPECT_EQ(a.window(), b.window());
  EXPECT_EQ(a.last_attempt_time(), b.last_attempt_time());
  expect_same_backoff(a.backoff(), b.backoff());
}

TEST(PolicyFile, TheDefaultExampleIsTheLibrarysDefaults) {
  Result<Shield::Options> r = load_policy(kExamples + "/default.json");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Shield::Options d;
  expect_same_retry(r->reads, d.reads);
  expect_same_retry(r->writes, d.writes);
  const CircuitBreaker::Options& b = r->breaker;
  EXPECT_EQ(b.failure_ratio, d.breaker.failure_ratio);
  EXPECT_EQ(b.minimum_calls, d.breaker.minimum_calls);
  EXPECT_EQ(b.window, d.breaker.window);
  EXPECT_EQ(b.window_buckets, d.breaker.window_buckets);
  EXPECT_EQ(b.consecutive_failures, d.breaker.consecutive_failures);
  EXPECT_EQ(b.busy_consecutive_failures, d.breaker.busy_consecutive_failures);
  EXPECT_EQ(b.slow_call_threshold, d.breaker.slow_call_threshold);
  EXPECT_EQ(b.open_initial, d.breaker.open_initial);
  EXPECT_EQ(b.open_max, d.breaker.open_max);
  EXPECT_EQ(b.half_open_probes, d.breaker.half_open_probes);
  EXPECT_EQ(b.probe_successes_to_close, d.breaker.probe_successes_to_close);
  EXPECT_EQ(b.probe_lease, d.breaker.probe_lease);
  EXPECT_EQ(r->throttle.max_tokens, d.throttle.max_tokens);
  EXPECT_EQ(r->throttle.token_ratio, d.throttle.token_ratio);
  EXPECT_EQ(r->throttle.floor_per_second, d.throttle.floor_per_second);
  const ConcurrencyLimit::Options& l = r->limit;
  EXPECT_EQ(l.initial, d.limit.initial);
  EXPECT_EQ(l.min, d.limit.min);
  EXPECT_EQ(l.max, d.limit.max);
  EXPECT_EQ(l.tolerance, d.limit.tolerance);
  EXPECT_EQ(l.smoothing, d.limit.smoothing);
  EXPECT_EQ(l.short_samples, d.limit.short_samples);
  EXPECT_EQ(l.long_samples, d.limit.long_samples);
  EXPECT_EQ(l.retry_share, d.limit.retry_share);
  EXPECT_EQ(r->queue_wait, d.queue_wait);
  EXPECT_EQ(r->probe_wait, d.probe_wait);
}

TEST(PolicyFile, TheNaiveExampleParses) {
  Result<Shield::Options> r = load_policy(kExamples + "/naive.json");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->reads.max_attempts(), 10);
  EXPECT_EQ(r->reads.backoff().max_delay(), Duration::zero());
  EXPECT_EQ(r->breaker.consecutive_failures, 0);
}

TEST(PolicyFile, AnEmptyObjectIsTheDefaults) {
  Result<Shield::Options> r = parse_policy("{}");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_same_retry(r->reads, RetryPolicy::standard());
  EXPECT_EQ(r->breaker.open_max, Shield::shield_breaker().open_max);
}

TEST(PolicyFile, KeysGivenChangeOnlyTheirField) {
  Result<Shield::Options> r = parse_policy(R"({
    "reads": {"max_attempts": 3, "window": "1.5s",
              "backoff": {"base": "100ms", "cap": "2s", "factor": 3, "jitter": "equal"}},
    "writes": {"max_attempts": 1},
    "breaker": {"open_initial": "100ms", "consecutive_failures": 7},
    "throttle": {"token_ratio": 0.2},
    "limit": {"retry_share": 0.5},
    "queue_wait": "0ms", "probe_wait": "2s"})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->reads.max_attempts(), 3);
  EXPECT_EQ(r->reads.window(), milliseconds(1500));
  expect_same_backoff(r->reads.backoff(),
                      Backoff::exponential(milliseconds(100), 3.0, seconds(2), Jitter::equal()));
  EXPECT_EQ(r->writes.max_attempts(), 1);
  EXPECT_EQ(r->writes.window(), RetryPolicy().window());
  EXPECT_EQ(r->breaker.open_initial, milliseconds(100));
  EXPECT_EQ(r->breaker.open_max, Shield::shield_breaker().open_max);
  EXPECT_EQ(r->breaker.consecutive_failures, 7);
  EXPECT_EQ(r->throttle.token_ratio, 0.2);
  EXPECT_EQ(r->throttle.max_tokens, 10.0);
  EXPECT_EQ(r->limit.retry_share, 0.5);
  EXPECT_EQ(r->queue_wait, Duration::zero());
  EXPECT_EQ(r->probe_wait, seconds(2));
}

TEST(PolicyFile, StepsDefaultToProportionalJitterAndExponentialToFull) {
  Result<Shield::Options> r = parse_policy(R"({
    "reads": {"backoff": {"steps": ["10ms", "20ms"]}},
    "writes": {"backoff": {"base": "10ms", "cap": "1s"}}})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->reads.backoff().jitter().kind(), Jitter::Kind::kProportional);
  EXPECT_EQ(r->reads.backoff().jitter().ratio(), 0.5);
  EXPECT_EQ(r->reads.backoff().nominal(3), milliseconds(20));
  EXPECT_EQ(r->writes.backoff().jitter().kind(), Jitter::Kind::kFull);
  EXPECT_EQ(r->writes.backoff().nominal(2), milliseconds(20));
}

TEST(PolicyFile, AnUnknownKeyIsAnErrorNotADefault) {
  EXPECT_EQ(error_of(R"({"reads": {"max_attempt": 3}})"),
            "p.json: /reads/max_attempt: unknown key (known here: max_attempts, backoff, window, "
            "last_attempt_time)");
  EXPECT_NE(error_of(R"({"braker": {}})").find("p.json: /braker: unknown key"), std::string::npos);
  EXPECT_NE(error_of(R"({"breaker": {"open_intial": "1s"}})").find("/breaker/open_intial: unknown"),
            std::string::npos);
}

TEST(PolicyFile, PrioritiesSetTheClassOfOperationsByLabel) {
  Result<Shield::Options> r = parse_policy(
      R"({"priorities": {"payments.create": "critical", "logs.insert": "background"}})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->priorities.size(), 2u);
  EXPECT_EQ(r->priorities.at("payments.create"), Priority::kCritical);
  EXPECT_EQ(r->priorities.at("logs.insert"), Priority::kBackground);
  ManualClock clock;
  Shield shield("main", *r, clock);
  EXPECT_EQ(shield.priority_of(Operation::write("logs.insert")), Priority::kBackground);
  EXPECT_TRUE(parse_policy("{}")->priorities.empty()) << "none by default";
}

TEST(PolicyFile, APriorityThatIsNoClassNamesTheLabel) {
  EXPECT_EQ(error_of(R"({"priorities": {"payments.create": "urgent"}})"),
            "p.json: /priorities/payments.create: must be \"critical\", \"normal\" or "
            "\"background\", got \"urgent\"");
  EXPECT_NE(error_of(R"({"priorities": {"logs.insert": 2}})")
                .find("/priorities/logs.insert: must be \"critical\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"priorities": ["payments.create"]})")
                .find("p.json: /priorities: must be an object of operation labels and classes"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"priorities": {"": "critical"}})").find("must not be empty"),
            std::string::npos);
}

TEST(PolicyFile, ADurationNeedsAUnit) {
  EXPECT_NE(error_of(R"({"queue_wait": 500})")
                .find("p.json: /queue_wait: got a number; a "
                      "duration is a string with a unit"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"reads": {"window": "6"}})").find("/reads/window: \"6\" has no unit"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"probe_wait": "fast s"})").find("/probe_wait: \"fast s\" is not a number"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"reads": {"backoff": {"steps": ["1s", "2 min"]}}})")
                .find("/reads/backoff/steps/1: "),
            std::string::npos);
}

TEST(PolicyFile, AWrongTypeNamesTheField) {
  EXPECT_NE(error_of(R"({"reads": {"max_attempts": "5"}})")
                .find("/reads/max_attempts: must be a whole number, got \"5\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"reads": {"max_attempts": 2.5}})")
                .find("/reads/max_attempts: must be a "
                      "whole number"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"throttle": {"token_ratio": "lots"}})")
                .find("/throttle/token_ratio: must be a number"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"breaker": []})").find("/breaker: must be an object, got a array"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"limit": {"max": 99999999999}})")
                .find("/limit/max: 99999999999 is out "
                      "of range"),
            std::string::npos);
}

TEST(PolicyFile, AValueTheLibraryRefusesNamesTheField) {
  EXPECT_NE(error_of(R"({"reads": {"max_attempts": 0}})")
                .find("/reads/max_attempts: RetryPolicy::max_attempts must be at least 1"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"breaker": {"open_initial": "2s", "open_max": "1s"}})")
                .find("p.json: /breaker/open_max: "),
            std::string::npos);
  EXPECT_NE(error_of(R"({"breaker": {"failure_ratio": 1.5}})").find("/breaker/failure_ratio: "),
            std::string::npos);
  EXPECT_NE(error_of(R"({"throttle": {"max_tokens": 0}})").find("/throttle/max_tokens: "),
            std::string::npos);
  EXPECT_NE(error_of(R"({"limit": {"retry_share": 0}})").find("/limit/retry_share: "),
            std::string::npos);
  EXPECT_NE(error_of(R"({"probe_wait": "-1s"})").find("/probe_wait: must not be negative"),
            std::string::npos);
}

TEST(PolicyFile, ABackoffIsStepsOrExponentialNotBoth) {
  EXPECT_NE(error_of(R"({"reads": {"backoff": {"steps": ["1s"], "base": "1s"}}})")
                .find("/reads/backoff: give either \"steps\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"reads": {"backoff": {}}})").find("/reads/backoff: give either"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"reads": {"backoff": {"base": "1s"}}})").find("/reads/backoff/cap: "),
            std::string::npos);
  EXPECT_NE(error_of(R"({"reads": {"backoff": {"steps": []}}})").find("/reads/backoff/steps: "),
            std::string::npos);
  EXPECT_NE(error_of(R"({"reads": {"backoff": {"steps": ["1s"], "jitter": "lots"}}})")
                .find("/reads/backoff/jitter: \"lots\" is not none, proportional"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"reads": {"backoff": {"steps": ["1s"], "jitter": "full",
                                               "jitter_ratio": 0.1}}})")
                .find("/reads/backoff/jitter_ratio: applies only to"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"reads": {"backoff": {"steps": ["1s"], "jitter_ratio": 2}}})")
                .find("/reads/backoff/jitter_ratio: "),
            std::string::npos);
}

TEST(PolicyFile, NotJsonSaysWhere) {
  const std::string e = error_of("{\"reads\": {,}}");
  EXPECT_EQ(e.rfind("p.json: not JSON: ", 0), 0u) << e;
  EXPECT_NE(e.find("line 1"), std::string::npos) << e;
  EXPECT_NE(error_of("[]").find("p.json: the document: must be an object"), std::string::npos);
}

TEST(PolicyFile, AnEndlessFileIsRefusedNotRead) {
  Result<Shield::Options> r = load_policy("/dev/zero");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(std::string(r.status().message()).find("not a regular file"), std::string::npos)
      << r.status().message();
  // A regular file too large for a policy (sparse: it costs no disk).
  const std::filesystem::path big = std::filesystem::temp_directory_path() /
                                    ("holdfast-policy-big-" + std::to_string(::getpid()));
  { std::ofstream(big).put('{'); }
  std::filesystem::resize_file(big, 4u << 20);
  Result<Shield::Options> huge = load_policy(big.string());
  std::filesystem::remove(big);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(std::string(huge.status().message()).find("larger than 1 MiB"), std::string::npos)
      << huge.status().message();
}

// A number the JSON parser cannot hold used to escape parse_policy() as an exception.
TEST(PolicyFile, ANumberBeyondADoubleIsAnErrorNamingItsFieldNotAnException) {
  std::string e;
  EXPECT_NO_THROW(e = error_of(R"({"breaker": {"failure_ratio": 1e400}})"));
  EXPECT_EQ(e.rfind("p.json: /breaker/failure_ratio: ", 0), 0u) << e;
  EXPECT_NE(e.find("1e400"), std::string::npos) << e;
  EXPECT_NO_THROW(e = error_of(R"({"reads": {"backoff": {"steps": ["1s", -1e999]}}})"));
  EXPECT_EQ(e.rfind("p.json: /reads/backoff/steps/1: ", 0), 0u) << e;
  EXPECT_NO_THROW(e = error_of(R"({"a/b~": {"x": [[1], {"y": 1e400}]}})"));
  EXPECT_EQ(e.rfind("p.json: /a~1b~0/x/1/y: ", 0), 0u) << e;
  EXPECT_NO_THROW(e = error_of("1e400"));
  EXPECT_EQ(e.rfind("p.json: the document: ", 0), 0u) << e;

  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     ("holdfast-policy-1e400-" + std::to_string(::getpid()));
  { std::ofstream(file) << R"({"throttle": {"token_ratio": 1e400}})"; }
  Result<Shield::Options> r = Status(Code::kUnknown, "not run");
  EXPECT_NO_THROW(r = load_policy(file.string()));
  std::filesystem::remove(file);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(std::string(r.status().message()).find("/throttle/token_ratio: "), std::string::npos)
      << r.status().message();
}

// HOLDFAST_POLICY naming a FIFO used to block its reader until a writer came.
TEST(PolicyFile, AFifoOrADeviceIsRefusedWithoutWaiting) {
  const std::filesystem::path fifo = std::filesystem::temp_directory_path() /
                                     ("holdfast-policy-fifo-" + std::to_string(::getpid()));
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::future<Result<Shield::Options>> loading =
      std::async(std::launch::async, [&] { return load_policy(fifo.string()); });
  if (loading.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    // Blocked in open(): a writer that comes and goes lets it return, so the test can end.
    const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
    ADD_FAILURE() << "load_policy() waited for a writer on a FIFO";
  }
  Result<Shield::Options> r = loading.get();
  std::filesystem::remove(fifo);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(std::string(r.status().message()).find("not a regular file"), std::string::npos)
      << r.status().message();
  EXPECT_NE(std::string(r.status().message()).find("a FIFO"), std::string::npos)
      << r.status().message();

  for (const char* device : {"/dev/null", "/tmp"}) {
    Result<Shield::Options> d = load_policy(device);
    ASSERT_FALSE(d.ok()) << device;
    EXPECT_NE(std::string(d.status().message()).find("not a regular file"), std::string::npos)
        << d.status().message();
  }
}

TEST(PolicyFile, AMissingFileIsNotFoundAndNamesThePath) {
  Result<Shield::Options> r = load_policy("/nonexistent/holdfast-policy.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/holdfast-policy.json"), std::string::npos);
}

TEST(PolicyFile, TheEnvironmentNamesTheFile) {
  ::setenv(kPolicyEnvironmentVariable, "/etc/holdfast/policy.json", 1);
  EXPECT_EQ(policy_path_from_environment(), "/etc/holdfast/policy.json");
  ::setenv(kPolicyEnvironmentVariable, "", 1);
  EXPECT_EQ(policy_path_from_environment(), std::nullopt);
  ::unsetenv(kPolicyEnvironmentVariable);
  EXPECT_EQ(policy_path_from_environment(), std::nullopt);
}

}  // namespace
}  // namespace holdfast
