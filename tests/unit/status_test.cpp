#include "holdfast/core/status.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "holdfast/core/result.hpp"

namespace holdfast {
namespace {

using ::testing::HasSubstr;

TEST(Status, OkIsAPointerWideValueWithNothingInIt) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(sizeof(Status), sizeof(void*));
  EXPECT_EQ(s.code(), Code::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_FALSE(s.fault().transient());
  EXPECT_EQ(s.to_string(), "OK");
  s.with_stop(StopReason::kWindowSpent, 3).with_sqlite(5);  // builders are no-ops on OK
  EXPECT_TRUE(s.ok());
}

TEST(Status, AnErrorCarriesItsNativeCodeFaultAndWhyTheLoopStopped) {
  Status s(Code::kUnavailable, "database is locked",
           Fault{RetryScope::kStatement, Outcome::kNotApplied, Pace::kFast, true});
  s.with_sqlite(5).with_stop(StopReason::kBreakerOpen, 2, std::chrono::milliseconds(1500));
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.backend(), Backend::kSqlite);
  EXPECT_EQ(s.sqlite_code(), 5);
  EXPECT_EQ(s.retry_after(), std::chrono::milliseconds(1500));
  EXPECT_EQ(s.to_string(),
            "UNAVAILABLE: database is locked [sqlite 5; statement/not_applied/fast/overload] "
            "(gave up: breaker open after 2 attempts; retry after 1500 ms)");
}

TEST(Status, CopiesAreDeepAndIndependent) {
  Status a(Code::kAborted, "conflict");
  a.with_sqlstate("40001");
  Status b = a;
  b.annotate("payments.insert").with_txn_state(TxnState::kRolledBack);
  EXPECT_EQ(a.message(), "conflict");
  EXPECT_EQ(b.message(), "payments.insert: conflict");
  EXPECT_EQ(b.sqlstate(), "40001");
  EXPECT_EQ(a.txn_state(), TxnState::kNotInTransaction);
  EXPECT_THAT(b.to_string(), HasSubstr("(transaction rolled back)"));
}

TEST(Status, AnErrorBuiltWithOkBecomesUnknown) {
  Status s(Code::kOk, "confused");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kUnknown);
}

TEST(Result, HoldsAValueOrTheStatusThatExplainsWhyNot) {
  Result<int> good = 3;
  EXPECT_TRUE(good.ok());
  EXPECT_EQ(*good, 3);
  EXPECT_EQ(good.value_or(9), 3);
  EXPECT_TRUE(good.status().ok());

  Result<int> bad = Status(Code::kNotFound, "no such court");
  EXPECT_FALSE(bad);
  EXPECT_EQ(bad.value_or(9), 9);
  EXPECT_EQ(bad.status().code(), Code::kNotFound);
  try {
    (void)bad.value();
    FAIL() << "value() on an error must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), Code::kNotFound);
    EXPECT_THAT(e.what(), HasSubstr("no such court"));
  }
}

TEST(Result, BuiltFromAnOkStatusWithoutAValueIsAnInternalError) {
  Result<int> r = Status();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInternal);
}

TEST(Result, VoidCarriesOnlyAStatus) {
  Result<void> ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_NO_THROW(ok.value());
  Result<void> bad = Status(Code::kInternal, "x");
  EXPECT_THROW(bad.value(), Error);
}

}  // namespace
}  // namespace holdfast
