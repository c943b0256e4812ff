// The places of the panel's password checks, shared between addresses (issue 42): a flood of
// wrong passwords from many addresses must not keep a user from another address out.
//
//   - at most Options::running checks are started at once, and at most Options::waiting wait
//     for a place;
//   - one address, and one account, holds at most Options::per_key of those places, running
//     or waiting (the asker is told to try again in a second: kKeyBusy);
//   - the next to start is the waiter whose address has the fewest recent failed sign-ins,
//     the longest waiting among equals;
//   - when every waiting place is taken, a newcomer with fewer failures than the waiter with
//     the most takes that waiter's place (kDisplaced for it), else it is turned away (kFull);
//   - a waiter not started within Options::max_wait is answered kTimedOut.
//
// Thread-safe. The gate never blocks in enter() or leave(): a waiter learns its turn through
// the Wake it gave, called once, without the gate's lock held, on the thread that freed the
// place (or displaced it, or found it too old).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "holdfast/core/clock.hpp"

namespace holdfast::panel {

class SignInGate {
 public:
  struct Options {
    // Checks handed to the CPU at once. The panel's default is 4: two compute (the lane's
    // two CPU threads, and passwords.cpp's two hashes at once), two are ready next, so that
    // the order is still the gate's when a place frees.
    int running = 4;
    int waiting = 12;  // 0: past `running` a sign-in is turned away at once
    int per_key = 2;   // places one address, or one account, holds (running or waiting)
    Duration max_wait = std::chrono::seconds(1);
  };

  enum class Turn {
    kRun,        // the check may start now; leave() when it is done
    kWait,       // queued: the Wake tells kRun, kDisplaced or kTimedOut
    kKeyBusy,    // its address or its account holds its share of the places already
    kFull,       // every place is taken, by askers with no more failures than it
    kDisplaced,  // (a waiter) its place went to an asker with fewer failures
    kTimedOut,   // (a waiter) not started within max_wait
  };
  using Wake = std::function<void(Turn)>;

  struct Asker {
    std::string address;
    std::string account;  // empty: none
    int failures = 0;     // the address's recent failed sign-ins: fewer goes first
  };
  struct Entry {
    std::uint64_t id = 0;  // for leave() and give_up()
    Turn turn = Turn::kFull;
  };

  SignInGate(Clock& clock, Options options);
  SignInGate(const SignInGate&) = delete;
  SignInGate& operator=(const SignInGate&) = delete;

  // Asks for a place. kRun: started (leave(id) when done). kWait: queued, `wake` will be
  // called once with kRun (now started), kDisplaced or kTimedOut (then gone), unless
  // give_up() comes first. Anything else: refused, and `wake` is never called.
  [[nodiscard]] Entry enter(Asker asker, Wake wake);
  // A waiter whose caller stops waiting (its max_wait passed, or it is going away): kRun if
  // its check was started meanwhile (the caller must leave(id) then), else kTimedOut, and
  // it has left. Never calls its Wake afterwards.
  Turn give_up(std::uint64_t id);
  // A started check is done: its place goes to the next waiter.
  void leave(std::uint64_t id);

  [[nodiscard]] const Options& options() const noexcept { return options_; }
  struct Counts {
    int running = 0;
    int waiting = 0;
  };
  [[nodiscard]] Counts counts() const;

 private:
  struct Waiter {
    std::uint64_t id;
    Asker asker;
    TimePoint since;
    Wake wake;
  };
  struct Held {
    std::string address;
    std::string account;
  };
  using Wakes = std::vector<std::pair<Wake, Turn>>;

  void hold(const Asker& asker);
  void release(const std::string& address, const std::string& account);
  // Waiters past max_wait leave with kTimedOut; free places go to the best waiters.
  void expire_and_start(TimePoint now, Wakes& wakes);
  static void call(Wakes& wakes);

  Clock& clock_;
  Options options_;
  mutable std::mutex mutex_;
  std::uint64_t next_id_ = 1;
  std::unordered_map<std::uint64_t, Held> running_;
  std::vector<Waiter> waiting_;  // at most options_.waiting: scanned, never sorted
  std::unordered_map<std::string, int> by_address_;
  std::unordered_map<std::string, int> by_account_;
};

}  // namespace holdfast::panel
