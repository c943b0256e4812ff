#include "holdfast/detail/stripes.hpp"

namespace holdfast::detail {
namespace {

std::atomic<std::uint32_t> owned_stripes{0};  // bit s: stripe s has an owner

// Gives the thread's stripe back when the thread exits.
struct StripeRelease {
  StripeRelease() = default;
  StripeRelease(const StripeRelease&) = delete;
  StripeRelease& operator=(const StripeRelease&) = delete;
  ~StripeRelease() {
    const unsigned s = thread_stripe_index;
    // Anything this thread counts from now on goes to the shared stripe.
    thread_stripe_index = kSharedStripe;
    if (s < kOwnedStripes) owned_stripes.fetch_and(~(1u << s), std::memory_order_release);
  }
};

}  // namespace

unsigned claim_stripe() noexcept {
  constexpr std::uint32_t kAll = (1u << kOwnedStripes) - 1;
  unsigned stripe = kSharedStripe;
  std::uint32_t taken = owned_stripes.load(std::memory_order_relaxed);
  while ((taken & kAll) != kAll) {
    const auto bit = static_cast<unsigned>(__builtin_ctz(~taken));
    if (owned_stripes.compare_exchange_weak(taken, taken | (1u << bit),
                                            std::memory_order_acquire)) {
      stripe = bit;
      break;
    }
  }
  thread_stripe_index = stripe;
  static thread_local StripeRelease release;
  return stripe;
}

}  // namespace holdfast::detail
