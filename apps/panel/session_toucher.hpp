// Session refreshes off the request path (holdfast): a page render must not wait for the
// write lock just to move last_seen forward, so renders hand the token to this background
// writer, and a refresh that meets a busy database is simply tried on a later render.
#pragma once

#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>

#include "club_store.hpp"

namespace holdfast::panel {

class SessionToucher {
 public:
  // Starts the writer thread. REQUIRES: `store` outlives this.
  explicit SessionToucher(ClubStore& store);
  // Stops the writer thread after its current batch; pending tokens are dropped.
  ~SessionToucher();
  SessionToucher(const SessionToucher&) = delete;
  SessionToucher& operator=(const SessionToucher&) = delete;

  // Queues `token` for a refresh by the writer thread, unless it was refreshed within the
  // last kEvery (the store moves last_seen at most once a minute anyway: a busy page must
  // not become a write per render). At most 1024 distinct tokens wait; more are dropped.
  // Thread-safe.
  void touch(const std::string& token);
  static constexpr Duration kEvery = std::chrono::minutes(1);
  // Tokens whose last refresh is remembered; past this the memory starts afresh.
  static constexpr std::size_t kRemembered = 4096;

 private:
  void loop();

  ClubStore& store_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::set<std::string> pending_;
  std::unordered_map<std::string, TimePoint> refreshed_;  // token -> when it was queued
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace holdfast::panel
