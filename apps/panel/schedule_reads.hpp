// One read of a day's schedule at a time (ADR 0049). A commit makes the day's copy old for
// every request in flight at once: each of them, about one per connection, would make the
// schedule's queries for the same answer. The first one reads; the others, which observed
// no later data epoch than it did, wait on their own event loop for its answer.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "holdfast/core/clock.hpp"
#include "html.hpp"

namespace holdfast::panel {

class ScheduleReads {
 public:
  struct Flight;

  // A request's place in a read of its day: it leads the read, or it waits for it. A
  // leader's ticket lands when destroyed if land() was not called (its read failed, or
  // its coroutine was destroyed): its waiters then read for themselves.
  class Ticket {
   public:
    Ticket(ScheduleReads* owner, std::shared_ptr<Flight> flight, bool leads) noexcept;
    Ticket(Ticket&& other) noexcept;
    Ticket& operator=(Ticket&&) = delete;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket();

    [[nodiscard]] bool leads() const noexcept { return owner_ != nullptr; }
    // The leader's answer (nullptr: its read failed): every request waiting resumes.
    void land(std::shared_ptr<const SchedulePage> page) noexcept;
    // A waiter: the leader's answer, waited for on this coroutine's event loop at most
    // `longest`; nullptr when the read failed or did not answer in time (then the request
    // reads for itself).
    boost::asio::awaitable<std::shared_ptr<const SchedulePage>> answer(Duration longest) const;

   private:
    ScheduleReads* owner_;  // the leader's; nullptr for a waiter or once landed
    std::shared_ptr<Flight> flight_;
  };

  ScheduleReads() = default;
  ScheduleReads(const ScheduleReads&) = delete;
  ScheduleReads& operator=(const ScheduleReads&) = delete;
  ~ScheduleReads();

  // The read of `date` for a request that observed the data epoch `epoch`: the one under
  // way when it observed the same epoch or a later one (a read begun after a later
  // observation shows at least what this request could have read), else a new one it leads.
  [[nodiscard]] Ticket join(const std::string& date, std::uint64_t epoch);

  // Reads under way (each ends when its leader lands).
  [[nodiscard]] std::size_t under_way() const;

 private:
  void landed(const std::shared_ptr<Flight>& flight);
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Flight>> flights_;  // at most one per day
};

}  // namespace holdfast::panel
