// Internal: the simulated database's copies (a primary and standbys), each with its workers
// and its queue, and the work sent to them. One piece of work is a *leg*: an attempt, or the
// hedge of one, on one copy. A leg is queued or running until its copy finishes it, or until
// it is cancelled (the other leg of a hedged read answered first): then its worker is free at
// once, as a cancelled statement frees its backend.
#pragma once

#include <cstdint>
#include <vector>

#include "holdfast/core/random.hpp"
#include "holdfast/sim.hpp"
#include "load_model.hpp"
#include "queues.hpp"

namespace holdfast::sim::detail {

class Copies {
 public:
  Copies(const Scenario& sc, EventQueue& events, Random service_rng, Random straggler_rng);

  [[nodiscard]] int count() const noexcept { return static_cast<int>(copies_.size()); }
  // The copy a slow-copy trigger slows: the last standby, or the primary alone.
  [[nodiscard]] int slow_copy() const noexcept { return count() - 1; }

  // What became of a leg sent to a copy.
  enum class Sent : std::uint8_t { kTaken, kQueueFull };
  // Sends the attempt (slot, tag) of a request to copy `c` now (`now_ns`). Taken: it runs
  // or waits in the copy's queue (frozen: it waits, or is dropped unanswered when the queue
  // is full, and `ref` stays empty); a kServiceDone event (slot: the leg, tag: its
  // generation) comes when it is done. kQueueFull: refused (53300), nothing scheduled.
  Sent send(int c, std::uint32_t slot, std::uint32_t tag, std::int64_t now_ns, LegRef& ref);

  // The leg behind a kServiceDone event, or nullptr when it is stale (cancelled).
  struct Leg {
    std::uint32_t slot = 0;  // the request
    std::uint32_t tag = 0;   // its attempt
    std::uint32_t generation = 0;
    std::int32_t copy = 0;
    std::int64_t sent_ns = 0;  // when it was sent (its latency is measured from then)
    bool live = false;
    bool running = false;
    bool straggler = false;
  };
  [[nodiscard]] const Leg* finished(std::uint32_t leg, std::uint32_t generation) const noexcept {
    const Leg& l = legs_[leg];
    return l.live && l.generation == generation ? &l : nullptr;
  }
  // Frees the worker of a leg that finished (its event came, not stale), starts queued work
  // and forgets the leg.
  void done(std::uint32_t leg, std::int64_t now_ns);
  // Cancels a leg: a running one frees its worker at once, a queued one is skipped. Nothing
  // when `ref` is empty or stale.
  void cancel(LegRef ref, std::int64_t now_ns);

  // Starts queued work where workers are free (after a thaw).
  void start_queued(std::int64_t now_ns);
  // A hang: no copy starts work while frozen.
  void freeze(bool frozen) noexcept { frozen_ = frozen; }

  // The copy's queue and busy workers, and the totals.
  [[nodiscard]] std::size_t queued(int c) const noexcept { return copies_[c].jobs.size(); }
  [[nodiscard]] int busy(int c) const noexcept { return copies_[c].busy; }
  [[nodiscard]] std::uint32_t queued_total() const noexcept;
  [[nodiscard]] std::uint32_t busy_total() const noexcept;
  // The mean service time of copy `c` now, in ns (a capacity drop or slow copy included).
  [[nodiscard]] double mean_service_ns(int c, std::int64_t now_ns) const noexcept;

  // Whether a drop_abandoned queue skips a job: set by the engine (the request is over).
  using Abandoned = bool (*)(const void* engine, std::uint32_t slot, std::uint32_t tag);
  void on_abandoned(Abandoned test, const void* engine) noexcept {
    abandoned_ = test;
    abandoned_ctx_ = engine;
  }

 private:
  struct Copy {
    int busy = 0;
    JobQueue jobs;  // Job{leg, generation}
  };
  [[nodiscard]] bool active(TriggerKind k, std::int64_t now_ns) const noexcept {
    return sc_.trigger.kind == k && now_ns >= sc_.trigger.start.count() &&
           now_ns < sc_.trigger.end().count();
  }
  void start(std::uint32_t leg, std::int64_t now_ns);
  void start_queued(int c, std::int64_t now_ns);
  std::uint32_t new_leg();
  void free_leg(std::uint32_t leg) noexcept;

  const Scenario& sc_;
  EventQueue& events_;
  ServiceTimes service_times_;
  Random straggler_rng_;
  std::vector<Copy> copies_;
  std::vector<Leg> legs_;
  std::vector<std::uint32_t> free_legs_;
  bool frozen_ = false;
  Abandoned abandoned_ = nullptr;
  const void* abandoned_ctx_ = nullptr;
};

}  // namespace holdfast::sim::detail
