#include "schedule_reads.hpp"

#include <utility>
#include <vector>

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace holdfast::panel {

namespace net = boost::asio;

struct ScheduleReads::Flight {
  Flight(std::string d, std::uint64_t e) : date(std::move(d)), epoch(e) {}
  const std::string date;
  const std::uint64_t epoch;
  std::mutex mutex;
  bool landed = false;                       // guarded by mutex
  std::shared_ptr<const SchedulePage> page;  // guarded by mutex; the leader's answer
  // Each waiter's timer, on its own event loop: landing cancels it there.
  std::vector<std::shared_ptr<net::steady_timer>> waiters;  // guarded by mutex
};

ScheduleReads::Ticket::Ticket(ScheduleReads* owner, std::shared_ptr<Flight> flight,
                              bool leads) noexcept
    : owner_(leads ? owner : nullptr), flight_(std::move(flight)) {}

ScheduleReads::Ticket::Ticket(Ticket&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)), flight_(std::move(other.flight_)) {}

ScheduleReads::Ticket::~Ticket() {
  if (owner_ != nullptr) land(nullptr);
}

void ScheduleReads::Ticket::land(std::shared_ptr<const SchedulePage> page) noexcept {
  if (owner_ == nullptr) return;
  std::exchange(owner_, nullptr)->landed(flight_);
  std::vector<std::shared_ptr<net::steady_timer>> waiters;
  {
    std::lock_guard<std::mutex> lock(flight_->mutex);
    flight_->landed = true;
    flight_->page = std::move(page);
    waiters.swap(flight_->waiters);
  }
  // A timer is touched only on its own loop: the waiter there resumes and reads the page.
  for (std::shared_ptr<net::steady_timer>& timer : waiters) {
    try {
      net::post(timer->get_executor(), [timer] { timer->cancel(); });
    } catch (...) {  // no memory for the handler: that waiter waits out its `longest`
    }
  }
}

net::awaitable<std::shared_ptr<const SchedulePage>> ScheduleReads::Ticket::answer(
    Duration longest) const {
  const std::shared_ptr<Flight> flight = flight_;
  auto timer = std::make_shared<net::steady_timer>(co_await net::this_coro::executor);
  timer->expires_after(std::chrono::duration_cast<net::steady_timer::duration>(longest));
  {
    std::lock_guard<std::mutex> lock(flight->mutex);
    if (flight->landed) co_return flight->page;
    // Landing posts the cancel to this loop, which runs it only once this coroutine is
    // suspended in the wait below.
    flight->waiters.push_back(timer);
  }
  boost::system::error_code ignored;
  co_await timer->async_wait(net::redirect_error(net::use_awaitable, ignored));
  std::lock_guard<std::mutex> lock(flight->mutex);
  co_return flight->landed ? flight->page : nullptr;
}

ScheduleReads::~ScheduleReads() = default;

ScheduleReads::Ticket ScheduleReads::join(const std::string& date, std::uint64_t epoch) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::shared_ptr<Flight>& flight = flights_[date];
  if (flight && flight->epoch >= epoch) return Ticket(this, flight, false);
  // None, or one begun before a commit this request saw: it leads a read of its own (the
  // older read's waiters still get the older read's answer).
  flight = std::make_shared<Flight>(date, epoch);
  return Ticket(this, flight, true);
}

void ScheduleReads::landed(const std::shared_ptr<Flight>& flight) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = flights_.find(flight->date);
  if (it != flights_.end() && it->second == flight) flights_.erase(it);
}

std::size_t ScheduleReads::under_way() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return flights_.size();
}

}  // namespace holdfast::panel
