// Internal (not part of the API; public only because the header-only asio::pg::Client uses
// it too): what reads have shown of each copy's latency (CopyLatency: an EWMA and the 95th
// percentile of its last 64 answers), whether a replica is used less because it answers far
// slower than the primary (SlowCopy and judge_replica(): outlier ejection), how far its replay
// trails what it received (ReplayLag), and the budget of hedged reads (HedgeBudget). Compiled
// in holdfast::pg, so the blocking pg::Database (src/pg/hedge.cpp, replica_state.cpp) and the
// Client (adapters/asio_pg_attempts.hpp) decide with the same code. All of it atomics: no lock
// and no allocation on a read's way. ADRs 0041, 0050.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "holdfast/core/clock.hpp"

namespace holdfast::pg::detail {

// A copy's latency, from the answers its reads got. Concurrent records may interleave: each
// is an estimate, and a lost EWMA step or a ring slot written twice changes it by one sample.
class CopyLatency {
 public:
  static constexpr std::size_t kRing = 64;
  // The p95 is recomputed every kRefresh answers (a sort of 64 values), and known from the
  // kRefresh-th on.
  static constexpr std::uint64_t kRefresh = 16;

  // An answer after `latency` (> 0).
  void record(Duration latency) noexcept;
  // The EWMA (weight 1/8) of the answers' latency; zero before the first.
  [[nodiscard]] Duration recent() const noexcept {
    return std::chrono::nanoseconds(ewma_ns_.load(std::memory_order_relaxed));
  }
  // The 95th percentile of the last 64 answers (of all of them while fewer); zero before
  // kRefresh answers.
  [[nodiscard]] Duration p95() const noexcept {
    return std::chrono::nanoseconds(p95_ns_.load(std::memory_order_relaxed));
  }
  [[nodiscard]] std::uint64_t answers() const noexcept {
    return count_.load(std::memory_order_relaxed);
  }

 private:
  std::atomic<std::int64_t> ewma_ns_{0};
  std::atomic<std::uint64_t> count_{0};
  std::atomic<std::int64_t> p95_ns_{0};
  std::array<std::atomic<std::int64_t>, kRing> ring_{};
};

// The rule that makes a replica slow (DatabaseOptions::slow_copy_*).
struct SlowCopyRule {
  Duration floor = std::chrono::milliseconds(20);  // never slow below this; 0: rule off
  double factor = 4.0;                             // x the primary's recent latency
  Duration probe_every = std::chrono::milliseconds(200);
  int slow_in_row = 3;     // slow answers (or hedges lost) in a row that make it slow
  int fast_to_return = 2;  // fast probes in a row that bring it back
};

// Above this an answer is slow: `rule.factor` x the primary's recent latency, at least
// `rule.floor`. The primary unknown yet (zero): the floor.
[[nodiscard]] Duration slow_threshold(Duration primary_recent, const SlowCopyRule& rule) noexcept;

// Whether a replica is used for reads: after `slow_in_row` slow answers in a row (no fast one
// between) it is ejected: reads skip it, but for one probe read every `probe_every`; after
// `fast_to_return` fast probes in a row it is used again. Thread-safe.
class SlowCopy {
 public:
  enum class Use : std::uint8_t {
    kRead,   // used as usual
    kProbe,  // ejected; this read is its probe
    kSkip,   // ejected; the read goes elsewhere
  };
  explicit SlowCopy(SlowCopyRule rule = {}) noexcept : rule_(rule) {}

