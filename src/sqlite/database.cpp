#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "database_impl.hpp"
#include "holdfast/core/classify.hpp"
#include "holdfast/core/clock.hpp"
#include "holdfast/core/window.hpp"
#include "holdfast/detail/table_name.hpp"
#include "holdfast/sqlite/database.hpp"

namespace holdfast::sqlite {
namespace detail {
namespace {

std::atomic<std::uint64_t> g_next_database_id{1};

// Waiters for a read connection re-check at least this often: a connection given back in
// the instant between a waiter's last look and its sleep is noticed without a barrier on
// the release path.
constexpr Duration kReaderRecheck = std::chrono::milliseconds(2);

void validate(const Options& o) {
  if (o.path.empty()) throw std::invalid_argument("Options::path must not be empty");
  if (o.read_connections < 1 || o.read_connections > kMaxReadConnections) {
    throw std::invalid_argument(
        cat({"Options::read_connections must be between 1 and ",
             std::to_string(kMaxReadConnections), ", got ", std::to_string(o.read_connections)}));
  }
  if (o.busy_timeout < Duration::zero()) {
    throw std::invalid_argument(
        cat({"Options::busy_timeout must not be negative, got ", ms_text(o.busy_timeout)}));
  }
  if (o.clock == nullptr) throw std::invalid_argument("Options::clock must not be null");
  if (!holdfast::detail::is_table_name(o.idempotency_table)) {
    throw std::invalid_argument(cat({"Options::idempotency_table '", o.idempotency_table,
                                     "' is not a plain or schema-qualified identifier"}));
  }
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

Status refuse(const QueryInfo& info, std::string_view why) {
  return sqlite_status(SQLITE_ERROR, cat({"'", sql_excerpt(info.sql), "' ", why}));
}

DatabaseImpl::DatabaseImpl(Options opts)
    : options(std::move(opts)),
      id(g_next_database_id.fetch_add(1, std::memory_order_relaxed)),
      clock(options.clock),
      writer_lock_(*options.clock),
      reader_count_(options.read_connections) {
  spec.options = &options;
  spec.display = options.path;
  memory = options.path == ":memory:";
  if (memory) {
    // One in-memory database shared by this Database's connections (memdb VFS, SQLite
    // 3.36+); it lives while one of them is open.
    spec.target = cat({"file:/holdfast-memory-", std::to_string(id), "?vfs=memdb"});
  } else {
    spec.target = options.path;
  }
}

Status DatabaseImpl::open() {
  const bool is_uri = options.path.rfind("file:", 0) == 0;
  if (!memory && !is_uri && (!options.create || options.read_only) && !file_exists(options.path)) {
    return sqlite_status(SQLITE_CANTOPEN, cat({"database file '", options.path, "' does not exist",
                                               options.read_only ? " (Options::read_only)"
                                                                 : " (Options::create is false)"}));
  }
  spec.create = options.create || memory;
  const Role role = options.read_only ? Role::kReader : Role::kWriter;
  Result<std::unique_ptr<Connection>> first = Connection::open(spec, role);
  spec.create = false;
  if (!first.ok()) return first.status();
  Connection& c = **first;

  // The first read of the file: this is where "not a database" and locks show up.
  const char* check = "SELECT count(*) FROM sqlite_schema";
  std::string_view wanted;
  if (!options.read_only && !memory && options.journal_mode != JournalMode::kKeep) {
    check = options.journal_mode == JournalMode::kWal ? "PRAGMA journal_mode=WAL"
                                                      : "PRAGMA journal_mode=DELETE";
    wanted = options.journal_mode == JournalMode::kWal ? "wal" : "delete";
  }
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(c.db(), check, -1, &stmt, nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  if (rc != SQLITE_ROW) {
    Status s = c.error(rc, cat({"cannot use database '", options.path, "'"}));
    sqlite3_finalize(stmt);
    return s;
  }
  if (!wanted.empty()) {
    const unsigned char* got = sqlite3_column_text(stmt, 0);
    const std::string mode = got != nullptr ? reinterpret_cast<const char*>(got) : "";
    if (mode != wanted) {
      sqlite3_finalize(stmt);
      return sqlite_status(SQLITE_ERROR,
                           cat({"cannot switch database '", options.path, "' to ", wanted,
                                " journal mode: it stays in '", mode, "' mode"}));
    }
  }
  sqlite3_finalize(stmt);
  if (!options.read_only && sqlite3_db_readonly(c.db(), "main") == 1) {
    return sqlite_status(SQLITE_READONLY,
                         cat({"database file '", options.path,
                              "' is not writable (open it with Options::read_only to read it)"}));
  }
  if (options.read_only) {
    readers_[0].conn = std::move(*first);
  } else {
    writer_ = std::move(*first);
  }
  return Status();
}

TimePoint DatabaseImpl::wait_deadline() const {
  // The same bound as a wait for SQLite's locks (Connection::on_busy; window.hpp's rule).
  const TimePoint now = clock->now();
  return now + RequestScope::begin_wait(now, options.busy_timeout);
}

Status DatabaseImpl::busy(std::string_view what, TimePoint since) const {
  return sqlite_status(SQLITE_BUSY, cat({"database '", options.path, "' is busy: ", what, " for ",
                                         ms_text(clock->now() - since)}));
}

// The first free connection from the start: a lone thread keeps using the first one, whose
// statements are warm; concurrent threads spread over the others.
inline int DatabaseImpl::try_acquire_reader() noexcept {
  const int n = reader_count_;
  for (int slot = 0; slot < n; ++slot) {
    std::atomic<bool>& busy_flag = readers_[static_cast<std::size_t>(slot)].busy;
    if (!busy_flag.load(std::memory_order_relaxed) &&
        !busy_flag.exchange(true, std::memory_order_acquire)) {
      return slot;
    }
  }
  return -1;
}

Status DatabaseImpl::wait_for_reader(int& slot) {
  const TimePoint start = clock->now();
  const TimePoint deadline = wait_deadline();
  reader_waiters_.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    const std::uint64_t seen = reader_returned_.generation();
    slot = try_acquire_reader();
    if (slot >= 0) break;
    const TimePoint now = clock->now();
    if (now >= deadline) {
      reader_waiters_.fetch_sub(1, std::memory_order_relaxed);
      return busy(
          cat({"all ", std::to_string(reader_count_), " read connections were in use; waited"}),
          start);
    }
    clock->sleep_until(std::min(deadline, now + kReaderRecheck), &reader_returned_, seen);
  }
  reader_waiters_.fetch_sub(1, std::memory_order_relaxed);
  return Status();
}

Status DatabaseImpl::open_reader(ReaderSlot& slot) {
  Result<std::unique_ptr<Connection>> c = Connection::open(spec, Role::kReader);
  if (!c.ok()) return c.status();
  slot.conn = std::move(*c);
  return Status();
}

inline Status DatabaseImpl::acquire_reader(Lease& lease) {
  int slot = try_acquire_reader();
  if (slot < 0) [[unlikely]] {
    if (Status s = wait_for_reader(slot); !s.ok()) return s;
  }
  ReaderSlot& r = readers_[static_cast<std::size_t>(slot)];
  lease.impl_ = this;  // from here on the lease gives the slot back, whatever happens
  lease.slot_ = slot;
  if (r.conn == nullptr) [[unlikely]] {
    if (Status s = open_reader(r); !s.ok()) return s;
  }
  lease.conn_ = r.conn.get();
  return Status();
}

Status DatabaseImpl::acquire_writer(Lease& lease) {
  if (options.read_only) {
    return sqlite_status(SQLITE_READONLY, cat({"database '", options.path,
                                               "' was opened read-only (Options::read_only)"}));
  }
  if (!writer_lock_.try_lock()) [[unlikely]] {
    const TimePoint start = clock->now();
    if (!writer_lock_.lock_until(wait_deadline())) {
      return busy("other writers of this process held the writer; waited", start);
    }
  }
  if (writer_ == nullptr) [[unlikely]] {
    Result<std::unique_ptr<Connection>> c = Connection::open(spec, Role::kWriter);
    if (!c.ok()) {
      writer_lock_.unlock();
      return c.status();
    }
    writer_ = std::move(*c);
  }
  if (!writer_->autocommit()) [[unlikely]] {
    // A transaction whose ROLLBACK failed earlier: it must not leak into this use.
    (void)writer_->control(Control::kRollback);
  }
  lease.impl_ = this;
  lease.conn_ = writer_.get();
  lease.slot_ = kWriterSlot;
  return Status();
}

inline void DatabaseImpl::release(Lease& lease) noexcept {
  if (lease.slot_ == kWriterSlot) {
    writer_lock_.unlock();
    return;
  }
  readers_[static_cast<std::size_t>(lease.slot_)].busy.store(false, std::memory_order_release);
  if (reader_waiters_.load(std::memory_order_relaxed) != 0) [[unlikely]] {
    reader_returned_.notify_all();
  }
}

Status DatabaseImpl::check_owner(const QueryInfo* info) const {
  if (info == nullptr) {
    return sqlite_status(SQLITE_MISUSE, "the Query is empty (it was never prepared)");
  }
  if (info->owner != id) {
    return sqlite_status(SQLITE_MISUSE,
                         cat({"'", sql_excerpt(info->sql), "' was prepared by another Database"}));
  }
  return Status();
}

Result<AccessVerdict> DatabaseImpl::judge_access(std::string_view sql, int* parameters) {
  Lease lease;
  if (Status s = acquire_reader(lease); !s.ok()) return s;
  return lease.conn_->judge_access(sql, parameters);
}

std::optional<Query> DatabaseImpl::prepared(std::string_view sql) {
  std::lock_guard<std::mutex> lock(registry_mutex_);
  auto it = registry_.find(sql);
  if (it == registry_.end()) return std::nullopt;
  return QueryAccess::make(it->second);
}

Result<Query> DatabaseImpl::prepare(std::string_view sql, Connection* on) {
  {
    std::lock_guard<std::mutex> lock(registry_mutex_);
    auto it = registry_.find(sql);
    if (it != registry_.end()) return QueryAccess::make(it->second);
  }
  // Classify outside the lock: it prepares, which reads the schema and may wait for a lock.
  int parameters = -1;
  Result<AccessVerdict> verdict =
      on != nullptr ? on->judge_access(sql, &parameters) : judge_access(sql, &parameters);
  if (!verdict.ok()) return verdict.status();
  auto info = std::make_shared<QueryInfo>();
  info->owner = id;
  info->parameters = parameters;
  info->verdict = *verdict;
  info->sql = std::string(sql);
  std::lock_guard<std::mutex> lock(registry_mutex_);
  auto it = registry_.find(sql);
  if (it != registry_.end()) return QueryAccess::make(it->second);
  if (registry_.size() < options.statement_cache) {
    info->slot = next_slot_++;
    registry_.emplace(std::string_view(info->sql), info);
  }
  return QueryAccess::make(std::move(info));
}

Status DatabaseImpl::statement_on(Connection& conn, const QueryInfo& info, bool in_transaction,
                                  Statement& out) {
  if (info.slot != QueryInfo::kUncached) [[likely]] {
    sqlite3_stmt* st = conn.cached(info);
    if (st == nullptr) [[unlikely]] {
      Result<sqlite3_stmt*> prepared = conn.prepare_cached(info);
      if (!prepared.ok()) return prepared.status();
      st = *prepared;
    }
    StatementAccess::adopt(out, st, /*owned=*/false, in_transaction, info.parameters);
    return Status();
  }
  Result<sqlite3_stmt*> st = conn.prepare(info.sql);
  if (!st.ok()) return st.status();
  StatementAccess::adopt(out, *st, /*owned=*/true, in_transaction, info.parameters);
  return Status();
}

inline Status DatabaseImpl::lease(const QueryInfo* info, Lease& lease, Statement& out) {
  if (info == nullptr || info->owner != id) [[unlikely]]
    return check_owner(info);
  if (info->verdict.access == Access::kRead) [[likely]] {
    if (Status s = acquire_reader(lease); !s.ok()) [[unlikely]]
      return s;
  } else {
    switch (info->verdict.effect) {
      case Effect::kTransactionControl:
        return refuse(*info, "is transaction control: use Database::begin() or transaction()");
      case Effect::kSavepoint:
        return refuse(*info, "is a savepoint: use it inside a Transaction");
      case Effect::kMultipleStatements:
        return refuse(*info,
                      "holds more than one statement: run them one at a time, or use "
                      "execute_script()");
      default:
        break;
    }
    if (Status s = acquire_writer(lease); !s.ok()) return s;
  }
  return statement_on(*lease.conn_, *info, /*in_transaction=*/false, out);
}

int DatabaseImpl::close_idle() noexcept {
  int closed = 0;
  for (int i = 0; i < reader_count_; ++i) {
    ReaderSlot& r = readers_[static_cast<std::size_t>(i)];
    bool expected = false;
    if (!r.busy.compare_exchange_strong(expected, true, std::memory_order_acquire)) continue;
    if (r.conn != nullptr) {
      r.conn.reset();
      ++closed;
    }
    r.busy.store(false, std::memory_order_release);
  }
  // The writer keeps an in-memory database alive.
  if (!memory && writer_lock_.try_lock()) {
    if (writer_ != nullptr) {
      writer_.reset();
      ++closed;
    }
    writer_lock_.unlock();
  }
  return closed;
}

Lease::Lease(Lease&& other) noexcept
    : impl_(std::exchange(other.impl_, nullptr)),
      conn_(std::exchange(other.conn_, nullptr)),
      slot_(other.slot_) {}

Lease& Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    reset();
    impl_ = std::exchange(other.impl_, nullptr);
    conn_ = std::exchange(other.conn_, nullptr);
    slot_ = other.slot_;
  }
  return *this;
}

void Lease::reset() noexcept {
  if (impl_ == nullptr) return;
  impl_->release(*this);
  impl_ = nullptr;
  conn_ = nullptr;
}

}  // namespace detail

// --- Database ------------------------------------------------------------------------

Database::Database(std::unique_ptr<detail::DatabaseImpl> impl) noexcept : impl_(std::move(impl)) {}
Database::Database(Database&&) noexcept = default;
Database& Database::operator=(Database&&) noexcept = default;
Database::~Database() = default;

Result<Database> Database::open(Options options) {
  detail::validate(options);
  auto impl = std::make_unique<detail::DatabaseImpl>(std::move(options));
  if (Status s = impl->open(); !s.ok()) return s;
  return Database(std::move(impl));
}

const Options& Database::options() const noexcept {
  return impl_->options;
}

Result<Query> Database::prepare(std::string_view sql) {
  return impl_->prepare(sql, nullptr);
}

std::optional<Query> Database::prepared(std::string_view sql) {
  return impl_->prepared(sql);
}

Result<AccessVerdict> Database::judge_access(std::string_view sql) {
  return impl_->judge_access(sql);
}

Result<Transaction> Database::begin(TxnMode mode) {
  detail::Lease lease;
  if (Status s = impl_->acquire_writer(lease); !s.ok()) return s;
  const detail::Control begin = mode == TxnMode::kImmediate   ? detail::Control::kBeginImmediate
                                : mode == TxnMode::kExclusive ? detail::Control::kBeginExclusive
                                                              : detail::Control::kBeginDeferred;
  if (Status s = lease.conn_->control(begin); !s.ok()) return s;
  return Transaction(impl_.get(), std::move(lease), mode);
}

Status Database::execute_script(std::string_view sql) {
  Result<Transaction> tx = begin(TxnMode::kImmediate);
  if (!tx.ok()) return tx.status();
  if (Status s = tx->lease_.conn_->run_script(sql); !s.ok()) {
    return tx->abandon(std::move(s));
  }
  if (Status s = tx->commit(); !s.ok()) return tx->abandon(std::move(s));
  return Status();
}

Status Database::run_statement(QueryRef ref, detail::StatementBody body) {
  const Query* q = ref.query();
  if (q == nullptr) [[unlikely]] {
    Result<Query> resolved = impl_->prepare(ref.sql(), nullptr);
    if (!resolved.ok()) return resolved.status();
    return run_statement(*resolved, body);
  }
  detail::Lease lease;
  Statement st;  // destroyed (reset) before the lease gives the connection back
  if (Status s = impl_->lease(detail::QueryAccess::info(*q), lease, st); !s.ok()) [[unlikely]]
    return s;
  return body(st);
}

Status Database::run_transaction(detail::TransactionBody fn, TxnMode mode) {
  auto commit = [](Transaction& tx) { return tx.commit(); };
  return run_transaction(fn, mode, detail::TransactionBody(commit));
}

Status Database::run_transaction(detail::TransactionBody fn, TxnMode mode,
                                 detail::TransactionBody commit) {
  Result<Transaction> tx = begin(mode);
  if (!tx.ok()) return tx.status();
  if (Status s = fn(*tx); !s.ok()) return tx->abandon(std::move(s));
  if (Status s = commit(*tx); !s.ok()) return tx->abandon(std::move(s));
  return Status();
}

Status Database::create_idempotency_table() {
  return execute_script(
      detail::cat({"CREATE TABLE IF NOT EXISTS ", impl_->options.idempotency_table,
                   " (key TEXT PRIMARY KEY, result TEXT, created_at TEXT NOT NULL "
                   "DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')))"}));
}

namespace detail {

Clock* system_clock() noexcept {
  return &Clock::system();
}

Result<KeyedResult> run_once(Transaction& tx, const std::string& table, std::string_view key,
                             holdfast::detail::StatusRef<Transaction&, std::string&> fn) {
  Result<std::optional<std::string>> seen = tx.query_one<std::string>(
      cat({"SELECT coalesce(result, '') FROM ", table, " WHERE key = ?"}), key);
  if (!seen.ok()) return seen.status();
  if (seen->has_value()) return KeyedResult{std::move(**seen), true};
  std::string result;
  if (Status s = fn(tx, result); !s.ok()) return s;
  Result<Exec> recorded =
      tx.execute(cat({"INSERT INTO ", table, " (key, result) VALUES (?, ?)"}), key, result);
  if (!recorded.ok()) return recorded.status();
  return KeyedResult{std::move(result), false};
}

}  // namespace detail

int Database::close_idle_connections() noexcept {
  return impl_->close_idle();
}

}  // namespace holdfast::sqlite
