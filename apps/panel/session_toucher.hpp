// Session refreshes off the request path (holdfast): a page render must not wait for the
// write lock just to move last_seen forward, so renders hand the token to this background
// writer, and a refresh that meets a busy database is simply tried on a later render.
#pragma once

#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>

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

  // Queues `token` for a refresh by the writer thread. At most 1024 distinct tokens wait;
  // more are dropped. Thread-safe.
  void touch(const std::string& token);

 private:
  void loop();

  ClubStore& store_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::set<std::string> pending_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace holdfast::panel
