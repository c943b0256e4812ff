#include "holdfast/metrics.hpp"

#include <charconv>
#include <cmath>
#include <vector>

#include "stripes.hpp"

namespace holdfast {
namespace {

constexpr RetryScope kScopeOrder[] = {RetryScope::kNone, RetryScope::kStatement,
                                      RetryScope::kTransaction, RetryScope::kReconnect};
constexpr BreakerState kStateOrder[] = {BreakerState::kClosed, BreakerState::kOpen,
                                        BreakerState::kHalfOpen, BreakerState::kIsolated};

// A label value as the exposition format wants it: backslash, double quote and line feed
// escaped.
void append_label_value(std::string& out, std::string_view value) {
  for (char c : value) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
}

void append_number(std::string& out, std::uint64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

void append_number(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}

  // The db label of the samples that follow.
  void db(std::string_view name) { db_ = name; }

  void family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }

  // One sample; `labels` holds extra label pairs ("scope", "statement", ...).
  template <class V>
  void sample(std::string_view name, V value, std::initializer_list<std::string_view> labels = {}) {
    out_ += name;
    out_ += "{db=\"";
    append_label_value(out_, db_);
    out_ += '"';
    for (auto it = labels.begin(); it != labels.end(); it += 2) {
      out_ += ',';
      out_ += *it;
      out_ += "=\"";
      append_label_value(out_, *(it + 1));
      out_ += '"';
    }
    out_ += "} ";
    append_number(out_, value);
    out_ += '\n';
  }

 private:
  std::string& out_;
  std::string_view db_;
};

}  // namespace

static_assert(Metrics::kScopes == std::size(kScopeOrder));
static_assert(Metrics::kStates == std::size(kStateOrder));

std::uint64_t Metrics::Snapshot::faults_total() const noexcept {
  std::uint64_t n = 0;
  for (const auto& by_overload : faults)
    n += by_overload[0] + by_overload[1];
  return n;
}

void Metrics::count_success() noexcept {
  static_assert(kCells == detail::kStripes);
  const unsigned stripe = detail::thread_stripe();
  detail::stripe_add(successes_[stripe].value, stripe, 1);
}

void Metrics::count_fault(const Fault& fault) noexcept {
  faults_[static_cast<std::size_t>(fault.scope) % kScopes][fault.overload ? 1 : 0].fetch_add(
      1, std::memory_order_relaxed);
}

Metrics::Snapshot Metrics::snapshot() const noexcept {
  Snapshot s;
  for (const Cell& c : successes_)
    s.successes += c.value.load(std::memory_order_relaxed);
  s.retries = retries_.load(std::memory_order_relaxed);
  s.windows_spent = windows_spent_.load(std::memory_order_relaxed);
  s.throttled = throttled_.load(std::memory_order_relaxed);
  s.breaker_rejected = breaker_rejected_.load(std::memory_order_relaxed);
  s.breaker_waits = breaker_waits_.load(std::memory_order_relaxed);
  s.at_capacity = at_capacity_.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < kScopes; ++i) {
    for (std::size_t j = 0; j < 2; ++j)
      s.faults[i][j] = faults_[i][j].load(std::memory_order_relaxed);
  }
  for (std::size_t i = 0; i < kStates; ++i) {
    s.transitions[i] = transitions_[i].load(std::memory_order_relaxed);
  }
  s.attempts = s.successes + s.faults_total();
  return s;
}

std::string Metrics::prometheus_text(std::string_view shield_name) const {
  const Labelled one[] = {{this, shield_name}};
  return prometheus_text(one);
}

