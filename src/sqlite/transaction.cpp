// holdfast::sqlite::Transaction: a write transaction holding the writer connection.
#include <sqlite3.h>

#include <utility>

#include "database_impl.hpp"
#include "holdfast/core/classify.hpp"
#include "holdfast/sqlite/database.hpp"

namespace holdfast::sqlite {

Status Transaction::abandon(Status failure) {
  if (failure.ok()) return failure;
  const Status rolled = rollback();
  failure.with_txn_state(rolled.ok() ? TxnState::kRolledBack : TxnState::kUnknown);
  Fault f = failure.fault();
  if (f.scope == RetryScope::kStatement) {
    // The statement alone cannot be repeated: the transaction around it is gone.
    f.scope = RetryScope::kTransaction;
    failure.with_fault(f);
  }
  return failure;
}

Transaction::Transaction(detail::DatabaseImpl* impl, detail::Lease lease, TxnMode mode) noexcept
    : impl_(impl), lease_(std::move(lease)), mode_(mode) {}

Transaction::Transaction(Transaction&& other) noexcept
    : impl_(other.impl_), lease_(std::move(other.lease_)), mode_(other.mode_) {}

Transaction& Transaction::operator=(Transaction&& other) noexcept {
  if (this != &other) {
    try {
      (void)rollback();
    } catch (...) {
    }
    impl_ = other.impl_;
    lease_ = std::move(other.lease_);
    mode_ = other.mode_;
  }
  return *this;
}

Transaction::~Transaction() {
  try {
    (void)rollback();
  } catch (...) {
    // Only a failed allocation of an error message can land here; the writer rolls back
    // any leftover transaction before its next use.
  }
}

bool Transaction::is_open() const noexcept {
  return lease_.held() && !lease_.conn_->autocommit();
}

Status Transaction::finished() const {
  return sqlite_status(SQLITE_MISUSE, "the transaction is already finished");
}

Status Transaction::commit() {
  if (!lease_.held()) return finished();
  detail::Connection& w = *lease_.conn_;
  if (w.autocommit()) {
    lease_.reset();
    Status s = sqlite_status(SQLITE_ABORT_ROLLBACK,
                             "nothing to commit: SQLite rolled the transaction back after an "
                             "earlier error");
    s.with_txn_state(TxnState::kRolledBack);
    return s;
  }
  Status s = w.control(detail::Control::kCommit);
  if (s.ok()) {
    lease_.reset();
    return s;
  }
  if (w.autocommit()) {
    lease_.reset();
    s.with_txn_state(TxnState::kRolledBack);
  } else {
    s.with_txn_state(TxnState::kStillOpen);
  }
  return s;
}

Status Transaction::rollback() {
  if (!lease_.held()) return Status();
  detail::Connection& w = *lease_.conn_;
  Status s;
  if (!w.autocommit()) s = w.control(detail::Control::kRollback);
  lease_.reset();
  return s;
}

Status Transaction::prepare_statement(QueryRef ref, Statement& out) {
  if (!lease_.held()) return finished();
  detail::Connection& w = *lease_.conn_;
  const auto in_txn = [&](Status s) {
    s.with_txn_state(w.autocommit() ? TxnState::kRolledBack : TxnState::kStillOpen);
    return s;
  };
  const Query* q = ref.query();
  Query resolved;
  if (q == nullptr) {
    Result<Query> r = impl_->prepare(ref.sql(), &w);
    if (!r.ok()) return in_txn(r.status());
    resolved = std::move(*r);
    q = &resolved;
  }
  const detail::QueryInfo* info = detail::QueryAccess::info(*q);
  if (Status s = impl_->check_owner(info); !s.ok()) return in_txn(std::move(s));
  switch (info->verdict.effect) {
    case Effect::kTransactionControl:
      return in_txn(detail::refuse(*info,
                                   "is transaction control: end the transaction with "
                                   "commit() or rollback()"));
    case Effect::kMultipleStatements:
      return in_txn(detail::refuse(*info,
                                   "holds more than one statement: run them one at a "
                                   "time"));
    default:
      break;
  }
  if (Status s = impl_->statement_on(w, *info, /*in_transaction=*/true, out); !s.ok()) {
    return in_txn(std::move(s));
  }
  return Status();
}

Status Transaction::run_statement(QueryRef ref, detail::StatementBody body) {
  Statement st;
  if (Status s = prepare_statement(ref, st); !s.ok()) return s;
  return body(st);
}

Result<Statement> Transaction::statement(QueryRef ref) {
  Statement st;
  if (Status s = prepare_statement(ref, st); !s.ok()) return s;
  return st;
}

}  // namespace holdfast::sqlite
