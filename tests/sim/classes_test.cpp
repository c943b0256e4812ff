// Request classes in the simulator (--mix): the mix is parsed and validated, requests get
// classes, the holdfast strategy passes them to the Shield, and the report has per-class
// figures. Seeded and small: each run takes well under a second.
#include <gtest/gtest.h>

#include <string>

#include "holdfast/sim.hpp"

namespace holdfast::sim {
namespace {

using std::chrono::seconds;

constexpr auto kCritical = static_cast<std::size_t>(Priority::kCritical);
constexpr auto kNormal = static_cast<std::size_t>(Priority::kNormal);
constexpr auto kBackground = static_cast<std::size_t>(Priority::kBackground);

TEST(SimClasses, AMixIsParsedByClassName) {
  Result<ClassMix> m = parse_class_mix("critical:0.1,normal:0.8,background:0.1");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_DOUBLE_EQ((*m)[kCritical], 0.1);
  EXPECT_DOUBLE_EQ((*m)[kNormal], 0.8);
  EXPECT_DOUBLE_EQ((*m)[kBackground], 0.1);
  Result<ClassMix> two = parse_class_mix("background:0.25,normal:0.75");
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  EXPECT_DOUBLE_EQ((*two)[kCritical], 0.0) << "a class left out has no share";
}

TEST(SimClasses, AMixThatIsWrongSaysWhat) {
  const auto error = [](std::string_view text) {
    Result<ClassMix> m = parse_class_mix(text);
    EXPECT_FALSE(m.ok()) << text;
    EXPECT_EQ(m.status().code(), Code::kInvalidArgument) << text;
    return std::string(m.status().message());
  };
  EXPECT_NE(error("urgent:0.5,normal:0.5").find("'urgent' is not a class"), std::string::npos);
  EXPECT_NE(error("critical:lots,normal:0.5").find("share of critical ('lots') is not a number"),
            std::string::npos);
  EXPECT_NE(error("critical:-0.1,normal:1.1").find("critical must be a number >= 0"),
            std::string::npos);
  EXPECT_NE(error("critical:0.1,normal:0.8").find("sum to 0.9"), std::string::npos);
  EXPECT_NE(error("normal:0.5,normal:0.5").find("normal is given twice"), std::string::npos);
  EXPECT_NE(error("").find("empty"), std::string::npos);
  EXPECT_NE(error("critical").find("is not a number"), std::string::npos);
  Scenario s = *builtin_scenario("spike");
  s.class_mix = ClassMix{0.5, 0.6, 0.1};
  EXPECT_NE(std::string(s.validate().message()).find("class mix"), std::string::npos);
}

// The spike of issue 44's target, shortened: load x3 for 10 s with 10 % critical, 80 %
// normal and 10 % background requests.
Scenario mixed_spike() {
  Scenario s = *builtin_scenario("spike");
  s.trigger.factor = 3.0;
  s.trigger.start = seconds(5);
  s.duration = seconds(20);
  s.class_mix = ClassMix{0.1, 0.8, 0.1};
  return s;
}

TEST(SimClasses, UnderASpikeHoldfastKeepsCriticalAndShedsBackgroundBeforeNormal) {
  Result<Report> r = run(mixed_spike(), Strategy::holdfast());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(r->classes.has_value());
  const auto& c = *r->classes;
  for (std::size_t i = 0; i < c.size(); ++i)
    EXPECT_GT(c[i].requests, 0u) << i;
  EXPECT_GE(c[kCritical].served_pct, 99.5);
  EXPECT_LT(c[kBackground].served_pct, c[kNormal].served_pct);
  EXPECT_LT(c[kNormal].served_pct, c[kCritical].served_pct);
  EXPECT_GE(r->efficiency, 0.95) << "the classes cost no capacity";
}

TEST(SimClasses, WithoutTheShieldEveryClassFaresAlike) {
  // One attempt, no Shield: the classes are drawn and reported but nothing favours one.
  Result<Report> r = run(mixed_spike(), Strategy::none());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(r->classes.has_value());
  const auto& c = *r->classes;
  EXPECT_LT(c[kCritical].served_pct, 99.0);
  EXPECT_NEAR(c[kCritical].served_pct, c[kBackground].served_pct, 10.0);
}

TEST(SimClasses, TheMixDrawsFromItsOwnStreamSoTheRestOfTheRunIsTheSame) {
  Scenario plain = mixed_spike();
  plain.class_mix.reset();
  Scenario all_normal = mixed_spike();
  all_normal.class_mix = ClassMix{0.0, 1.0, 0.0};
  Result<Report> a = run(plain, Strategy::holdfast());
  Result<Report> b = run(all_normal, Strategy::holdfast());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE(a->classes.has_value()) << "no mix, no per-class figures";
  EXPECT_EQ(a->requests, b->requests);
  EXPECT_EQ(a->successes, b->successes);
  EXPECT_EQ(a->db_attempts, b->db_attempts);
  ASSERT_TRUE(b->classes.has_value());
  EXPECT_EQ((*b->classes)[kCritical].requests, 0u);
}

}  // namespace
}  // namespace holdfast::sim
