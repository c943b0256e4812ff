// Internal (not part of the API; public only because Database::with_statement is an inline
// template): one SQLite connection held for one use.
#pragma once

#include <utility>

namespace holdfast::sqlite {
class Database;
class Transaction;

namespace detail {
class DatabaseImpl;
class Connection;

// One connection held for one use (a read connection or the writer); given back when
// destroyed.
class Lease {
 public:
  Lease() noexcept = default;
  Lease(Lease&& other) noexcept
      : impl_(std::exchange(other.impl_, nullptr)),
        conn_(std::exchange(other.conn_, nullptr)),
        slot_(other.slot_) {}
  Lease& operator=(Lease&& other) noexcept {
    if (this != &other) {
      reset();
      impl_ = std::exchange(other.impl_, nullptr);
      conn_ = std::exchange(other.conn_, nullptr);
      slot_ = other.slot_;
    }
    return *this;
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease() { reset(); }

  void reset() noexcept {
    if (impl_ != nullptr) release();
  }
  [[nodiscard]] bool held() const noexcept { return impl_ != nullptr; }

 private:
  friend class holdfast::sqlite::Database;
  friend class holdfast::sqlite::Transaction;
  friend class DatabaseImpl;
  void release() noexcept;
  DatabaseImpl* impl_ = nullptr;
  Connection* conn_ = nullptr;
  int slot_ = -1;  // a read connection's index, or kWriterSlot
};
}  // namespace detail

}  // namespace holdfast::sqlite
