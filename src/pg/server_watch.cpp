#include "server_watch.hpp"

#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>

namespace holdfast::pg::detail {

ServerWatch::ServerWatch() : wake_fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

ServerWatch::~ServerWatch() {
  if (wake_fd >= 0) ::close(wake_fd);
}

void ServerWatch::set_silent(bool silent) noexcept {
  if (silent_.exchange(silent, std::memory_order_acq_rel) == silent) return;
  if (wake_fd < 0) return;
  if (silent) {
    const std::uint64_t one = 1;
    (void)!::write(wake_fd, &one, sizeof(one));  // readable until read back
  } else {
    std::uint64_t value = 0;
    (void)!::read(wake_fd, &value, sizeof(value));
  }
}

std::shared_ptr<ServerWatch> host_watch(const std::string& host) {
  // Never destroyed: connections held by detached threads may outlive static destruction.
  static auto* const mutex = new std::mutex();
  static auto* const hosts = new std::unordered_map<std::string, std::shared_ptr<ServerWatch>>();
  std::lock_guard<std::mutex> lock(*mutex);
  if (hosts->size() >= 1024 && hosts->find(host) == hosts->end()) {
    // Bounded: a process handed ever new host names forgets those no connection uses.
    std::erase_if(*hosts, [](const auto& entry) { return entry.second.use_count() == 1; });
  }
  std::shared_ptr<ServerWatch>& w = (*hosts)[host];
  if (w == nullptr) w = std::make_shared<ServerWatch>();
  return w;
}

namespace {

// A few threads that send cancel requests, and a bounded queue of them. The threads start
// with it, before the first connection, so a frozen server (when cancels are sent) does not
// grow the process's thread count.
class Canceller {
 public:
  Canceller() noexcept {
    for (int i = 0; i < kMaxThreads; ++i) {
      if (!add_thread()) break;  // submit() tries again when a cancel finds none idle
    }
  }

  void submit(PGcancel* cancel) noexcept {
    std::unique_lock<std::mutex> lock(mutex_);
    if (queue_.size() >= kMaxQueued) {
      lock.unlock();
      PQfreeCancel(cancel);  // every thread is stuck on a silent server: drop it
      return;
    }
    try {
      queue_.push_back(cancel);
    } catch (...) {
      lock.unlock();
      PQfreeCancel(cancel);
      return;
    }
    // No thread to be had: one already running takes it when it is free.
    if (idle_ == 0 && threads_ < kMaxThreads) (void)add_thread();
    lock.unlock();
    ready_.notify_one();
  }

 private:
  static constexpr std::size_t kMaxQueued = 256;
  static constexpr int kMaxThreads = 4;

  // REQUIRES: mutex_ held, or the constructor running.
  bool add_thread() noexcept {
    try {
      std::thread([this] {
        pthread_setname_np(pthread_self(), "hf-pg-cancel");  // seen in top -H and /proc
        run();
      }).detach();
    } catch (const std::system_error&) {
      return false;
    }
    ++threads_;
    return true;
  }

  void run() noexcept {
    for (;;) {
      PGcancel* cancel = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ++idle_;
        ready_.wait(lock, [&] { return !queue_.empty(); });
        --idle_;
        cancel = queue_.front();
        queue_.pop_front();
      }
      char err[256];
      (void)PQcancel(cancel, err, sizeof(err));
      PQfreeCancel(cancel);
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<PGcancel*> queue_;
  int idle_ = 0;
  int threads_ = 0;
};

Canceller& canceller() {
  // Never destroyed: its threads may still wait on a silent server when the process exits.
  static Canceller* const instance = new Canceller();
  return *instance;
}

}  // namespace

void prepare_cancels() noexcept {
  (void)canceller();
}

void cancel_off_thread(PGconn* conn) noexcept {
  if (conn == nullptr) return;
  PGcancel* cancel = PQgetCancel(conn);
  if (cancel != nullptr) canceller().submit(cancel);
}

}  // namespace holdfast::pg::detail
