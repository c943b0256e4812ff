#include "sign_in_gate.hpp"

#include <algorithm>
#include <memory>
#include <optional>

namespace holdfast::panel {
namespace {

int held_by(const std::unordered_map<std::string, int>& places, const std::string& key) {
  const auto it = places.find(key);
  return it == places.end() ? 0 : it->second;
}

void drop(std::unordered_map<std::string, int>& places, const std::string& key) {
  const auto it = places.find(key);
  if (it != places.end() && --it->second <= 0) places.erase(it);
}

}  // namespace

SignInGate::SignInGate(Clock& clock, Options options) : clock_(clock), options_(options) {
  options_.running = std::max(options_.running, 1);
  options_.waiting = std::max(options_.waiting, 0);
  options_.per_key = std::max(options_.per_key, 1);
  waiting_.reserve(static_cast<std::size_t>(options_.waiting) + 1);
}

void SignInGate::hold(const Asker& asker) {
  ++by_address_[asker.address];
  if (!asker.account.empty()) ++by_account_[asker.account];
}

void SignInGate::release(const std::string& address, const std::string& account) {
  drop(by_address_, address);
  if (!account.empty()) drop(by_account_, account);
}

void SignInGate::expire_and_start(TimePoint now, Wakes& wakes) {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (now - it->since < options_.max_wait) {
      ++it;
      continue;
    }
    wakes.emplace_back(std::move(it->wake), Turn::kTimedOut);
    release(it->asker.address, it->asker.account);
    it = waiting_.erase(it);
  }
  while (static_cast<int>(running_.size()) < options_.running && !waiting_.empty()) {
    const auto best =
        std::min_element(waiting_.begin(), waiting_.end(), [](const Waiter& a, const Waiter& b) {
          if (a.asker.failures != b.asker.failures) return a.asker.failures < b.asker.failures;
          return a.id < b.id;  // ids grow with arrival: the longest waiting first
        });
    running_.emplace(best->id, Held{best->asker.address, best->asker.account});
    wakes.emplace_back(std::move(best->wake), Turn::kRun);
    waiting_.erase(best);
  }
}

void SignInGate::call(Wakes& wakes) {
  for (auto& [wake, turn] : wakes) {
    if (wake) wake(turn);
  }
}

SignInGate::Entry SignInGate::enter(Asker asker, Wake wake) {
  Wakes wakes;
  Entry entry;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const TimePoint now = clock_.now();
    expire_and_start(now, wakes);
    entry.id = next_id_++;
    if (held_by(by_address_, asker.address) >= options_.per_key ||
        (!asker.account.empty() && held_by(by_account_, asker.account) >= options_.per_key)) {
      entry.turn = Turn::kKeyBusy;
    } else if (static_cast<int>(running_.size()) < options_.running) {
      hold(asker);
      running_.emplace(entry.id, Held{std::move(asker.address), std::move(asker.account)});
      entry.turn = Turn::kRun;
    } else {
      if (static_cast<int>(waiting_.size()) >= options_.waiting) {
        // Full: the waiter with the most failures (the newest among equals) gives way to
        // an asker with fewer.
        auto worst = waiting_.end();
        for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
          if (worst == waiting_.end() || it->asker.failures >= worst->asker.failures) worst = it;
        }
        if (worst != waiting_.end() && asker.failures < worst->asker.failures) {
          wakes.emplace_back(std::move(worst->wake), Turn::kDisplaced);
          release(worst->asker.address, worst->asker.account);
          waiting_.erase(worst);
        }
      }
      if (static_cast<int>(waiting_.size()) < options_.waiting) {
        hold(asker);
        waiting_.push_back(Waiter{entry.id, std::move(asker), now, std::move(wake)});
        entry.turn = Turn::kWait;
      } else {
        entry.turn = Turn::kFull;
      }
    }
  }
  call(wakes);
  return entry;
}

SignInGate::Turn SignInGate::give_up(std::uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it =
      std::find_if(waiting_.begin(), waiting_.end(), [id](const Waiter& w) { return w.id == id; });
  if (it != waiting_.end()) {
    release(it->asker.address, it->asker.account);
    waiting_.erase(it);
    return Turn::kTimedOut;
  }
  return running_.contains(id) ? Turn::kRun : Turn::kTimedOut;
}

void SignInGate::leave(std::uint64_t id) {
  Wakes wakes;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = running_.find(id);
    if (it == running_.end()) return;
    release(it->second.address, it->second.account);
    running_.erase(it);
    expire_and_start(clock_.now(), wakes);
  }
  call(wakes);
}

SignInGate::Counts SignInGate::counts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {static_cast<int>(running_.size()), static_cast<int>(waiting_.size())};
}

}  // namespace holdfast::panel
