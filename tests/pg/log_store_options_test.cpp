// PgLogStore without a server: its options are checked and name the field, its messages
// never carry the password, and the array literals its batches are sent as quote, escape and
// repair text exactly (src/pg/array_literal.hpp).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <string_view>

#include "array_literal.hpp"  // src/pg
#include "holdfast/pg/log_store.hpp"
#include "holdfast/pg/url.hpp"

namespace holdfast::pg {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const std::string kFffd = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

TEST(PgLogStoreOptions, BadOptionsAreRefusedNamingTheField) {
  PgLogStore::Options o;
  EXPECT_EQ(PgLogStore::open(o).status().code(), Code::kInvalidArgument);
  EXPECT_NE(PgLogStore::open(o).status().message().find("url"), std::string_view::npos);
  o.url = "postgresql://logger@127.0.0.1:1/club";
  o.statement_timeout = Duration::zero();
  auto r = PgLogStore::open(o);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("statement_timeout"), std::string_view::npos);
  o.statement_timeout = seconds(2);
  o.lock_timeout = milliseconds(-1);
  EXPECT_NE(PgLogStore::open(o).status().message().find("lock_timeout"), std::string_view::npos);
}

TEST(PgLogStoreOptions, RedactPasswordMasksEveryFormOfThePassword) {
  EXPECT_EQ(redact_password("postgresql://logger:s3cret@db.example:5432/club?sslmode=disable&"
                            "password=other&application_name=x"),
            "postgresql://logger:***@db.example:5432/club?sslmode=disable&password=***&"
            "application_name=x");
  EXPECT_EQ(redact_password("postgres://db.example/club?password=other"),
            "postgres://db.example/club?password=***");
  EXPECT_EQ(redact_password("postgresql://db.example/club"), "postgresql://db.example/club");
  EXPECT_EQ(redact_password("host=127.0.0.1 password='my s3cret\\'s' dbname=club"),
            "host=127.0.0.1 password='***' dbname=club");
  EXPECT_EQ(redact_password("host=h password = abc user=u"), "host=h password = *** user=u");
  EXPECT_EQ(redact_password("host=h junk password=s3cret"), "host=h junk password=***")
      << "a word without a value does not stop the search";
  EXPECT_EQ(without_password("FATAL: role x password s3cret failed", "host=h password=s3cret"),
            "FATAL: role x password *** failed");
}

TEST(PgLogStoreOptions, AFailedOpenNamesTheUrlWithoutThePassword) {
  PgLogStore::Options o;
  o.url = "postgresql://logger:s3cret@127.0.0.1:1/club?sslmode=disable";  // port 1: refused
  auto r = PgLogStore::open(o);
  ASSERT_FALSE(r.ok());
  const std::string message(r.status().message());
  EXPECT_NE(message.find("postgresql://logger:***@127.0.0.1:1/club?sslmode=disable"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("s3cret"), std::string::npos) << message;
  EXPECT_EQ(r.status().code(), Code::kUnavailable) << r.status().to_string();
}

TEST(PgLogStoreArrays, ElementsAreQuotedAndEscapedAndOnlyBadTextIsChanged) {
  std::string out;
  EXPECT_FALSE(append_array_element(out, R"(say "hi" \ {a,b} NULL)"));
  EXPECT_EQ(out, R"("say \"hi\" \\ {a,b} NULL")");
  out.clear();
  EXPECT_FALSE(append_array_element(out, ""));
  EXPECT_EQ(out, R"("")");
  out.clear();
  EXPECT_FALSE(append_array_element(out, "Zażółć \xF0\x9F\x98\x80"));
  EXPECT_EQ(out, "\"Zażółć \xF0\x9F\x98\x80\"");
  out.clear();
  EXPECT_TRUE(append_array_element(out, std::string("a\0b", 3)));
  EXPECT_EQ(out, "\"ab\"");
}

TEST(PgLogStoreArrays, InvalidUtf8BecomesOneReplacementPerMaximalBadSequence) {
  auto cleaned = [](std::string_view in) {
    std::string out;
    append_array_element(out, in);
    return out.substr(1, out.size() - 2);  // without the quotes
  };
  EXPECT_EQ(cleaned("\xFF"), kFffd);
  EXPECT_EQ(cleaned("\xC3("), kFffd + "(");                               // missing continuation
  EXPECT_EQ(cleaned("\xC0\xAF"), kFffd + kFffd);                          // overlong '/'
  EXPECT_EQ(cleaned("\xED\xA0\x80"), kFffd + kFffd + kFffd);              // a surrogate
  EXPECT_EQ(cleaned("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // above U+10FFFF
  EXPECT_EQ(cleaned("abc\xE2\x82"), "abc" + kFffd);                       // cut short at the end
  EXPECT_EQ(cleaned("\xE2\x82\xAC 5"), "\xE2\x82\xAC 5");                 // a valid euro sign
}

}  // namespace
}  // namespace holdfast::pg
