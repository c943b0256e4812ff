// pg::Database's public functions: each hands the call to the Database's Impl
// (database_impl.hpp), whose paths are in database.cpp, calls.cpp, hedge.cpp,
// replica_state.cpp and transaction.cpp. One allocation, at construction; a call costs one
// pointer indirection more.
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "database_impl.hpp"
#include "holdfast/pg/lost_writes.hpp"

namespace holdfast::pg {

Database::Database(DatabaseOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Database::~Database() = default;

Result<std::unique_ptr<Database>> Database::open(DatabaseOptions options) {
  try {
    return std::make_unique<Database>(std::move(options));
  } catch (const std::invalid_argument& e) {
    return Status(Code::kInvalidArgument, e.what());
  } catch (const std::exception& e) {
    return Status(Code::kInternal, std::string("pg::Database::open: ") + e.what());
  }
}

Result<Rows> Database::read(std::string_view sql, Params params, const ReadOptions& options) {
  return impl_->read(sql, params, options);
}

Result<Rows> Database::read(const Statement& stmt, Params params, const ReadOptions& options) {
  return impl_->read(stmt, params, options);
}

Result<Rows> Database::write(std::string_view sql, Params params, Operation op) {
  return impl_->write(sql, params, op);
}

Result<Rows> Database::write(const Statement& stmt, Params params, Operation op) {
  return impl_->write(stmt, params, op);
}

Result<Rows> Database::query(std::string_view sql, Params params) {
  return impl_->query(sql, params);
}

Result<Statement> Database::prepare(std::string_view sql) {
  return impl_->prepare(sql);
}

Status Database::create_idempotency_table() {
  return impl_->create_idempotency_table();
}

bool Database::silent() const noexcept {
  return impl_->silent();
}

std::uint64_t Database::silence_checks() const noexcept {
  return impl_->silence_checks();
}

bool Database::replica_silent(std::size_t i) const {
  return impl_->replica_silent(i);
}

bool Database::replica_slow(std::size_t i) const {
  return impl_->replica_slow(i);
}

std::uint64_t Database::hedged_reads() const noexcept {
  return impl_->hedged_.load(std::memory_order_relaxed);
}

std::uint64_t Database::hedges_won() const noexcept {
  return impl_->hedges_won_.load(std::memory_order_relaxed);
}

Shield& Database::shield() noexcept {
  return *impl_->primary_->shield;
}

Shield& Database::replica_shield(std::size_t i) {
  return *impl_->replicas_.at(i)->shield;
}

Pool& Database::read_pool() noexcept {
  return *impl_->primary_->reads;
}

Pool& Database::write_pool() noexcept {
  return *impl_->primary_->writes;
}

Pool& Database::replica_pool(std::size_t i) {
  return *impl_->replicas_.at(i)->reads;
}

std::size_t Database::replica_count() const noexcept {
  return impl_->replicas_.size();
}

const DatabaseOptions& Database::options() const noexcept {
  return impl_->options_;
}

LostWritesReport Database::lost_writes() const {
  return impl_->lost_writes();
}

}  // namespace holdfast::pg
