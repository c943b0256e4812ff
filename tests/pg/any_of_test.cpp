// pg::any_of(): several conninfos (several standbys, say) as one multi-host conninfo, which a
// pool tries one host at a time. No server needed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "holdfast/pg/connection.hpp"

namespace {

using holdfast::Code;
using holdfast::pg::any_of;

TEST(PgAnyOf, TheHostsAndPortsOfEveryConninfoInOneListTheRestShared) {
  const std::vector<std::string> standbys = {
      "postgresql://app@10.0.0.2:5433/club?sslmode=disable",
      "postgresql://app@10.0.0.3,10.0.0.4:5434/club?sslmode=disable",
      "host=10.0.0.5 user=app dbname=club sslmode=disable"};
  holdfast::Result<std::string> one = any_of(standbys);
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_NE(one->find("host='10.0.0.2,10.0.0.3,10.0.0.4,10.0.0.5'"), std::string::npos) << *one;
  // In a URL a port belongs to the host before it; a host without one (the second URL's
  // first, the last conninfo's) has libpq's default (empty).
  EXPECT_NE(one->find("port='5433,,5434,'"), std::string::npos) << *one;
  EXPECT_NE(one->find("dbname='club'"), std::string::npos) << *one;
  EXPECT_NE(one->find("user='app'"), std::string::npos) << *one;
  EXPECT_NE(one->find("sslmode='disable'"), std::string::npos) << *one;
}

TEST(PgAnyOf, AValueIsQuotedAsLibpqReadsIt) {
  const std::vector<std::string> one_host = {"host=h1 password='it\\'s a \\\\ secret'",
                                             "host=h2 password='it\\'s a \\\\ secret'"};
  holdfast::Result<std::string> one = any_of(one_host);
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_NE(one->find("password='it\\'s a \\\\ secret'"), std::string::npos) << *one;
}

TEST(PgAnyOf, ConninfosThatDifferInMoreThanTheirHostsAreRefusedByTheSettingsName) {
  const std::vector<std::string> two_users = {"postgresql://app@h1/club?password=one",
                                              "postgresql://ops@h2/club?password=one"};
  holdfast::Result<std::string> r = any_of(two_users);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("conninfo 2 differs from the first in 'user'"),
            std::string::npos)
      << r.status().to_string();

  const std::vector<std::string> two_passwords = {"host=h1 password=one", "host=h2 password=two"};
  r = any_of(two_passwords);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'password'"), std::string::npos);
  EXPECT_EQ(r.status().message().find("two"), std::string::npos) << "a password was shown";

  EXPECT_FALSE(any_of(std::vector<std::string>{}).ok());
  const std::vector<std::string> bad = {"host=h1", "host=h2 no_such_setting=1"};
  EXPECT_FALSE(any_of(bad).ok());
}

}  // namespace
