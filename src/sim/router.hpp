// Internal: where one client process sends its reads, as the library routes them: to a
// standby (the primary is the fallback), hedged after the copy's normal latency within a
// budget, and with a copy far slower than its peers given fewer reads (outlier ejection).
// ADR 0039 says how each part models the library.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "holdfast/core/random.hpp"
#include "holdfast/sim.hpp"

namespace holdfast::sim::detail {

class Router {
 public:
  // The answers of one copy as one client process saw them.
  struct CopyView {
    std::array<std::int64_t, 64> recent{};  // the last answers' latencies (ns), a ring
    std::uint32_t answers = 0;
    std::int64_t hedge_after = 0;  // the quantile of `recent`, refreshed every 8 answers
    double average = 0.0;          // moving average of the latency (ns), for ejection
    std::uint32_t averaged = 0;    // answers in the average (capped)
    bool ejected = false;
  };

  // A copy that answered fewer than this many reads has no quantile: it is not hedged yet.
  static constexpr std::uint32_t kMinAnswers = 16;
  // Ejection: a copy whose average is above kEjectRatio x the best peer's (and above
  // kEjectFloorNs) gets one read in kEjectedShare until its average is back below
  // kReturnRatio x the best peer's. Peers need kPeerAnswers answers to be compared with.
  static constexpr double kEjectRatio = 3.0;
  static constexpr double kReturnRatio = 1.5;
  static constexpr double kEjectFloorNs = 10e6;
  static constexpr std::uint32_t kPeerAnswers = 4;
  static constexpr std::uint32_t kEjectedShare = 16;
  // The hedges a read's first look leaves in the budget (of at most 10).
  static constexpr double kFirstLookReserve = 4.0;

  // `holdfast`: the strategy hedges and ejects as its settings say; the others only route.
  Router(const Strategy& st, int copies, bool holdfast)
      : st_(st),
        hedge_(holdfast && st.hedge && st.hedge_budget > 0.0),
        eject_(holdfast && st.eject),
        views_(static_cast<std::size_t>(copies)) {}

  // The copy a read's attempt goes to: a standby not ejected, at random (a draw only with
  // two or more standbys); the primary when every standby is ejected or there is none. An
  // ejected standby still gets one read in kEjectedShare, so that its recovery is seen.
  [[nodiscard]] int route(Random& rng) {
    const int n = static_cast<int>(views_.size());
    if (n == 1) return 0;
    ++reads_;
    int healthy = 0;
    for (int c = 1; c < n; ++c)
      healthy += !views_[static_cast<std::size_t>(c)].ejected;
    if (healthy < n - 1 && reads_ % kEjectedShare == 0) {
      // The ejected ones' share, in turn.
      for (int k = 0; k < n - 1; ++k) {
        const int c = 1 + static_cast<int>((reads_ / kEjectedShare + k) % (n - 1));
        if (views_[static_cast<std::size_t>(c)].ejected) return c;
      }
    }
    if (healthy == 0) return 0;
    if (n == 2) return 1;
    auto pick = static_cast<int>(rng.uniform() * healthy);
    for (int c = 1; c < n; ++c) {
      if (views_[static_cast<std::size_t>(c)].ejected) continue;
      if (pick-- == 0) return c;
    }
    return 0;
  }

  // Where a read on copy `first` is hedged: the best other copy (a standby not ejected with
  // the lowest average, else the primary); with one copy, the same one (another connection).
  [[nodiscard]] int hedge_copy(int first) const noexcept {
    const int n = static_cast<int>(views_.size());
    if (n == 1) return 0;
    int best = first == 0 ? -1 : 0;
    for (int c = 1; c < n; ++c) {
      const CopyView& v = views_[static_cast<std::size_t>(c)];
      if (c == first || v.ejected) continue;
      if (best <= 0 || v.average < views_[static_cast<std::size_t>(best)].average) best = c;
    }
    return best < 0 ? first : best;
  }

