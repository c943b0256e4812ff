// Retention of the panel's own rows, off the request path: expired sessions and idempotency
// keys older than a day are deleted in small batches by a background thread, the way the
// logs' retention deletes old log rows (prune_logs(): one short write per batch, so a
// request never waits behind a long delete).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "club_store.hpp"

namespace holdfast::panel {

class Housekeeper {
 public:
  // Starts the thread: it runs ClubStore::prune() every `every` (the first time after one
  // `every`, so a short run never meets it). REQUIRES: `store` outlives this; every > 0.
  Housekeeper(ClubStore& store, std::chrono::milliseconds every);
  // Stops the thread after the batch under way.
  ~Housekeeper();
  Housekeeper(const Housekeeper&) = delete;
  Housekeeper& operator=(const Housekeeper&) = delete;

 private:
  void loop();

  ClubStore& store_;
  std::chrono::milliseconds every_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace holdfast::panel
