#include <gtest/gtest.h>

#include <string>

#include "holdfast/sim.hpp"

namespace holdfast::sim {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(SimScenarios, EveryBuiltInScenarioIsValidAndHasItsTrigger) {
  ASSERT_EQ(builtin_scenario_names().size(), 6u);
  for (std::string_view name : builtin_scenario_names()) {
    Result<Scenario> s = builtin_scenario(name);
    ASSERT_TRUE(s.ok()) << name;
    EXPECT_EQ(s->name, name);
    EXPECT_TRUE(s->validate().ok()) << name << ": " << s->validate().to_string();
    EXPECT_NE(s->trigger.kind, TriggerKind::kNone) << name;
    // Long enough to tell "recovered" from "metastable".
    EXPECT_GE(s->duration, s->trigger.end() + s->metastable_after + s->recovery_hold) << name;
  }
}

TEST(SimScenarios, TheCommonStageHasCapacityAboveTheOfferedLoad) {
  const Scenario s = *builtin_scenario("capacity-drop");
  const double capacity =
      s.database.workers / std::chrono::duration<double>(s.database.mean_service).count();
  EXPECT_DOUBLE_EQ(capacity, 1600.0);
  EXPECT_DOUBLE_EQ(s.offered_rps, 1000.0);
  EXPECT_EQ(s.attempt_timeout, seconds(1));
  EXPECT_EQ(s.trigger.start, seconds(20));
  EXPECT_EQ(s.trigger.length, seconds(10));
  // The trigger takes capacity below the offered load: 800 queries/s for 1000 requests/s.
  EXPECT_LT(capacity / s.trigger.factor, s.offered_rps);
  // The queue can hold more than one timeout's worth of work, so dead work can pile up.
  EXPECT_GT(s.database.queue_limit, capacity * 1.0);
}

TEST(SimScenarios, TheHangScenarioSilencesTheCommonStageForTenSeconds) {
  Result<Scenario> s = builtin_scenario("hang");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_TRUE(s->validate().ok()) << s->validate().to_string();
  EXPECT_EQ(s->trigger.kind, TriggerKind::kHang);
  EXPECT_EQ(to_string(s->trigger.kind), "hang");
  // The outage's stage and timing: only the way the database fails differs.
  const Scenario outage = *builtin_scenario("outage");
  EXPECT_EQ(s->trigger.start, outage.trigger.start);
  EXPECT_EQ(s->trigger.length, seconds(10));
  EXPECT_EQ(s->attempt_timeout, outage.attempt_timeout);
  EXPECT_DOUBLE_EQ(s->offered_rps, outage.offered_rps);
  EXPECT_EQ(s->database.workers, outage.database.workers);
  EXPECT_EQ(s->duration, outage.duration);
  EXPECT_FALSE(s->database.drop_abandoned);
  // A silent database serves nothing: no perfect client gets anything during it.
  EXPECT_DOUBLE_EQ(goodput_limit(*s), 0.0);
  TriggerKind parsed = TriggerKind::kNone;
  ASSERT_TRUE(parse_trigger("hang", parsed));
  EXPECT_EQ(parsed, TriggerKind::kHang);
}

TEST(SimScenarios, AnUnknownScenarioIsNotFoundAndTheKnownOnesAreListed) {
  Result<Scenario> s = builtin_scenario("thundering-herd");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kNotFound);
  const std::string message(s.status().message());
  EXPECT_NE(message.find("'thundering-herd'"), std::string::npos);
  for (std::string_view name : builtin_scenario_names()) {
    EXPECT_NE(message.find(name), std::string::npos) << name;
  }
}

TEST(SimScenarios, ValidationNamesTheBadField) {
  auto message_for = [](auto change) {
    Scenario s = *builtin_scenario("spike");
    change(s);
    const Status st = s.validate();
    EXPECT_EQ(st.code(), Code::kInvalidArgument);
    return std::string(st.message());
  };
  EXPECT_NE(message_for([](Scenario& s) { s.offered_rps = 0; }).find("offered load"),
            std::string::npos);
  EXPECT_NE(message_for([](Scenario& s) { s.database.workers = 0; }).find("workers"),
            std::string::npos);
  EXPECT_NE(message_for([](Scenario& s) { s.attempt_timeout = {}; }).find("timeout"),
            std::string::npos);
  EXPECT_NE(message_for([](Scenario& s) { s.clients = 0; }).find("clients"), std::string::npos);
  EXPECT_NE(message_for([](Scenario& s) { s.trigger.factor = -2; }).find("factor"),
            std::string::npos);
  EXPECT_NE(message_for([](Scenario& s) { s.duration = milliseconds(10); }).find("duration"),
            std::string::npos);
  EXPECT_NE(message_for([](Scenario& s) { s.recovery_goodput = 1.5; }).find("recovery goodput"),
            std::string::npos);
  EXPECT_NE(message_for([](Scenario& s) {
              s.trigger.kind = TriggerKind::kBrownout;
              s.trigger.failure_ratio = 2;
            }).find("failure ratio"),
            std::string::npos);
}

