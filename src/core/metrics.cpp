#include "holdfast/core/metrics.hpp"

#include <charconv>
#include <cmath>
#include <vector>

#include "holdfast/detail/stripes.hpp"

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

// One Shield's numbers for one exposition: its counters and its gauges' sources.
struct Source {
  std::string_view name;
  Metrics::Snapshot counters;
  const CircuitBreaker* breaker;
  const RetryThrottle* throttle;
  const ConcurrencyLimit* limit;
};

// An exposition of several Shields: each family's HELP and TYPE lines once, then every
// Shield's samples under it.
class Page {
 public:
  Page(std::span<const Source> sources, std::string& out) : sources_(sources), w_(out) {}

  // samples(source) writes one Shield's samples of the family.
  template <class F>
  void family(std::string_view name, std::string_view type, std::string_view help,
              const F& samples) {
    w_.family(name, type, help);
    for (const Source& s : sources_) {
      w_.db(s.name);
      samples(s);
    }
  }
  void counter(std::string_view name, std::string_view help,
               std::uint64_t Metrics::Snapshot::*field) {
    family(name, "counter", help, [&](const Source& s) { w_.sample(name, s.counters.*field); });
  }
  template <class V>
  void sample(std::string_view name, V value, std::initializer_list<std::string_view> labels = {}) {
    w_.sample(name, value, labels);
  }
  // True when some Shield has a gauge source at `member`.
  template <class T>
  [[nodiscard]] bool any(const T* Source::*member) const {
    for (const Source& s : sources_) {
      if (s.*member != nullptr) return true;
    }
    return false;
  }

 private:
  std::span<const Source> sources_;
  Writer w_;
};

void write_counters(Page& page) {
  using Snapshot = Metrics::Snapshot;
  page.counter("holdfast_attempts_total",
               "Attempts that reached the database (successes plus faults).", &Snapshot::attempts);
  page.counter("holdfast_successes_total", "Attempts that succeeded.", &Snapshot::successes);
  page.family("holdfast_faults_total", "counter",
              "Failed attempts by retry scope and by whether the fault counts as overload.",
              [&](const Source& s) {
                for (RetryScope scope : kScopeOrder) {
                  const auto& by = s.counters.faults[static_cast<std::size_t>(scope)];
                  page.sample("holdfast_faults_total", by[0],
                              {"scope", to_string(scope), "overload", "false"});
                  page.sample("holdfast_faults_total", by[1],
                              {"scope", to_string(scope), "overload", "true"});
                }
              });
  page.counter("holdfast_retries_total", "Retries started after a failed attempt.",
               &Snapshot::retries);
  page.counter("holdfast_windows_spent_total",
               "Requests that gave up because their retry window was spent.",
               &Snapshot::windows_spent);
  page.counter("holdfast_throttled_total",
               "Requests that gave up because the retry throttle refused a retry.",
               &Snapshot::throttled);
  page.counter("holdfast_breaker_rejected_total",
               "Requests failed at once because the circuit breaker was open and the next probe "
               "did not fit in their window.",
               &Snapshot::breaker_rejected);
  page.counter("holdfast_breaker_waits_total",
               "Times a request waited inside its window for the circuit breaker's next probe.",
               &Snapshot::breaker_waits);
  page.counter("holdfast_at_capacity_total",
               "Requests failed at once because the database was at the concurrency the Shield "
               "learned it answers, and their wait for a place would have been too long.",
               &Snapshot::at_capacity);
  page.family("holdfast_at_capacity_by_class_total", "counter",
              "Requests failed at once by the concurrency limit, by their class (critical, "
              "normal, background): under overload the lowest class is shed first.",
              [&](const Source& s) {
                for (Priority p : {Priority::kCritical, Priority::kNormal, Priority::kBackground}) {
                  page.sample("holdfast_at_capacity_by_class_total",
                              s.counters.at_capacity_by_class[static_cast<std::size_t>(p)],
                              {"class", to_string(p)});
                }
              });
  page.counter("holdfast_silences_total",
               "Times the server was found silent: work waited with nothing heard from it, and "
               "a check got no answer either; the breaker opened at once.",
               &Snapshot::silences);
  page.counter("holdfast_confirmed_writes_missing_total",
               "Writes holdfast confirmed that the writer after a change of writer (a failover, "
               "a split brain) did not hold: checked by idempotency key, else by commit position "
               "and timeline.",
               &Snapshot::confirmed_writes_missing);
  page.counter("holdfast_confirmed_writes_unverified_total",
               "Confirmed writes a change of writer put in question that could not be checked "
               "(no idempotency key, and the writer's timeline history could not be read).",
               &Snapshot::confirmed_writes_unverified);
  page.counter("holdfast_split_brains_total",
               "Times the writer was found on an older timeline than the newest this process "
               "had confirmed writes on.",
               &Snapshot::split_brains);
  page.family("holdfast_breaker_transitions_total", "counter",
              "Circuit breaker state changes, by the state entered.", [&](const Source& s) {
                for (BreakerState state : kStateOrder) {
                  page.sample("holdfast_breaker_transitions_total",
                              s.counters.transitions[static_cast<std::size_t>(state)],
                              {"to", to_string(state)});
                }
              });
}

