// TrafficRing: the panel's answers per second over the last five minutes, for GET /status.
//
//   TrafficRing ring(clock);
//   ring.record(res.status, /*stale=*/true);     // once per answer, on the request's thread
//   TrafficRing::Window w = ring.window();       // the last kSeconds seconds, oldest first
//
// The panel keeps two: its routes' answers (PanelServer, counted after each route) and the
// answers its HTTP server makes itself before any route runs (http_server.hpp: 503 when a lane
// is full, 408, 4xx); GET /status adds them up, so every answer is counted once.
//
// One slot per second of the window; slot s % kSeconds holds second s. Each counter is one
// 64-bit word: the second it counts (+1, so an all-zero word is "nothing yet") in the high
// 32 bits, the count in the low 32. Counting is a load and a fetch_add when the word already
// holds this second, or one compare-and-swap that restarts the word when it holds an older
// one: no lock, no allocation, and no count is lost at a second's turn. Only a thread that
// stalls inside record() for a whole window (five minutes) could put its one count in the
// wrong second.
//
// Thread safety: record() and window() may be called from any number of threads.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "holdfast/core/clock.hpp"

namespace holdfast::panel {

class TrafficRing {
 public:
  enum Kind : std::size_t {
    kRequests = 0,  // every answer
    kErrors = 1,    // 5xx error pages other than 503 (500, 507, ...)
    kBusy = 2,      // 503: the database is busy, or the front shed the request
    kStale = 3,     // the last good copy of a page, served instead of a 503
  };
  static constexpr std::size_t kKinds = 4;
  static constexpr std::size_t kSeconds = 300;

  // REQUIRES: `clock` outlives the ring.
  explicit TrafficRing(Clock& clock) noexcept : clock_(&clock) {}
  TrafficRing(const TrafficRing&) = delete;
  TrafficRing& operator=(const TrafficRing&) = delete;

  // Counts one answer with HTTP `status`; `stale`: it was the last good copy of a page.
  void record(int status, bool stale) noexcept {
    record_at(second_of(clock_->coarse_now()), status, stale);
  }
  void record_at(std::int64_t second, int status, bool stale) noexcept {
    Slot& slot = slots_[static_cast<std::size_t>(second) % kSeconds];
    const std::uint64_t tag = tag_of(second);
    bump(slot[kRequests], tag);
    if (status == 503) {
      bump(slot[kBusy], tag);
    } else if (status >= 500) {
      bump(slot[kErrors], tag);
    }
    if (stale) bump(slot[kStale], tag);
  }

  // counts[kind][i]: answers of that kind in second `last - (kSeconds - 1) + i`, where
  // `last` is the current second (still counting).
  struct Window {
    std::int64_t last = 0;
    std::array<std::array<std::uint32_t, kSeconds>, kKinds> counts{};

    // Adds `other`'s counts, second by second (its seconds outside this window are left
    // out): the panel's answers and its front's, read from two rings on the same clock.
    void add(const Window& other) noexcept {
      const std::int64_t shift = last - other.last;
      for (std::size_t i = 0; i < kSeconds; ++i) {
        const std::int64_t j = static_cast<std::int64_t>(i) + shift;
        if (j < 0 || j >= static_cast<std::int64_t>(kSeconds)) continue;
        for (std::size_t k = 0; k < kKinds; ++k)
          counts[k][i] += other.counts[k][static_cast<std::size_t>(j)];
      }
    }

    [[nodiscard]] std::uint64_t total(Kind kind) const noexcept {
      std::uint64_t sum = 0;
      for (std::uint32_t n : counts[kind])
        sum += n;
      return sum;
    }
  };
  [[nodiscard]] Window window() const noexcept {
    return window_at(second_of(clock_->coarse_now()));
  }
  [[nodiscard]] Window window_at(std::int64_t last) const noexcept {
    Window w;
    w.last = last;
    for (std::size_t i = 0; i < kSeconds; ++i) {
      const std::int64_t second = last - static_cast<std::int64_t>(kSeconds - 1 - i);
      if (second < 0) continue;
      const Slot& slot = slots_[static_cast<std::size_t>(second) % kSeconds];
      for (std::size_t k = 0; k < kKinds; ++k) {
        const std::uint64_t word = slot[k].load(std::memory_order_relaxed);
        if ((word >> 32) == tag_of(second)) w.counts[k][i] = static_cast<std::uint32_t>(word);
      }
    }
    return w;
  }

  [[nodiscard]] static std::int64_t second_of(TimePoint t) noexcept {
    return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
  }

 private:
  using Slot = std::array<std::atomic<std::uint64_t>, kKinds>;

  static std::uint64_t tag_of(std::int64_t second) noexcept {
    return (static_cast<std::uint64_t>(second) + 1) & 0xffffffffULL;
  }
  static void bump(std::atomic<std::uint64_t>& word, std::uint64_t tag) noexcept {
    std::uint64_t seen = word.load(std::memory_order_relaxed);
    while ((seen >> 32) != tag) {
      if (word.compare_exchange_weak(seen, (tag << 32) | 1, std::memory_order_relaxed)) return;
    }
    word.fetch_add(1, std::memory_order_relaxed);
  }

  Clock* clock_;
  std::array<Slot, kSeconds> slots_{};
};

}  // namespace holdfast::panel
