#include "session_toucher.hpp"

#include <pthread.h>

#include <chrono>

#include "holdfast/core/window.hpp"
#include "route_helpers.hpp"

namespace holdfast::panel {

SessionToucher::SessionToucher(ClubStore& store)
    : store_(store), thread_([this] {
        pthread_setname_np(pthread_self(), "hf-sessions");  // seen in top -H and /proc
        loop();
      }) {}

SessionToucher::~SessionToucher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void SessionToucher::touch(const std::string& token) {
  const TimePoint now = store_.clock().coarse_now();
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = refreshed_.find(token);
  if (it != refreshed_.end() && now - it->second < kEvery) return;
  if (pending_.size() >= 1024) return;
  if (refreshed_.size() >= kRemembered) refreshed_.clear();
  refreshed_[token] = now;
  pending_.insert(token);
  wake_.notify_one();
}

void SessionToucher::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(200),
                   [&] { return stop_ || !pending_.empty(); });
    std::set<std::string> batch;
    batch.swap(pending_);
    lock.unlock();
    for (const std::string& token : batch) {
      RequestScope scope(std::chrono::seconds(2), store_.clock());
      (void)store_.refresh_session(token, now_utc());
    }
    lock.lock();
  }
}

}  // namespace holdfast::panel