TEST(SimScenarios, ALoadThatWouldNotFitInMemoryOrAMinuteIsRefused) {
  auto message_for = [](auto change) {
    Scenario s = *builtin_scenario("spike");
    change(s);
    return std::string(s.validate().message());
  };
  EXPECT_NE(message_for([](Scenario& s) { s.offered_rps = 1e12; }).find("at most 200000"),
            std::string::npos);
  EXPECT_NE(message_for([](Scenario& s) { s.trigger.factor = 1000; }).find("spike factor"),
            std::string::npos);
  Scenario many = *builtin_scenario("capacity-drop");
  many.offered_rps = 150000;  // for 150 s
  EXPECT_NE(std::string(many.validate().message()).find("at most 20000000 requests"),
            std::string::npos);
  Scenario limited = *builtin_scenario("capacity-drop");
  limited.offered_rps = 150000;
  limited.max_requests = 1000;
  EXPECT_TRUE(limited.validate().ok()) << "a request limit bounds the run";
}

TEST(SimScenarios, NamesOfTriggersAndDistributionsRoundTrip) {
  for (auto k : {TriggerKind::kNone, TriggerKind::kCapacityDrop, TriggerKind::kLoadSpike,
                 TriggerKind::kOutage, TriggerKind::kBrownout, TriggerKind::kHang}) {
    TriggerKind back = TriggerKind::kNone;
    ASSERT_TRUE(parse_trigger(to_string(k), back)) << to_string(k);
    EXPECT_EQ(back, k);
  }
  for (auto d : {ServiceDistribution::kExponential, ServiceDistribution::kLognormal,
                 ServiceDistribution::kFixed}) {
    ServiceDistribution back = ServiceDistribution::kFixed;
    ASSERT_TRUE(parse_distribution(to_string(d), back));
    EXPECT_EQ(back, d);
  }
  TriggerKind k;
  EXPECT_FALSE(parse_trigger("meteor", k));
  ServiceDistribution d;
  EXPECT_FALSE(parse_distribution("uniform", d));
}

// judge_recovery on hand-made timelines: trigger from 20 s to 30 s, hold 3 s, 10 s limit.
struct Timeline {
  Scenario scenario;
  Report report;
  explicit Timeline(std::size_t seconds_total) {
    scenario.trigger.kind = TriggerKind::kCapacityDrop;
    scenario.trigger.start = seconds(20);
    scenario.trigger.length = seconds(10);
    scenario.recovery_hold = seconds(3);
    scenario.metastable_after = seconds(10);
    report.seconds.resize(seconds_total);
    for (Second& s : report.seconds) {
      s.arrivals = 100;
      s.successes = 0;
    }
  }
  void good(std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to; ++i)
      report.seconds[i].successes = 95;
  }
};

TEST(SimRecovery, RecoveryIsTheStartOfTheFirstLongEnoughRunOfGoodSecondsAfterTheTrigger) {
  Timeline t(60);
  t.good(0, 20);   // before the trigger: ignored
  t.good(31, 33);  // two good seconds: too short a run
  t.good(34, 40);  // from 34 s: recovered 4 s after the trigger ended
  judge_recovery(t.scenario, t.report);
  ASSERT_TRUE(t.report.recovery_s.has_value());
  EXPECT_DOUBLE_EQ(*t.report.recovery_s, 4.0);
  EXPECT_FALSE(t.report.metastable);
}

TEST(SimRecovery, GoodputBelowTheRatioIsNotGood) {
  Timeline t(60);
  t.good(30, 60);
  t.report.seconds[31].successes = 94;  // 94% < 95%
  judge_recovery(t.scenario, t.report);
  ASSERT_TRUE(t.report.recovery_s.has_value());
  EXPECT_DOUBLE_EQ(*t.report.recovery_s, 2.0);
}

TEST(SimRecovery, NoRunStartingWithinTheLimitIsMetastable) {
  Timeline t(60);
  t.good(41, 60);  // starts 11 s after the trigger: later than metastable_after (10 s)
  judge_recovery(t.scenario, t.report);
  EXPECT_FALSE(t.report.recovery_s.has_value());
  EXPECT_TRUE(t.report.metastable);

  Timeline edge(60);
  edge.good(40, 60);  // starts exactly 10 s after: still in time
  judge_recovery(edge.scenario, edge.report);
  ASSERT_TRUE(edge.report.recovery_s.has_value());
  EXPECT_DOUBLE_EQ(*edge.report.recovery_s, 10.0);
}

TEST(SimRecovery, ARunTooShortToTellIsNeitherRecoveredNorMetastable) {
  Timeline t(35);  // ends 5 s after the trigger: 10 + 3 s would be needed to judge
  judge_recovery(t.scenario, t.report);
  EXPECT_FALSE(t.report.recovery_s.has_value());
  EXPECT_FALSE(t.report.metastable);
}

}  // namespace
}  // namespace holdfast::sim
