#include <gtest/gtest.h>

#include "holdfast/sim.hpp"

namespace holdfast::sim {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(SimStrategy, TheFourKindsHaveTheDocumentedDefaults) {
  EXPECT_EQ(Strategy::none().max_attempts, 1);
  EXPECT_EQ(Strategy::naive().max_attempts, 4);
  EXPECT_EQ(Strategy::backoff().max_attempts, 3);  // the drill's: stop_after_attempt(3)
  const Strategy h = Strategy::holdfast();
  EXPECT_EQ(h.max_attempts, 5);
  EXPECT_EQ(h.window, seconds(6));
  EXPECT_TRUE(h.throttle);
  EXPECT_TRUE(h.breaker);
}

TEST(SimStrategy, AListIsParsedInOrderWithPerEntrySettings) {
  Result<std::vector<Strategy>> list =
      parse_strategies("none,naive:attempts=3,backoff,holdfast,holdfast:threshold=9:no-throttle");
  ASSERT_TRUE(list.ok()) << list.status().to_string();
  ASSERT_EQ(list->size(), 5u);
  EXPECT_EQ((*list)[1].kind, StrategyKind::kNaive);
  EXPECT_EQ((*list)[1].max_attempts, 3);
  EXPECT_EQ((*list)[1].name, "naive:attempts=3");
  EXPECT_EQ((*list)[3].breaker_threshold, 0);
  EXPECT_EQ((*list)[4].breaker_threshold, 9);
  EXPECT_FALSE((*list)[4].throttle);
  EXPECT_TRUE((*list)[4].breaker);
}

TEST(SimStrategy, CommandLineDefaultsApplyToEveryHoldfastEntryOnly) {
  Strategy base = Strategy::holdfast();
  base.window = seconds(3);
  base.breaker = false;
  Result<std::vector<Strategy>> list = parse_strategies("naive,holdfast:window=2s,holdfast", base);
  ASSERT_TRUE(list.ok()) << list.status().to_string();
  EXPECT_EQ((*list)[1].window, seconds(2));
  EXPECT_FALSE((*list)[1].breaker);
  EXPECT_EQ((*list)[2].window, seconds(3));
  EXPECT_EQ((*list)[0].kind, StrategyKind::kNaive);
}

TEST(SimStrategy, MistakesAreNamed) {
  EXPECT_NE(parse_strategy("tenacity").status().message().find("unknown strategy 'tenacity'"),
            std::string_view::npos);
  EXPECT_NE(parse_strategy("naive:threshold=3").status().message().find("threshold=3"),
            std::string_view::npos);
  EXPECT_NE(parse_strategy("none:attempts=2").status().message().find("it has none"),
            std::string_view::npos);
  EXPECT_FALSE(parse_strategy("holdfast:attempts=0").ok());
  EXPECT_FALSE(parse_strategy("holdfast:window=soon").ok());
  // A probe every microsecond would be a billion events per client: the run would not end.
  EXPECT_NE(parse_strategy("holdfast:health=0.001ms").status().message().find("health probe"),
            std::string_view::npos);
  EXPECT_TRUE(parse_strategy("holdfast:health=1ms").ok());
  EXPECT_TRUE(parse_strategy("holdfast:health=0").ok());  // no probe
  EXPECT_NE(parse_strategies("naive,naive").status().message().find("listed twice"),
            std::string_view::npos);
  EXPECT_FALSE(parse_strategies(",").ok());
}

TEST(SimStrategy, DurationsTakeUnits) {
  EXPECT_EQ(*parse_duration("250ms"), milliseconds(250));
  EXPECT_EQ(*parse_duration("1.5s"), milliseconds(1500));
  EXPECT_EQ(*parse_duration("6"), seconds(6));
  EXPECT_EQ(*parse_duration("2m"), seconds(120));
  EXPECT_EQ(parse_duration("-1s").status().code(), Code::kInvalidArgument);
  EXPECT_FALSE(parse_duration("s").ok());
  EXPECT_FALSE(parse_duration("1h").ok());
}

}  // namespace
}  // namespace holdfast::sim
