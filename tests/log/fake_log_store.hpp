// A LogStore in memory that fails, throws or blocks on demand, and records every call.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <vector>

#include "holdfast/log/database_sink.hpp"

namespace holdfast::testing_log {

class FakeLogStore final : public LogStore {
 public:
  Status write_batch(std::span<const LogRecord> records) override {
    std::unique_lock<std::mutex> lock(mutex_);
    ++write_calls_;
    attempted_sizes_.push_back(records.size());
    if (gate_closed_) {
      blocked_ = true;
      changed_.notify_all();
      changed_.wait(lock, [&] { return !gate_closed_; });
      blocked_ = false;
    }
    if (throws_ > 0) {
      --throws_;
      throw std::runtime_error("store exploded");
    }
    if (!failures_.empty()) {
      Status s = failures_.front();
      failures_.pop_front();
      return s;
    }
    if (always_) return *always_;
    rows_.insert(rows_.end(), records.begin(), records.end());
    stored_sizes_.push_back(records.size());
    return {};
  }

  Result<int> delete_older_than(WallTime cutoff, int limit) override {
    std::lock_guard<std::mutex> lock(mutex_);
    delete_limits_.push_back(limit);
    if (!delete_failures_.empty()) {
      Status s = delete_failures_.front();
      delete_failures_.pop_front();
      if (!s.ok()) return s;
    }
    std::stable_sort(rows_.begin(), rows_.end(), [](const LogRecord& a, const LogRecord& b) {
      return a.created_at < b.created_at;
    });
    int deleted = 0;
    auto it = rows_.begin();
    while (it != rows_.end() && deleted < limit && it->created_at < cutoff) {
      it = rows_.erase(it);
      ++deleted;
    }
    deleted_counts_.push_back(deleted);
    return deleted;
  }

  // The next `times` writes fail with `status` (not stored).
  void fail_next(const Status& status, int times = 1) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int i = 0; i < times; ++i)
      failures_.push_back(status);
  }
  // Every write fails with `status` until cleared with std::nullopt.
  void fail_always(std::optional<Status> status) {
    std::lock_guard<std::mutex> lock(mutex_);
    always_ = std::move(status);
  }
  void throw_next(int times = 1) {
    std::lock_guard<std::mutex> lock(mutex_);
    throws_ += times;
  }
  // Delete calls: OK entries let the call run, errors fail it.
  void fail_delete_calls(std::vector<Status> plan) {
    std::lock_guard<std::mutex> lock(mutex_);
    delete_failures_.assign(plan.begin(), plan.end());
  }

  // While closed, write_batch() blocks until open_gate().
  void close_gate() {
    std::lock_guard<std::mutex> lock(mutex_);
    gate_closed_ = true;
  }
  void open_gate() {
    std::lock_guard<std::mutex> lock(mutex_);
    gate_closed_ = false;
    changed_.notify_all();
  }
  // Waits (real time, bounded) until a write_batch() call is blocked at the gate.
  bool wait_until_blocked() {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(10), [&] { return blocked_; });
  }

  void add_row(Level level, std::string message, WallTime created_at) {
    std::lock_guard<std::mutex> lock(mutex_);
    rows_.push_back(LogRecord{level, "seed", std::move(message), created_at});
  }

  std::vector<LogRecord> rows() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return rows_;
  }
  int write_calls() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return write_calls_;
  }
  std::vector<std::size_t> stored_sizes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stored_sizes_;
  }
  std::vector<std::size_t> attempted_sizes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return attempted_sizes_;
  }
  std::vector<int> delete_limits() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return delete_limits_;
  }
  std::vector<int> deleted_counts() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return deleted_counts_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<LogRecord> rows_;
  std::deque<Status> failures_;
  std::deque<Status> delete_failures_;
  std::optional<Status> always_;
  int throws_ = 0;
  bool gate_closed_ = false;
  bool blocked_ = false;
  int write_calls_ = 0;
  std::vector<std::size_t> attempted_sizes_;
  std::vector<std::size_t> stored_sizes_;
  std::vector<int> delete_limits_;
  std::vector<int> deleted_counts_;
};

}  // namespace holdfast::testing_log
