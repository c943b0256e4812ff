// DatabaseImpl: the state behind a Database. Internal to the driver.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "connection.hpp"
#include "fair_lock.hpp"
#include "holdfast/core/clock.hpp"
#include "holdfast/core/result.hpp"
#include "holdfast/core/status.hpp"
#include "holdfast/sqlite/database.hpp"
#include "holdfast/sqlite/options.hpp"
#include "holdfast/sqlite/query.hpp"
#include "holdfast/sqlite/statement.hpp"

namespace holdfast::sqlite::detail {

inline constexpr int kWriterSlot = -2;

// The Status refusing statement `info`: "'<its SQL>' <why>" (SQLITE_ERROR).
Status refuse(const QueryInfo& info, std::string_view why);

struct StatementAccess {
  // REQUIRES: `out` is empty.
  static void adopt(Statement& out, sqlite3_stmt* stmt, bool owned, bool in_transaction,
                    int parameters) noexcept {
    out.row_.stmt_ = stmt;
    out.owned_ = owned;
    out.in_transaction_ = in_transaction;
    out.parameter_count_ = parameters;
  }
  static sqlite3_stmt* handle(const Statement& s) noexcept { return s.row_.stmt_; }
  static Status bind_values(Statement& s, std::span<const Value> values) {
    return s.bind_values(values);
  }
  static Status step_failed(Statement& s, int rc) { return s.step_failed(rc); }
};

struct QueryAccess {
  static Query make(std::shared_ptr<const QueryInfo> info) noexcept {
    Query q;
    q.sql_ = info->sql;
    q.verdict_ = info->verdict;
    q.info_ = std::move(info);
    return q;
  }
  static const QueryInfo* info(const Query& q) noexcept { return q.info_.get(); }
};

// A read connection and the flag that says it is checked out. One cache line each, so
// threads checking out neighbours do not share a line.
struct alignas(64) ReaderSlot {
  std::atomic<bool> busy{false};
  std::unique_ptr<Connection> conn;
};

class DatabaseImpl {
 public:
  explicit DatabaseImpl(Options opts);
  DatabaseImpl(const DatabaseImpl&) = delete;
  DatabaseImpl& operator=(const DatabaseImpl&) = delete;

  // Opens the first connection, checks the file, sets the journal mode.
  Status open();

  // The statement of a registered query on the right connection: a read connection
  // (checked out without a lock unless all are busy; then a bounded wait, see
  // sqlite/database.hpp) or the writer (first come, first served). `out` is empty.
  Status lease(const QueryInfo* info, Lease& lease, Statement& out);
  // Waits for the writer, first come first served, bounded the same way.
  Status acquire_writer(Lease& lease);
  void release(Lease& lease) noexcept;

  // The registered (or, when the cache is full, unregistered) Query for `sql`. Classifies
  // new SQL on `on` if given (a writer inside a transaction), else on a read connection.
  Result<Query> prepare(std::string_view sql, Connection* on);
  // The Query of `sql` if it was prepared before; nullopt otherwise. Never waits for SQLite.
  std::optional<Query> prepared(std::string_view sql);
  Result<AccessVerdict> judge_access(std::string_view sql, int* parameters = nullptr);
  // The statement for `info` on `conn`: borrowed from its cache, or owned when uncached.
  Status statement_on(Connection& conn, const QueryInfo& info, bool in_transaction, Statement& out);
  // The Query behind a QueryRef, checked to belong to this database.
  Status check_owner(const QueryInfo* info) const;

  int close_idle() noexcept;

  Options options;
  ConnectionSpec spec;
  std::uint64_t id;
  bool memory = false;
  Clock* clock;

 private:
  Status acquire_reader(Lease& lease);
  int try_acquire_reader() noexcept;
  Status wait_for_reader(int& slot);
  Status open_reader(ReaderSlot& slot);
  [[nodiscard]] TimePoint wait_deadline() const;
  [[nodiscard]] Status busy(std::string_view what, TimePoint since) const;

  FairLock writer_lock_;
  std::unique_ptr<Connection> writer_;

  int reader_count_;
  std::array<ReaderSlot, kMaxReadConnections> readers_;
  std::atomic<int> reader_waiters_{0};
  Signal reader_returned_;

  std::mutex registry_mutex_;
  std::unordered_map<std::string_view, std::shared_ptr<const QueryInfo>> registry_;
  std::uint32_t next_slot_ = 0;
};

}  // namespace holdfast::sqlite::detail
