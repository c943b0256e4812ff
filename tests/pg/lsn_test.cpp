// Lsn and the request's read-your-writes position, without a server: the text form
// pg_lsn uses, and a position that lives with its request (its RequestScope's window).
#include <gtest/gtest.h>

#include <thread>

#include "holdfast/core/window.hpp"
#include "holdfast/pg/lsn.hpp"

namespace holdfast::pg {
namespace {

TEST(PgLsn, ReadsAndWritesPgLsnsTextForm) {
  auto lsn = Lsn::parse("16/B374D848");
  ASSERT_TRUE(lsn.ok()) << lsn.status().to_string();
  EXPECT_EQ(lsn->value, 0x16B374D848ull);
  EXPECT_EQ(lsn->to_string(), "16/B374D848");
  EXPECT_EQ(Lsn{}.to_string(), "0/0");
  EXPECT_EQ(Lsn::parse("FFFFFFFF/FFFFFFFF")->value, ~0ull);
  EXPECT_LT(*Lsn::parse("0/FFFFFFFF"), *Lsn::parse("1/0"));
  for (const char* bad : {"", "16", "/1", "1/", "1/2/3", "x/1", "123456789/0", "1/ 2"}) {
    EXPECT_EQ(Lsn::parse(bad).status().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(PgLsn, ReadsAndWritesAPositionWithItsTimeline) {
  auto lsn = Lsn::parse("3:16/B374D848");
  ASSERT_TRUE(lsn.ok()) << lsn.status().to_string();
  EXPECT_EQ(lsn->value, 0x16B374D848ull);
  EXPECT_EQ(lsn->timeline, 3u);
  EXPECT_EQ(lsn->to_string_with_timeline(), "3:16/B374D848");
  EXPECT_EQ(lsn->to_string(), "16/B374D848") << "pg_lsn's form, for SQL";
  EXPECT_EQ(Lsn::parse("16/B374D848")->timeline, 0u) << "not known";
  EXPECT_EQ(Lsn::parse("16/B374D848")->to_string_with_timeline(), "16/B374D848");
  EXPECT_EQ((Lsn{0x10, 4294967295u}.to_string_with_timeline()), "4294967295:0/10");
  for (const char* bad :
       {":1/2", "0:1/2", "x:1/2", "-1:1/2", "4294967296:1/2", "1:", "1:2:3/4", " 1:1/2"}) {
    EXPECT_EQ(Lsn::parse(bad).status().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(PgLsn, ANewerTimelinesPositionReplacesAnOlderOnesAndNeverTheOtherWayRound) {
  // After a promotion the new timeline forks from the old one before the old one's end: an
  // old position is not "later" because its number is larger.
  RequestScope request;
  require_lsn(Lsn{900, 2});
  require_lsn(Lsn{500, 3});
  EXPECT_EQ(request_lsn(), (Lsn{500, 3}));
  require_lsn(Lsn{950, 2});  // the old timeline: ignored
  EXPECT_EQ(request_lsn(), (Lsn{500, 3}));
  require_lsn(Lsn{600, 0});  // timeline not known: taken as the request's own
  EXPECT_EQ(request_lsn(), (Lsn{600, 3}));
  require_lsn(Lsn{700, 3});
  EXPECT_EQ(request_lsn(), (Lsn{700, 3}));
}

TEST(PgLsn, ThePositionLivesWithItsRequest) {
  const Lsn a{100};
  const Lsn b{200};
  // Outside any request there is none, and nothing is kept.
  require_lsn(a);
  EXPECT_TRUE(request_lsn().empty());
  {
    RequestScope request;
    require_lsn(b);
    require_lsn(a);  // never lowered
    EXPECT_EQ(request_lsn(), b);
    {
      RequestScope nested;  // shares the request's window, and its position
      EXPECT_EQ(request_lsn(), b);
    }
    request.window().open(Clock::system().now());  // as the first database call does
    EXPECT_EQ(request_lsn(), b);
  }
  EXPECT_TRUE(request_lsn().empty());
  // The next request on this thread starts without it, even where its window sits at the
  // same address, once the one before reached the database (a Database call opens the
  // window, then reads or raises the position).
  for (int i = 0; i < 3; ++i) {
    RequestScope request;
    EXPECT_TRUE(request_lsn().empty()) << "request " << i;
    require_lsn(Lsn{static_cast<std::uint64_t>(1000 + i)});
    request.window().open(Clock::system().now());
    EXPECT_EQ(request_lsn().value, static_cast<std::uint64_t>(1000 + i));
  }
}

TEST(PgLsn, ARequestContextCarriesThePositionToEveryThreadOfTheRequest) {
  RequestContext request;
  {
    RequestScope here(request);
    require_lsn(Lsn{500, 3});
    require_lsn(Lsn{700, 3});  // as a commit of the request moves it
    EXPECT_EQ(request_lsn(), (Lsn{700, 3}));
  }
  EXPECT_EQ(request.position(), (WritePosition{700, 3, false}));
  std::thread job([copy = request] {
    RequestScope there(copy);  // no PositionScope: the context is the position
    EXPECT_EQ(request_lsn(), (Lsn{700, 3}));
    carry_position({request_lsn(), true});  // a COMMIT whose answer was lost
    EXPECT_TRUE(carried_position().primary_only);
  });
  job.join();
  EXPECT_TRUE(request.position().primary_only) << "what the job learned is the request's";
  RequestScope back(request);
  EXPECT_EQ(carried_position().lsn, (Lsn{700, 3}));
  EXPECT_TRUE(carried_position().primary_only);
}

}  // namespace
}  // namespace holdfast::pg