  // How long after it was sent a read on copy `c` is hedged; 0: not yet known (too few
  // answers) or hedging is off.
  [[nodiscard]] std::int64_t hedge_delay(int c) const noexcept {
    if (!hedge_) return 0;
    const CopyView& v = views_[static_cast<std::size_t>(c)];
    if (v.answers < kMinAnswers) return 0;
    return std::max<std::int64_t>(st_.hedge_min_delay.count(), v.hedge_after);
  }

  // Each read earns hedge_budget of a hedge (at most 10 saved up).
  void earn() noexcept { tokens_ = std::min(tokens_ + st_.hedge_budget, 10.0); }
  // Spends one hedge when the budget has one; at a read's first look only while it has
  // kFirstLookReserve saved up: the last ones are kept for the reads still waiting at a
  // later look, the stragglers (ADR 0039).
  [[nodiscard]] bool spend(bool first_look) noexcept {
    if (tokens_ < (first_look ? kFirstLookReserve : 1.0)) return false;
    tokens_ -= 1.0;
    return true;
  }

  // Copy `c` answered a read after `latency_ns`.
  void answered(int c, std::int64_t latency_ns) {
    CopyView& v = views_[static_cast<std::size_t>(c)];
    v.recent[v.answers % v.recent.size()] = latency_ns;
    ++v.answers;
    if (v.answers >= kMinAnswers && v.answers % 8 == 0) v.hedge_after = quantile(v);
    averaged(c, latency_ns);
  }
  // Copy `c` gave no answer within `latency_ns` (the client's timeout): it counts for
  // ejection, not for the hedge delay (the library learns that from answers only).
  void unanswered(int c, std::int64_t latency_ns) { averaged(c, latency_ns); }

  [[nodiscard]] const CopyView& view(int c) const noexcept {
    return views_[static_cast<std::size_t>(c)];
  }

 private:
  [[nodiscard]] std::int64_t quantile(const CopyView& v) const {
    const std::size_t n = std::min<std::size_t>(v.answers, v.recent.size());
    std::array<std::int64_t, 64> sorted{};
    std::copy(v.recent.begin(), v.recent.begin() + static_cast<std::ptrdiff_t>(n), sorted.begin());
    const auto k =
        std::min(n - 1, static_cast<std::size_t>(static_cast<double>(n) * st_.hedge_quantile));
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(k),
                     sorted.begin() + static_cast<std::ptrdiff_t>(n));
    return sorted[k];
  }

  void averaged(int c, std::int64_t latency_ns) {
    CopyView& v = views_[static_cast<std::size_t>(c)];
    // The average follows the last ~20 answers.
    v.averaged = std::min<std::uint32_t>(v.averaged + 1, 20);
    v.average += (static_cast<double>(latency_ns) - v.average) / v.averaged;
    if (eject_ && views_.size() > 1) judge(c);
  }

  // Ejects copy `c` or lets it back, against the best of its peers.
  void judge(int c) {
    double best = 0.0;
    bool any = false;
    for (std::size_t p = 0; p < views_.size(); ++p) {
      const CopyView& peer = views_[p];
      if (static_cast<int>(p) == c || peer.ejected || peer.averaged < kPeerAnswers) continue;
      if (!any || peer.average < best) best = peer.average;
      any = true;
    }
    CopyView& v = views_[static_cast<std::size_t>(c)];
    if (!any) {
      v.ejected = false;
      return;
    }
    if (!v.ejected) {
      v.ejected = c != 0 && v.averaged >= kPeerAnswers && v.average > kEjectFloorNs &&
                  v.average > kEjectRatio * best;
    } else if (v.average < kReturnRatio * best || v.average <= kEjectFloorNs) {
      v.ejected = false;
    }
  }

  const Strategy& st_;
  bool hedge_;
  bool eject_;
  std::vector<CopyView> views_;
  std::uint64_t reads_ = 0;
  double tokens_ = 0.0;
};

}  // namespace holdfast::sim::detail
