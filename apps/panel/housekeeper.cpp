#include "housekeeper.hpp"

#include <pthread.h>

#include "holdfast/core/window.hpp"
#include "route_helpers.hpp"

namespace holdfast::panel {

Housekeeper::Housekeeper(ClubStore& store, std::chrono::milliseconds every)
    : store_(store), every_(every), thread_([this] {
        pthread_setname_np(pthread_self(), "hf-housekeeper");  // seen in top -H and /proc
        loop();
      }) {}

Housekeeper::~Housekeeper() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Housekeeper::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (wake_.wait_for(lock, every_, [&] { return stop_; })) return;
    lock.unlock();
    {
      // A window of its own: a busy database ends this round; the next one goes on.
      RequestScope scope(std::chrono::seconds(10), store_.clock());
      (void)store_.prune(now_utc());
    }
    lock.lock();
  }
}

}  // namespace holdfast::panel