std::string Metrics::prometheus_text(std::span<const Labelled> shields) {
  std::vector<Snapshot> snaps;
  snaps.reserve(shields.size());
  for (const Labelled& l : shields)
    snaps.push_back(l.metrics->snapshot());
  std::string out;
  out.reserve(3072 * shields.size());
  Writer w(out);
  // One family: its HELP and TYPE lines once, then every shield's samples.
  const auto family = [&](std::string_view name, std::string_view type, std::string_view help,
                          const auto& samples) {
    w.family(name, type, help);
    for (std::size_t i = 0; i < shields.size(); ++i) {
      w.db(shields[i].name);
      samples(snaps[i], *shields[i].metrics);
    }
  };
  const auto counter = [&](std::string_view name, std::string_view help,
                           std::uint64_t Snapshot::*field) {
    family(name, "counter", help,
           [&](const Snapshot& s, const Metrics&) { w.sample(name, s.*field); });
  };

  counter("holdfast_attempts_total", "Attempts that reached the database (successes plus faults).",
          &Snapshot::attempts);
  counter("holdfast_successes_total", "Attempts that succeeded.", &Snapshot::successes);
  family(
      "holdfast_faults_total", "counter",
      "Failed attempts by retry scope and by whether the fault counts as overload.",
      [&](const Snapshot& s, const Metrics&) {
        for (RetryScope scope : kScopeOrder) {
          const auto& by = s.faults[static_cast<std::size_t>(scope)];
          w.sample("holdfast_faults_total", by[0],
                   {"scope", to_string(scope), "overload", "false"});
          w.sample("holdfast_faults_total", by[1], {"scope", to_string(scope), "overload", "true"});
        }
      });
  counter("holdfast_retries_total", "Retries started after a failed attempt.", &Snapshot::retries);
  counter("holdfast_windows_spent_total",
          "Requests that gave up because their retry window was spent.", &Snapshot::windows_spent);
  counter("holdfast_throttled_total",
          "Requests that gave up because the retry throttle refused a retry.",
          &Snapshot::throttled);
  counter("holdfast_breaker_rejected_total",
          "Requests failed at once because the circuit breaker was open and the next probe "
          "did not fit in their window.",
          &Snapshot::breaker_rejected);
  counter("holdfast_breaker_waits_total",
          "Times a request waited inside its window for the circuit breaker's next probe.",
          &Snapshot::breaker_waits);
  counter("holdfast_at_capacity_total",
          "Requests failed at once because the database was at the concurrency the Shield "
          "learned it answers, and their wait for a place would have been too long.",
          &Snapshot::at_capacity);
  family("holdfast_breaker_transitions_total", "counter",
         "Circuit breaker state changes, by the state entered.",
         [&](const Snapshot& s, const Metrics&) {
           for (BreakerState state : kStateOrder) {
             w.sample("holdfast_breaker_transitions_total",
                      s.transitions[static_cast<std::size_t>(state)], {"to", to_string(state)});
           }
         });
  const auto any = [&](const auto& member) {
    for (const Labelled& l : shields) {
      if ((l.metrics->*member).load(std::memory_order_acquire) != nullptr) return true;
    }
    return false;
  };
  if (any(&Metrics::breaker_)) {
    family("holdfast_breaker_state", "gauge",
           "1 for the circuit breaker's current state, 0 for the others.",
           [&](const Snapshot&, const Metrics& m) {
             const CircuitBreaker* b = m.breaker_.load(std::memory_order_acquire);
             if (b == nullptr) return;
             const BreakerState current = b->state();
             for (BreakerState state : kStateOrder) {
               w.sample("holdfast_breaker_state", std::uint64_t{state == current ? 1u : 0u},
                        {"state", to_string(state)});
             }
           });
  }
  if (any(&Metrics::throttle_)) {
    family("holdfast_retry_tokens", "gauge",
           "Tokens in the retry throttle's bucket (retries need more than half of the "
           "maximum).",
           [&](const Snapshot&, const Metrics& m) {
             if (const RetryThrottle* t = m.throttle_.load(std::memory_order_acquire)) {
               w.sample("holdfast_retry_tokens", t->tokens());
             }
           });
  }
  if (any(&Metrics::limit_)) {
    const auto limit_gauge = [&](std::string_view name, std::string_view help, auto value) {
      family(name, "gauge", help, [&](const Snapshot&, const Metrics& m) {
        if (const ConcurrencyLimit* l = m.limit_.load(std::memory_order_acquire)) {
          w.sample(name, value(*l));
        }
      });
    };
    limit_gauge("holdfast_concurrency_limit",
                "The concurrency the Shield learned the database answers at its normal latency.",
                [](const ConcurrencyLimit& l) { return l.limit(); });
    limit_gauge("holdfast_in_flight", "Calls in flight to the database.",
                [](const ConcurrencyLimit& l) { return static_cast<double>(l.in_flight()); });
  }
  return out;
}

}  // namespace holdfast
