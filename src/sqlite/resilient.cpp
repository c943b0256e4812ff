#include "holdfast/sqlite/resilient.hpp"

#include <optional>

#include "holdfast/core/retry.hpp"
#include "holdfast/core/retry_policy.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/core/window.hpp"

namespace holdfast::sqlite {

template <class F>
auto ResilientDatabase::run(Shield* shield, Operation op, F&& attempt) -> std::invoke_result_t<F&> {
  return holdfast::detail::run_through(
      attempt, [&](holdfast::detail::AttemptRef a) { return run_attempts(shield, op, a); });
}

Result<ResilientDatabase> ResilientDatabase::open(Options options, const RetryPolicy& policy) {
  Result<Database> db = Database::open(std::move(options));
  if (!db.ok()) return db.status();
  return ResilientDatabase(std::move(*db), policy);
}

ResilientDatabase::ResilientDatabase(Database db, const RetryPolicy& policy)
    : ResilientDatabase(std::make_shared<Database>(std::move(db)),
                        std::make_shared<const RetryPolicy>(policy), nullptr, nullptr) {}

Result<ResilientDatabase> ResilientDatabase::open(Options options, Shield& shield,
                                                  const RetryPolicy& policy) {
  Result<Database> db = Database::open(std::move(options));
  if (!db.ok()) return db.status();
  return ResilientDatabase(std::move(*db), shield, policy);
}

ResilientDatabase::ResilientDatabase(Database db, Shield& shield, const RetryPolicy& policy)
    : ResilientDatabase(std::make_shared<Database>(std::move(db)),
                        std::make_shared<const RetryPolicy>(policy), &shield, &shield) {}

Result<ResilientDatabase> ResilientDatabase::open(Options options, Shield& reads, Shield& writes,
                                                  const RetryPolicy& policy) {
  Result<Database> db = Database::open(std::move(options));
  if (!db.ok()) return db.status();
  return ResilientDatabase(std::move(*db), reads, writes, policy);
}

ResilientDatabase::ResilientDatabase(Database db, Shield& reads, Shield& writes,
                                     const RetryPolicy& policy)
    : ResilientDatabase(std::make_shared<Database>(std::move(db)),
                        std::make_shared<const RetryPolicy>(policy), &reads, &writes) {}

ResilientDatabase::ResilientDatabase(std::shared_ptr<Database> db,
                                     std::shared_ptr<const RetryPolicy> policy, Shield* reads,
                                     Shield* writes, bool one_attempt)
    : db_(std::move(db)),
      policy_(std::move(policy)),
      shield_(reads),
      write_shield_(writes),
      one_attempt_(one_attempt) {}

const RetryPolicy& ResilientDatabase::standard_policy() noexcept {
  static const RetryPolicy standard = RetryPolicy::standard();
  return standard;
}

ResilientDatabase ResilientDatabase::with_policy(const RetryPolicy& policy) const {
  return ResilientDatabase(db_, std::make_shared<const RetryPolicy>(policy), shield_,
                           write_shield_);
}

ResilientDatabase ResilientDatabase::one_attempt() const {
  RetryPolicy once = RetryPolicy::no_retry();
  once.window(policy_->window()).clock(policy_->clock());
  return ResilientDatabase(db_, std::make_shared<const RetryPolicy>(std::move(once)), nullptr,
                           nullptr, /*one_attempt=*/true);
}

Status ResilientDatabase::create_idempotency_table() {
  return run(write_shield_, Operation::idempotent_write("sqlite.idempotency_table"),
             [&] { return db_->create_idempotency_table(); });
}

Result<Query> ResilientDatabase::resolve(QueryRef q) {
  // SQL text met before is a lookup: no attempt on the database, nothing to retry.
  if (std::optional<Query> known = db_->prepared(q.sql()); known.has_value()) return *known;
  // Preparing SQL text runs nothing, so it is retried like a read whatever the SQL is.
  return run(shield_, Operation::read("sqlite.prepare"), [&] { return db_->prepare(q.sql()); });
}

Result<Query> ResilientDatabase::prepare(std::string_view sql) {
  return resolve(sql);
}

Result<AccessVerdict> ResilientDatabase::judge_access(std::string_view sql) {
  return run(shield_, Operation::read("sqlite.judge_access"),
             [&] { return db_->judge_access(sql); });
}

Result<Transaction> ResilientDatabase::begin(TxnMode mode) {
  // A failed wait for the writer or a BUSY BEGIN began nothing.
  return run(write_shield_, Operation::write("sqlite.begin"), [&] { return db_->begin(mode); });
}

Status ResilientDatabase::execute_script(std::string_view sql) {
  return run(write_shield_, Operation::transaction(/*rerunnable=*/true, "sqlite.script"),
             [&] { return db_->execute_script(sql); });
}

Status ResilientDatabase::run_attempts(Shield* shield, Operation op,
                                       holdfast::detail::AttemptRef attempt) {
  std::optional<RequestScope> own;  // a window for the busy handler outside any scope
  if (RequestScope::current_window() == nullptr) own.emplace(policy_->window(), policy_->clock());
  if (one_attempt_) return attempt();
  if (shield != nullptr) return shield->run(*policy_, op, attempt);
  return holdfast::retry(*policy_, op, attempt);
}

Status ResilientDatabase::run_statement(QueryRef q, detail::StatementBody body) {
  if (const Query* query = q.query(); query != nullptr) [[likely]]
    return run_statement(*query, body);
  Result<Query> resolved = resolve(q);
  if (!resolved.ok()) return resolved.status();
  return run_statement(*resolved, body);
}

Status ResilientDatabase::run_statement(const Query& query, detail::StatementBody body) {
  const bool read = query.access() == Access::kRead;
  const Operation op = read ? Operation::read(query.sql()) : Operation::write(query.sql());
  auto attempt = [&] { return db_->run_statement(query, body); };
  return run_attempts(read ? shield_ : write_shield_, op, holdfast::detail::AttemptRef(attempt));
}

Status ResilientDatabase::run_transaction(detail::TransactionBody fn, Operation op, TxnMode mode) {
  // A COMMIT that met SQLITE_BUSY left the transaction open: retry the COMMIT alone, within
  // the attempt the Shield admitted (a second admission could wait on the place this one
  // holds). Waiting for the writer and BEGIN ran nothing, so they are always retried.
  auto commit = [&](Transaction& tx) { return one_attempt_ ? tx.commit() : retry_commit(tx); };
  auto attempt = [&] { return db_->run_transaction(fn, mode, detail::TransactionBody(commit)); };
  return run_attempts(write_shield_, op, holdfast::detail::AttemptRef(attempt));
}

Status ResilientDatabase::retry_commit(Transaction& tx) {
  return holdfast::retry(*policy_, Operation::write("sqlite.commit"), [&] { return tx.commit(); });
}

}  // namespace holdfast::sqlite
