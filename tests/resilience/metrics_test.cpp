#include "holdfast/core/metrics.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "holdfast/core/classify.hpp"
#include "holdfast/core/shield.hpp"

namespace holdfast {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

// ---- a strict parser of the Prometheus text exposition format (version 0.0.4) ----------
//
// Accepts only what the format allows and what a scraper would read unambiguously:
//   # HELP <name> <text>     at most once per family, text escapes only \\ and \n
//   # TYPE <name> <type>     at most once, before the family's first sample
//   <name>[{<label>="<value>",...}] <value>[ <timestamp>]
// Metric names [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* (not "__..."),
// label values with escapes \\ \" \n only, values as Go's ParseFloat reads them (plus
// NaN, +Inf, -Inf). A family's samples are contiguous; no series appears twice; counters
// are finite and not negative; every line ends with \n; no blank or other comment lines.

struct Sample {
  std::map<std::string, std::string> labels;
  double value = 0;
};
struct Family {
  std::string type = "untyped";
  std::string help;
  bool has_type = false;
  bool has_help = false;
  std::vector<Sample> samples;
};
using Exposition = std::map<std::string, Family>;

class ParseError : public std::runtime_error {
 public:
  ParseError(int line, const std::string& what)
      : std::runtime_error("line " + std::to_string(line) + ": " + what) {}
};

bool is_name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}
bool is_name_char(char c) {
  return is_name_start(c) || std::isdigit(static_cast<unsigned char>(c));
}
bool is_label_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool is_label_char(char c) {
  return is_label_start(c) || std::isdigit(static_cast<unsigned char>(c));
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Exposition parse() {
    if (text_.empty()) return {};
    if (text_.back() != '\n') throw ParseError(0, "the text must end with a line feed");
    std::size_t start = 0;
    while (start < text_.size()) {
      const std::size_t end = text_.find('\n', start);
      ++line_;
      parse_line(text_.substr(start, end - start));
      start = end + 1;
    }
    return std::move(families_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw ParseError(line_, what); }

  void parse_line(std::string_view l) {
    if (l.empty()) fail("blank line");
    if (l[0] == '#') return parse_comment(l);
    std::size_t i = 0;
    const std::string name = metric_name(l, i);
    Sample sample;
    if (i < l.size() && l[i] == '{') sample.labels = labels(l, i);
    if (i >= l.size() || l[i] != ' ') fail("expected a space before the value");
    ++i;
    const std::size_t value_end = l.find(' ', i);
    sample.value =
        number(l.substr(i, value_end == std::string_view::npos ? l.npos : value_end - i));
    if (value_end != std::string_view::npos) {
      const std::string_view ts = l.substr(value_end + 1);
      if (ts.empty() || ts.find_first_not_of("-0123456789") != std::string_view::npos) {
        fail("bad timestamp");
      }
    }
    Family& f = families_[name];
    if (!f.has_type) fail("sample of " + name + " before its TYPE line");
    if (current_ != name && started_.count(name))
      fail("samples of " + name + " are not contiguous");
    current_ = name;
    started_.insert(name);
    for (const Sample& other : f.samples) {
      if (other.labels == sample.labels) fail("duplicate series of " + name);
    }
    if (f.type == "counter" && !(sample.value >= 0 && sample.value < 1e308)) {
      fail("counter " + name + " must be finite and not negative");
    }
    f.samples.push_back(std::move(sample));
  }

  void parse_comment(std::string_view l) {
    std::size_t i;
    bool help;
    if (l.rfind("# HELP ", 0) == 0) {
      help = true;
      i = 7;
    } else if (l.rfind("# TYPE ", 0) == 0) {
      help = false;
      i = 7;
    } else {
      fail("unexpected comment line");
    }
    const std::string name = metric_name(l, i);
    if (i >= l.size() || l[i] != ' ') fail("expected a space after the name");
    const std::string_view rest = l.substr(i + 1);
    if (started_.count(name))
      fail(std::string(help ? "HELP" : "TYPE") + " after samples of " + name);
    Family& f = families_[name];
    if (help) {
      if (f.has_help) fail("second HELP for " + name);
      for (std::size_t k = 0; k < rest.size(); ++k) {
        if (rest[k] == '\\' &&
            (k + 1 >= rest.size() || (rest[k + 1] != '\\' && rest[k + 1] != 'n'))) {
          fail("bad escape in HELP");
        }
        if (rest[k] == '\\') ++k;
      }
      f.has_help = true;
      f.help = std::string(rest);
    } else {
      if (f.has_type) fail("second TYPE for " + name);
      static const std::set<std::string_view> kTypes = {"counter", "gauge", "histogram", "summary",
                                                        "untyped"};
      if (!kTypes.count(rest)) fail("unknown type '" + std::string(rest) + "'");
      f.has_type = true;
      f.type = std::string(rest);
    }
  }

  std::string metric_name(std::string_view l, std::size_t& i) const {
    const std::size_t start = i;
    if (i >= l.size() || !is_name_start(l[i])) fail("bad metric name");
    while (i < l.size() && is_name_char(l[i]))
      ++i;
    return std::string(l.substr(start, i - start));
  }

  std::map<std::string, std::string> labels(std::string_view l, std::size_t& i) const {
    std::map<std::string, std::string> out;
    ++i;  // '{'
    while (true) {
      if (i < l.size() && l[i] == '}') {
        ++i;
        return out;
      }
      const std::size_t start = i;
      if (i >= l.size() || !is_label_start(l[i])) fail("bad label name");
      while (i < l.size() && is_label_char(l[i]))
        ++i;
      const std::string name(l.substr(start, i - start));
      if (name.rfind("__", 0) == 0) fail("reserved label name " + name);
      if (i + 1 >= l.size() || l[i] != '=' || l[i + 1] != '"') fail("expected =\" after label");
      i += 2;
      std::string value;
      while (true) {
        if (i >= l.size()) fail("unterminated label value");
        const char c = l[i++];
        if (c == '"') break;
        if (c == '\\') {
          if (i >= l.size()) fail("unterminated escape");
          const char e = l[i++];
          if (e == '\\')
            value += '\\';
          else if (e == '"')
            value += '"';
          else if (e == 'n')
            value += '\n';
          else
            fail("bad escape in label value");
        } else {
          value += c;
        }
      }
      if (!out.emplace(name, value).second) fail("label " + name + " twice");
      if (i < l.size() && l[i] == ',') {
        ++i;
      } else if (i >= l.size() || l[i] != '}') {
        fail("expected , or } after a label");
      }
    }
  }

  double number(std::string_view v) const {
    if (v == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (v == "+Inf") return std::numeric_limits<double>::infinity();
    if (v == "-Inf") return -std::numeric_limits<double>::infinity();
    if (v.empty() || v.find_first_not_of("+-0123456789.eE") != std::string_view::npos) {
      fail("bad value '" + std::string(v) + "'");
    }
    const std::string s(v);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size()) fail("bad value '" + s + "'");
    return d;
  }

  std::string_view text_;
  int line_ = 0;
  Exposition families_;
  std::set<std::string> started_;
  std::string current_;
};

Exposition parse(std::string_view text) {
  return Parser(text).parse();
}

double value_of(const Exposition& e, const std::string& family,
                const std::map<std::string, std::string>& labels) {
  const auto it = e.find(family);
  if (it == e.end()) throw std::runtime_error("no family " + family);
  for (const Sample& s : it->second.samples) {
    if (s.labels == labels) return s.value;
  }
  throw std::runtime_error("no such series of " + family);
}

// ---- the parser is strict (so the tests below can fail) ---------------------------------

TEST(ExpositionParser, AcceptsAWellFormedText) {
  const Exposition e = parse(
      "# HELP x_total Things.\n# TYPE x_total counter\nx_total{db=\"a\",k=\"v\"} 3\n"
      "x_total{db=\"b\"} 4 1700000000000\n# TYPE g gauge\ng -1.5e3\n");
  EXPECT_EQ(e.at("x_total").samples.size(), 2u);
  EXPECT_EQ(e.at("g").samples.at(0).value, -1500);
}

TEST(ExpositionParser, RejectsWhatTheFormatDoesNotAllow) {
  const std::vector<std::string> bad = {
      "x 1\n",                                                                // no TYPE
      "# TYPE x counter\nx 1",                                                // no final line feed
      "# TYPE x counter\nx{db=\"a\"} 1\nx{db=\"a\"} 2\n",                     // duplicate series
      "# TYPE x counter\n# TYPE x counter\nx 1\n",                            // TYPE twice
      "# TYPE x counter\nx 1\n# HELP x late\n",                               // HELP after samples
      "# TYPE x counter\n# TYPE y gauge\nx{a=\"1\"} 1\ny 1\nx{a=\"2\"} 1\n",  // not contiguous
      "# TYPE x counter\nx{db=a} 1\n",                                        // unquoted value
      "# TYPE x counter\nx{db=\"a\\t\"} 1\n",                                 // bad escape
      "# TYPE x counter\nx{1db=\"a\"} 1\n",                                   // bad label name
      "# TYPE x counter\nx{__db=\"a\"} 1\n",                                  // reserved label name
      "# TYPE x counter\nx -1\n",                                             // negative counter
      "# TYPE x counter\nx one\n",                                            // not a number
      "# TYPE x sometimes\nx 1\n",                                            // unknown type
      "# TYPE 9x counter\n9x 1\n",                                            // bad metric name
      "# TYPE x counter\n\nx 1\n",                                            // blank line
      "# a comment\n",                                                        // stray comment
  };
  for (const std::string& text : bad) {
    EXPECT_THROW(parse(text), ParseError) << text;
  }
}

// ---- the metrics text --------------------------------------------------------------------

TEST(MetricsText, EveryFamilyParsesWithHelpTypeAndTheDbLabel) {
  ManualClock clock;
  Shield shield("main", clock);
  const Exposition e = parse(shield.metrics_text());
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"holdfast_attempts_total", "counter"},
      {"holdfast_successes_total", "counter"},
      {"holdfast_faults_total", "counter"},
      {"holdfast_retries_total", "counter"},
      {"holdfast_windows_spent_total", "counter"},
      {"holdfast_throttled_total", "counter"},
      {"holdfast_breaker_rejected_total", "counter"},
      {"holdfast_breaker_waits_total", "counter"},
      {"holdfast_at_capacity_total", "counter"},
      {"holdfast_at_capacity_by_class_total", "counter"},
      {"holdfast_silences_total", "counter"},
      {"holdfast_confirmed_writes_missing_total", "counter"},
      {"holdfast_confirmed_writes_unverified_total", "counter"},
      {"holdfast_split_brains_total", "counter"},
      {"holdfast_breaker_transitions_total", "counter"},
      {"holdfast_breaker_state", "gauge"},
      {"holdfast_retry_tokens", "gauge"},
      {"holdfast_concurrency_limit", "gauge"},
      {"holdfast_in_flight", "gauge"},
  };
  EXPECT_EQ(e.size(), expected.size());
  for (const auto& [name, type] : expected) {
    ASSERT_TRUE(e.count(name)) << name;
    const Family& f = e.at(name);
    EXPECT_EQ(f.type, type) << name;
    EXPECT_TRUE(f.has_help) << name;
    EXPECT_FALSE(f.help.empty()) << name;
    for (const Sample& s : f.samples)
      EXPECT_EQ(s.labels.at("db"), "main") << name;
  }
  EXPECT_EQ(e.at("holdfast_faults_total").samples.size(), 8u);
  EXPECT_EQ(value_of(e, "holdfast_breaker_state", {{"db", "main"}, {"state", "closed"}}), 1);
  EXPECT_EQ(value_of(e, "holdfast_breaker_state", {{"db", "main"}, {"state", "open"}}), 0);
  EXPECT_EQ(value_of(e, "holdfast_retry_tokens", {{"db", "main"}}), 10);
}