// Gauges are read now, from the objects attached; a family no Shield has is left out.
void write_gauges(Page& page) {
  if (page.any(&Source::breaker)) {
    page.family("holdfast_breaker_state", "gauge",
                "1 for the circuit breaker's current state, 0 for the others.",
                [&](const Source& s) {
                  if (s.breaker == nullptr) return;
                  const BreakerState current = s.breaker->state();
                  for (BreakerState state : kStateOrder) {
                    page.sample("holdfast_breaker_state", std::uint64_t{state == current ? 1u : 0u},
                                {"state", to_string(state)});
                  }
                });
  }
  if (page.any(&Source::throttle)) {
    page.family("holdfast_retry_tokens", "gauge",
                "Tokens in the retry throttle's bucket (retries need more than half of the "
                "maximum).",
                [&](const Source& s) {
                  if (s.throttle != nullptr)
                    page.sample("holdfast_retry_tokens", s.throttle->tokens());
                });
  }
  if (page.any(&Source::limit)) {
    const auto limit_gauge = [&](std::string_view name, std::string_view help, auto value) {
      page.family(name, "gauge", help, [&](const Source& s) {
        if (s.limit != nullptr) page.sample(name, value(*s.limit));
      });
    };
    limit_gauge("holdfast_concurrency_limit",
                "The concurrency the Shield learned the database answers at its normal latency.",
                [](const ConcurrencyLimit& l) { return l.limit(); });
    limit_gauge("holdfast_in_flight", "Calls in flight to the database.",
                [](const ConcurrencyLimit& l) { return static_cast<double>(l.in_flight()); });
  }
}

}  // namespace

static_assert(Metrics::kScopes == std::size(kScopeOrder));
static_assert(Metrics::kStates == std::size(kStateOrder));

std::uint64_t Metrics::Snapshot::faults_total() const noexcept {
  std::uint64_t n = 0;
  for (const auto& by_overload : faults)
    n += by_overload[0] + by_overload[1];
  return n;
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
  s.silences = silences_.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < kPriorities; ++i) {
    s.at_capacity_by_class[i] = at_capacity_by_class_[i].load(std::memory_order_relaxed);
  }
  s.confirmed_writes_missing = confirmed_writes_missing_.load(std::memory_order_relaxed);
  s.confirmed_writes_unverified = confirmed_writes_unverified_.load(std::memory_order_relaxed);
  s.split_brains = split_brains_.load(std::memory_order_relaxed);
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
  std::vector<Source> sources;
  sources.reserve(shields.size());
  for (const Labelled& l : shields) {
    const Metrics& m = *l.metrics;
    sources.push_back(Source{l.name, m.snapshot(), m.breaker_.load(std::memory_order_acquire),
                             m.throttle_.load(std::memory_order_acquire),
                             m.limit_.load(std::memory_order_acquire)});
  }
  std::string out;
  out.reserve(3072 * shields.size());
  Page page(sources, out);
  write_counters(page);
  write_gauges(page);
  return out;
}

}  // namespace holdfast