  // Whether a read at `now` uses the copy. At most one kProbe per probe_every.
  [[nodiscard]] Use use(TimePoint now) noexcept;
  // The same for a read that comes back to the replica after the primary failed it: a slow
  // answer beats none, so it reads whatever the copy's state (and is no probe).
  [[nodiscard]] Use use(TimePoint now, bool primary_failed) noexcept {
    return primary_failed || !on() ? Use::kRead : use(now);
  }
  // Whether the rule is on (floor > 0).
  [[nodiscard]] bool on() const noexcept { return rule_.floor > Duration::zero(); }
  // An answer slower than the threshold, or a hedge the copy lost, at `now`. True when it
  // ejected the copy.
  bool slow(TimePoint now) noexcept;
  // An answer within the threshold. True when it brought the copy back.
  bool fast() noexcept;
  [[nodiscard]] bool ejected() const noexcept { return ejected_.load(std::memory_order_relaxed); }
  // Whether its last answer was slow (it may be about to be ejected); never while the rule
  // is off.
  [[nodiscard]] bool suspect() const noexcept {
    return on() && slow_run_.load(std::memory_order_relaxed) != 0;
  }
  [[nodiscard]] std::uint64_t ejections() const noexcept {
    return ejections_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] const SlowCopyRule& rule() const noexcept { return rule_; }

 private:
  SlowCopyRule rule_;
  std::atomic<bool> ejected_{false};
  std::atomic<int> slow_run_{0};
  std::atomic<int> fast_run_{0};
  std::atomic<std::int64_t> next_probe_ns_{0};
  std::atomic<std::uint64_t> ejections_{0};
};

// A budget of hedges: each standby read earns `per_read` of one (0.02: 2 hedges per 100
// reads), up to kCap saved; a hedge spends one. It starts full, as a token bucket does: a
// copy that turns slow soon after the start is hedged around as well. Thread-safe.
class HedgeBudget {
 public:
  static constexpr std::int64_t kOne = 1000;
  static constexpr std::int64_t kCap = 10 * kOne;
  explicit HedgeBudget(double per_read) noexcept
      : earn_(static_cast<std::int64_t>(per_read * static_cast<double>(kOne))),
        tokens_(earn_ > 0 ? kCap : 0) {}
  // A standby read.
  void earn() noexcept {
    if (earn_ > 0 && tokens_.load(std::memory_order_relaxed) < kCap) {
      tokens_.fetch_add(earn_, std::memory_order_relaxed);
    }
  }
  // Takes one hedge; false when fewer than one is saved.
  bool spend() noexcept;
  // Gives back one taken by spend() for a hedge that could not be sent.
  void refund() noexcept { tokens_.fetch_add(kOne, std::memory_order_relaxed); }
  [[nodiscard]] bool enabled() const noexcept { return earn_ > 0; }

 private:
  std::int64_t earn_;
  std::atomic<std::int64_t> tokens_;
};

// How far a replica's replay trails the WAL it has received, from what its reads report (a
// replay paused, or too slow to keep up): its answers are that much older than it could
// give. Concurrent observations may interleave: positions only grow, and the answer is a
// lower bound of the lag.
class ReplayLag {
 public:
  // The replica had received WAL up to `received` and replayed it up to `replayed` at
  // `now`: how long it has been behind WAL it had already received (zero when it is not).
  Duration observe(std::uint64_t replayed, std::uint64_t received, TimePoint now) noexcept;
  // Starts again (the replica failed, or is no replica any more).
  void forget() noexcept;

 private:
  std::atomic<std::uint64_t> target_{0};   // received, not yet replayed, when first seen
  std::atomic<std::int64_t> since_ns_{0};  // when it was first seen
};

// What a pg::Database (an Endpoint's) or an asio::pg::Client knows of one copy: its speed
// and, for a replica, how far its replay trails.
struct CopyState {
  explicit CopyState(const SlowCopyRule& rule) noexcept : slow(rule) {}
  CopyLatency latency;  // of its reads' answers
  SlowCopy slow;        // replicas only
  ReplayLag lag;        // replicas only
};

// What a replica's answer after `latency` says of its speed, `primary_recent` being the
// primary's recent read latency (CopyLatency::recent()): the latency is recorded, and the
// answer is slow (SlowCopy::slow()) above slow_threshold(), else fast. A hedge the replica
// lost (`lost_hedge`: the primary answered first, or its try was given up) is slow and its
// latency is not recorded (the answer never came). While the rule is off only the latency is
// recorded. True when it ejected the replica.
bool judge_replica(CopyState& replica, Duration primary_recent, bool lost_hedge, Duration latency,
                   TimePoint now) noexcept;

}  // namespace holdfast::pg::detail