// An attempt that holdfast itself refused before the database saw it (a pool in its
// reconnect backoff, an inner Shield) is no attempt: dashboards must not show load the
// database never had.
TEST(MetricsText, ARefusalByHoldfastItselfIsNoAttempt) {
  ManualClock clock;
  Shield shield("main", clock);
  Status shed = Status(Code::kUnavailable, "the pool is in its reconnect backoff",
                       Fault{RetryScope::kReconnect, Outcome::kNotApplied, Pace::kSlow, true});
  shed.with_stop(StopReason::kBreakerOpen, 0, milliseconds(200));
  (void)shield.run(Operation::read(), [&] { return shed; });
  const Exposition e = parse(shield.metrics_text());
  const std::map<std::string, std::string> db = {{"db", "main"}};
  EXPECT_EQ(value_of(e, "holdfast_attempts_total", db), 0);
  EXPECT_EQ(shield.breaker().state(), BreakerState::kClosed);
  // A fault the database gave is one (the control).
  (void)shield.run(Operation::read(), [] { return sqlite_status(1, "syntax error"); });
  EXPECT_EQ(value_of(parse(shield.metrics_text()), "holdfast_attempts_total", db), 1);
}

TEST(MetricsText, CountsWhatTheShieldDid) {
  ManualClock clock;
  Shield::Options o;
  o.reads.on_retry([](const RetryEvent&) {});
  o.throttle.floor_per_second = 0;
  Shield shield("main", o, clock);
  int calls = 0;
  // 2 overload faults then success; one syntax error; then five failures open the breaker.
  (void)shield.run(Operation::read(),
                   [&] { return ++calls <= 2 ? sqlite_status(5, "busy") : Status(); });
  (void)shield.run(Operation::read(), [] { return sqlite_status(1, "syntax error"); });
  for (int i = 0; i < 5; ++i)
    shield.breaker().acquire(clock.now()).record(sqlite_status(5, "busy"));
  const Exposition e = parse(shield.metrics_text());
  const std::map<std::string, std::string> db = {{"db", "main"}};
  EXPECT_EQ(value_of(e, "holdfast_attempts_total", db), 4);
  EXPECT_EQ(value_of(e, "holdfast_successes_total", db), 1);
  EXPECT_EQ(value_of(e, "holdfast_retries_total", db), 2);
  EXPECT_EQ(value_of(e, "holdfast_faults_total",
                     {{"db", "main"}, {"scope", "statement"}, {"overload", "true"}}),
            2);
  EXPECT_EQ(value_of(e, "holdfast_faults_total",
                     {{"db", "main"}, {"scope", "none"}, {"overload", "false"}}),
            1);
  EXPECT_EQ(value_of(e, "holdfast_breaker_transitions_total", {{"db", "main"}, {"to", "open"}}), 1);
  EXPECT_EQ(value_of(e, "holdfast_breaker_state", {{"db", "main"}, {"state", "open"}}), 1);
  EXPECT_EQ(value_of(e, "holdfast_breaker_state", {{"db", "main"}, {"state", "closed"}}), 0);
  EXPECT_DOUBLE_EQ(value_of(e, "holdfast_retry_tokens", db), 10.0 - 2.0 + 0.1);
}

TEST(MetricsText, EscapesTheDatabaseName) {
  Metrics m;
  const std::string name = "we\"ird\\name\nx";
  const Exposition e = parse(m.prometheus_text(name));
  EXPECT_EQ(e.at("holdfast_attempts_total").samples.at(0).labels.at("db"), name);
  EXPECT_FALSE(e.count("holdfast_breaker_state")) << "no breaker attached: no gauge";
}

TEST(Metrics, IncrementsFromManyThreadsAreNotLost) {
  Metrics m;
  std::vector<std::thread> threads;
  for (int t = 0; t < 10; ++t) {  // more threads than owned stripes
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        m.count_success();
        m.count_retry();
        m.count_fault(Fault{RetryScope::kReconnect, Outcome::kUnknown, Pace::kSlow, true});
      }
    });
  }
  for (auto& th : threads)
    th.join();
  const Metrics::Snapshot s = m.snapshot();
  EXPECT_EQ(s.successes, 100000u);
  EXPECT_EQ(s.retries, 100000u);
  EXPECT_EQ(s.faults[static_cast<int>(RetryScope::kReconnect)][1], 100000u);
  EXPECT_EQ(s.attempts, 200000u);
}

}  // namespace
}  // namespace holdfast
