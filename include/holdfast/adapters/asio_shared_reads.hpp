/// @file
/// holdfast::asio::SharedReads<T>: one read of a key at a time, shared by the requests that
/// would otherwise all make it at once. A commit makes a cached answer (a page, a report) old
/// for every request in flight together; each of them would read the same answer from the
/// database. With SharedReads the first one reads, and the others wait on their own event
/// loop for its answer, at most as long as they say.
///
/// Which reads may be shared is decided by an epoch, a number that only grows when the data
/// may have changed (sqlite::ChangeEpoch is one; a version counter of your own is another).
/// A request that observed epoch e joins a read under way that observed e or later: that read
/// began after an observation no older than the request's own, so it shows at least every
/// commit the request could have seen, its own writes included. A request that observed a
/// later epoch than the read under way leads a read of its own (the older read's waiters
/// still get the older read's answer).
///
/// @code
///   holdfast::asio::SharedReads<Page> reads;
///   // in a request's coroutine, after `epoch` was observed and the cache missed:
///   auto ticket = reads.join(date, epoch);
///   if (!ticket.leads()) {
///     if (std::shared_ptr<const Page> page = co_await ticket.answer(window.remaining())) {
///       co_return *page;  // another request's read
///     }
///     // the leader's read failed, or did not come in time: read for yourself
///   }
///   std::shared_ptr<const Page> page = ...;  // read it (nullptr when the read failed)
///   ticket.land(page);                        // (a leader that never lands lands nullptr)
/// @endcode
///
/// Thread-safe: requests on different event loops (threads) may share one SharedReads; each
/// waiter is woken on its own executor. A waiter holds no thread while it waits. join() and
/// land() take a short lock; a request that finds its cache current never calls them.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "holdfast/adapters/asio.hpp"

#if defined(HOLDFAST_ASIO_BOOST)
#include <boost/asio/awaitable.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#else
#include <asio/awaitable.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#endif

namespace holdfast::asio {

/// One read of a key at a time, shared by the requests that observed no later epoch (see the
/// top of this file). `T` is what a read answers; waiters get it as shared_ptr<const T>.
template <class T>
class SharedReads {
  struct Flight;

 public:
  /// A request's place in a read of its key: it leads the read, or it waits for it. A
  /// leader's ticket lands nullptr when destroyed if land() was not called (its read failed,
  /// or its coroutine was destroyed): its waiters then read for themselves at once.
  class Ticket {
   public:
    /// Takes `other`'s place; `other` then leads nothing.
    Ticket(Ticket&& other) noexcept
        : owner_(std::exchange(other.owner_, nullptr)), flight_(std::move(other.flight_)) {}
    Ticket& operator=(Ticket&&) = delete;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    /// A leader's ticket that did not land lands nullptr: its waiters read for themselves.
    ~Ticket() {
      if (owner_ != nullptr) land(nullptr);
    }

    /// Whether this request makes the read (else it waits for the leader's answer).
    [[nodiscard]] bool leads() const noexcept { return owner_ != nullptr; }

    /// The leader's answer (nullptr: its read failed): every request waiting for it resumes,
    /// and the next join() of the key starts a new read. Does nothing for a waiter, or once
    /// landed.
    void land(std::shared_ptr<const T> answer) noexcept {
      if (owner_ == nullptr) return;
      std::exchange(owner_, nullptr)->landed(flight_);
      std::vector<std::shared_ptr<detail::net::steady_timer>> waiters;
      {
        std::lock_guard<std::mutex> lock(flight_->mutex);
        flight_->landed = true;
        flight_->answer = std::move(answer);
        waiters.swap(flight_->waiters);
      }
      // A timer is touched only on its own loop: the waiter there resumes and reads the answer.
      for (std::shared_ptr<detail::net::steady_timer>& timer : waiters) {
        try {
          detail::net::post(timer->get_executor(), [timer] { timer->cancel(); });
        } catch (...) {  // no memory for the handler: that waiter waits out its `longest`
        }
      }
    }

    /// A waiter's wait for the leader's answer, on the calling coroutine's executor, at most
    /// `longest`: the answer, or nullptr when the read failed or did not answer in time (then
    /// the request reads for itself). A leader gets nullptr at once.
    detail::net::awaitable<std::shared_ptr<const T>> answer(Duration longest) const {
      const std::shared_ptr<Flight> flight = flight_;
      if (flight == nullptr || owner_ != nullptr) co_return nullptr;
      auto timer =
          std::make_shared<detail::net::steady_timer>(co_await detail::net::this_coro::executor);
      timer->expires_after(
          std::chrono::duration_cast<detail::net::steady_timer::duration>(longest));
      {
        std::lock_guard<std::mutex> lock(flight->mutex);
        if (flight->landed) co_return flight->answer;
        // Landing posts the cancel to this loop, which runs it only once this coroutine is
        // suspended in the wait below.
        flight->waiters.push_back(timer);
      }
      detail::error_code ignored;
      co_await timer->async_wait(detail::net::redirect_error(detail::net::use_awaitable, ignored));
      std::lock_guard<std::mutex> lock(flight->mutex);
      co_return flight->landed ? flight->answer : nullptr;
    }

   private:
    friend class SharedReads;
    Ticket(SharedReads* owner, std::shared_ptr<Flight> flight, bool leads) noexcept
        : owner_(leads ? owner : nullptr), flight_(std::move(flight)) {}

    SharedReads* owner_;  // the leader's; nullptr for a waiter or once landed
    std::shared_ptr<Flight> flight_;
  };

  /// No read under way.
  SharedReads() = default;
  SharedReads(const SharedReads&) = delete;
  SharedReads& operator=(const SharedReads&) = delete;
  /// REQUIRES: no leader's Ticket outlives it (waiters' may).
  ~SharedReads() = default;

  /// The read of `key` for a request that observed `epoch`: the one under way when it
  /// observed the same epoch or a later one, else a new one this request leads.
  [[nodiscard]] Ticket join(const std::string& key, std::uint64_t epoch) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::shared_ptr<Flight>& flight = flights_[key];
    if (flight && flight->epoch >= epoch) return Ticket(this, flight, false);
    // None, or one begun before a commit this request saw: it leads a read of its own (the
    // older read's waiters still get the older read's answer).
    flight = std::make_shared<Flight>(key, epoch);
    return Ticket(this, flight, true);
  }

  /// Reads under way (each ends when its leader lands).
  [[nodiscard]] std::size_t under_way() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return flights_.size();
  }

 private:
  struct Flight {
    Flight(std::string k, std::uint64_t e) : key(std::move(k)), epoch(e) {}
    const std::string key;
    const std::uint64_t epoch;
    std::mutex mutex;
    bool landed = false;              // guarded by mutex
    std::shared_ptr<const T> answer;  // guarded by mutex; the leader's
    // Each waiter's timer, on its own event loop: landing cancels it there.
    std::vector<std::shared_ptr<detail::net::steady_timer>> waiters;  // guarded by mutex
  };

  void landed(const std::shared_ptr<Flight>& flight) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = flights_.find(flight->key);
    if (it != flights_.end() && it->second == flight) flights_.erase(it);
  }

  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Flight>> flights_;  // at most one per key
};

}  // namespace holdfast::asio
