// The sign-in path's parts on their own, in virtual time (issues #13 and #42): the Origin
// check, the attempt limiter and its bounded table, and the password checks' gate. The panel
// around them: panel_hardening_test.cpp.
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "holdfast/core/clock.hpp"
#include "http_message.hpp"
#include "security.hpp"
#include "sign_in_gate.hpp"

namespace holdfast::panel {
namespace {

// The Origin check on its own: scheme, host and port, default ports as the scheme says.
TEST(CrossSiteRefusal, AnOriginMustNameThisServersSchemeHostAndPort) {
  const auto refused = [](const std::string& origin, const std::string& host, bool https) {
    http::Request req;
    req.method = "POST";
    req.headers.emplace("Origin", origin);
    req.headers.emplace("Host", host);
    return !cross_site_refusal(req, https).empty();
  };
  EXPECT_FALSE(refused("http://panel.example:8080", "panel.example:8080", false));
  EXPECT_TRUE(refused("https://panel.example:8080", "panel.example:8080", false));
  EXPECT_TRUE(refused("http://panel.example:8080", "panel.example:8080", true));
  EXPECT_FALSE(refused("https://panel.example:8080", "panel.example:8080", true));
  // Default ports: http://h is h:80, https://h is h:443.
  EXPECT_FALSE(refused("http://panel.example", "panel.example:80", false));
  EXPECT_FALSE(refused("http://panel.example:80", "panel.example", false));
  EXPECT_FALSE(refused("https://panel.example", "panel.example:443", true));
  EXPECT_TRUE(refused("https://panel.example", "panel.example:80", false));
  EXPECT_TRUE(refused("http://panel.example:81", "panel.example", false));
  EXPECT_FALSE(refused("HTTP://Panel.Example", "panel.example", false));
  EXPECT_FALSE(refused("http://[::1]:8080", "[::1]:8080", false));
  EXPECT_TRUE(refused("http://[::1]:8081", "[::1]:8080", false));
  for (const char* odd :
       {"null", "panel.example", "http://", "http://panel.example/", "http://evil@panel.example",
        "http://panel.example:x", "http://panel.example:99999"}) {
    EXPECT_TRUE(refused(odd, "panel.example", false)) << odd;
  }
  http::Request get;
  get.method = "GET";
  get.headers.emplace("Origin", "https://evil.example");
  EXPECT_TRUE(cross_site_refusal(get, false).empty()) << "a read changes nothing";
}

// The limiter on its own, in virtual time.
TEST(AttemptLimiter, AttemptsInFlightHoldPlacesAndOnlyCountedOnesStayForTheWindow) {
  using std::chrono::minutes;
  using std::chrono::seconds;
  ManualClock clock;
  AttemptLimiter limit(clock, 2, minutes(1));
  EXPECT_EQ(limit.try_acquire("k"), Duration::zero());
  EXPECT_EQ(limit.try_acquire("k"), Duration::zero());
  EXPECT_EQ(limit.try_acquire("k"), AttemptLimiter::kBusyWait) << "both places are in flight";
  limit.settle("k", false);  // not an event: its place is free again
  EXPECT_EQ(limit.try_acquire("k"), Duration::zero());
  limit.settle("k", true);
  limit.settle("k", true);
  EXPECT_EQ(limit.try_acquire("k"), minutes(1)) << "two counted: until the first leaves";
  EXPECT_EQ(limit.try_acquire("other"), Duration::zero()) << "keys are apart";
  clock.advance(seconds(30));
  EXPECT_EQ(limit.try_acquire("k"), seconds(30));
  clock.advance(seconds(30));
  EXPECT_EQ(limit.try_acquire("k"), Duration::zero());
  // try_count: every attempt is an event at once.
  AttemptLimiter reports(clock, 2, minutes(1));
  EXPECT_EQ(reports.try_count("a"), Duration::zero());
  EXPECT_EQ(reports.try_count("a"), Duration::zero());
  EXPECT_EQ(reports.try_count("a"), minutes(1));
}

// Issue 42: 10,100 unknown emails evicted the victim's entry from the 10,000-key table, and
// with it the limit on guessing its password. (The victim's key sorts first: the old table
// dropped the first key in order.)
TEST(AttemptLimiter, FillingTheTableNeverDropsAKeyThatIsAtItsLimit) {
  ManualClock clock;
  AttemptLimiter limit(clock, 5, std::chrono::minutes(1), 100);
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(limit.try_acquire("account:a-victim"), Duration::zero());
    limit.settle("account:a-victim", true);
  }
  ASSERT_GT(limit.try_acquire("account:a-victim"), Duration::zero());
  for (int i = 0; i < 10'100; ++i) {
    const std::string key = "account:x" + std::to_string(i);
    if (limit.try_acquire(key) == Duration::zero()) limit.settle(key, true);
    clock.advance(std::chrono::microseconds(1));
  }
  EXPECT_LE(limit.keys(), 100u);
  EXPECT_EQ(limit.events("account:a-victim"), 5);
  EXPECT_GT(limit.try_acquire("account:a-victim"), std::chrono::seconds(50));
  // Amortised: the table is looked over once per batch of newcomers, not once each.
  EXPECT_LE(limit.sweeps(), 10'100u / 6 + 1);
}

TEST(AttemptLimiter, TheKeysWithTheFewestEventsGoFirstTheOldestAmongEquals) {
  ManualClock clock;
  AttemptLimiter limit(clock, 5, std::chrono::minutes(1), 4);
  const auto fail = [&](const std::string& key, int times) {
    for (int i = 0; i < times; ++i) {
      ASSERT_EQ(limit.try_acquire(key), Duration::zero());
      limit.settle(key, true);
      clock.advance(std::chrono::seconds(1));
    }
  };
  fail("three", 3);
  fail("one-older", 1);
  fail("two", 2);
  fail("one-newer", 1);
  ASSERT_EQ(limit.try_acquire("newcomer"), Duration::zero());
  EXPECT_EQ(limit.events("one-older"), 0) << "dropped: one event, the oldest";
  EXPECT_EQ(limit.events("one-newer"), 1);
  EXPECT_EQ(limit.events("two"), 2);
  EXPECT_EQ(limit.events("three"), 3);
}

TEST(AttemptLimiter, ATableFullOfLimitedKeysRefusesANewcomerRatherThanDropOne) {
  using std::chrono::minutes;
  using std::chrono::seconds;
  ManualClock clock;
  AttemptLimiter limit(clock, 1, minutes(1), 4);
  for (const char* key : {"a", "b", "c", "d"}) {
    ASSERT_EQ(limit.try_acquire(key), Duration::zero());
    limit.settle(key, true);
  }
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(limit.try_acquire("new" + std::to_string(i)), AttemptLimiter::kBusyWait);
  }
  EXPECT_EQ(limit.sweeps(), 1u) << "one look at the table, not one per newcomer";
  for (const char* key : {"a", "b", "c", "d"})
    EXPECT_GT(limit.try_acquire(key), Duration::zero()) << key << " is still limited";
  clock.advance(seconds(30));
  EXPECT_EQ(limit.try_acquire("later"), AttemptLimiter::kBusyWait);
  EXPECT_EQ(limit.sweeps(), 2u);
  clock.advance(seconds(30));  // the four events leave the window
  EXPECT_EQ(limit.try_acquire("later"), Duration::zero());
}

TEST(AttemptLimiter, AKeyWithAnAttemptInFlightIsNeverDropped) {
  ManualClock clock;
  AttemptLimiter limit(clock, 5, std::chrono::minutes(1), 2);
  ASSERT_EQ(limit.try_acquire("checking-1"), Duration::zero());
  ASSERT_EQ(limit.try_acquire("checking-2"), Duration::zero());
  EXPECT_EQ(limit.try_acquire("third"), AttemptLimiter::kBusyWait);
  limit.settle("checking-1", true);  // one event, nothing in flight: it may go now
  clock.advance(AttemptLimiter::kBusyWait);
  EXPECT_EQ(limit.try_acquire("third"), Duration::zero());
  EXPECT_EQ(limit.events("checking-1"), 0);
  limit.settle("checking-2", true);
  EXPECT_EQ(limit.events("checking-2"), 1) << "its attempt was settled where it was";
}

// The password checks' gate on its own, in virtual time: a Wake records what it was told.
class SignInGateTest : public ::testing::Test {
 protected:
  SignInGate::Entry ask(const std::string& name, const std::string& address, int failures,
                        const std::string& account = "") {
    return gate_.enter(SignInGate::Asker{address, account, failures},
                       [this, name](SignInGate::Turn t) { told_[name].push_back(t); });
  }
  std::vector<SignInGate::Turn> told(const std::string& name) { return told_[name]; }

  static SignInGate::Options one_running_two_waiting() {
    SignInGate::Options o;
    o.running = 1;
    o.waiting = 2;
    o.per_key = 2;
    return o;
  }
  ManualClock clock_;
  SignInGate gate_{clock_, one_running_two_waiting()};
  std::map<std::string, std::vector<SignInGate::Turn>> told_;
};

using Turn = SignInGate::Turn;

TEST_F(SignInGateTest, ACleanAddressTakesThePlaceOfTheQueuedRequestOfTheAddressWithMostFailures) {
  const SignInGate::Entry running = ask("flood-1", "10.0.0.1", 3);
  ASSERT_EQ(running.turn, Turn::kRun);
  ASSERT_EQ(ask("flood-2", "10.0.0.2", 2).turn, Turn::kWait);
  ASSERT_EQ(ask("flood-3", "10.0.0.3", 4).turn, Turn::kWait);
  EXPECT_EQ(ask("flood-4", "10.0.0.4", 4).turn, Turn::kFull) << "no fewer failures: no place";
  const SignInGate::Entry user = ask("user", "192.0.2.7", 0);
  ASSERT_EQ(user.turn, Turn::kWait);
  EXPECT_EQ(told("flood-3"), std::vector<Turn>{Turn::kDisplaced});
  // The place that frees goes to the fewest failures, though flood-2 waited longer.
  gate_.leave(running.id);
  EXPECT_EQ(told("user"), std::vector<Turn>{Turn::kRun});
  EXPECT_TRUE(told("flood-2").empty());
  gate_.leave(user.id);
  EXPECT_EQ(told("flood-2"), std::vector<Turn>{Turn::kRun});
}

TEST_F(SignInGateTest, OneAddressOrOneAccountHoldsAtMostItsShareOfThePlaces) {
  ASSERT_EQ(ask("a1", "10.0.0.1", 0).turn, Turn::kRun);
  ASSERT_EQ(ask("a2", "10.0.0.1", 0).turn, Turn::kWait);
  EXPECT_EQ(ask("a3", "10.0.0.1", 0).turn, Turn::kKeyBusy);
  ASSERT_EQ(ask("b1", "10.0.0.2", 0, "account:x").turn, Turn::kWait);
  EXPECT_EQ(gate_.counts().waiting, 2);
  SignInGate roomy(clock_, SignInGate::Options{});
  std::vector<SignInGate::Entry> held;
  held.push_back(roomy.enter({"10.0.0.3", "account:x", 0}, nullptr));
  held.push_back(roomy.enter({"10.0.0.4", "account:x", 0}, nullptr));
  EXPECT_EQ(roomy.enter({"10.0.0.5", "account:x", 0}, nullptr).turn, Turn::kKeyBusy)
      << "the account's share, from a third address";
  roomy.leave(held[0].id);
  EXPECT_EQ(roomy.enter({"10.0.0.5", "account:x", 0}, nullptr).turn, Turn::kRun)
      << "a place given back is free again";
}

TEST_F(SignInGateTest, AWaiterNotStartedWithinASecondIsAnsweredAndLeaves) {
  const SignInGate::Entry running = ask("first", "10.0.0.1", 0);
  const SignInGate::Entry waiter = ask("waiter", "10.0.0.2", 0);
  ASSERT_EQ(waiter.turn, Turn::kWait);
  clock_.advance(std::chrono::milliseconds(999));
  EXPECT_EQ(ask("other", "10.0.0.3", 0).turn, Turn::kWait);
  EXPECT_TRUE(told("waiter").empty());
  clock_.advance(std::chrono::milliseconds(1));
  gate_.leave(running.id);  // too late for the waiter: it is answered, the next one starts
  EXPECT_EQ(told("waiter"), std::vector<Turn>{Turn::kTimedOut});
  EXPECT_EQ(told("other"), std::vector<Turn>{Turn::kRun});
  EXPECT_EQ(gate_.give_up(waiter.id), Turn::kTimedOut);
  EXPECT_EQ(gate_.counts().running, 1);
  EXPECT_EQ(gate_.counts().waiting, 0);
}

TEST_F(SignInGateTest, AWaiterThatGivesUpLeavesUnlessItsCheckStartedMeanwhile) {
  const SignInGate::Entry running = ask("first", "10.0.0.1", 0);
  const SignInGate::Entry quits = ask("quits", "10.0.0.2", 0);
  const SignInGate::Entry stays = ask("stays", "10.0.0.3", 0);
  EXPECT_EQ(gate_.give_up(quits.id), Turn::kTimedOut);
  gate_.leave(running.id);
  EXPECT_TRUE(told("quits").empty()) << "no Wake after give_up()";
  EXPECT_EQ(told("stays"), std::vector<Turn>{Turn::kRun});
  EXPECT_EQ(gate_.give_up(stays.id), Turn::kRun) << "started: the caller must leave()";
  gate_.leave(stays.id);
  EXPECT_EQ(gate_.counts().running, 0);
  EXPECT_EQ(ask("again", "10.0.0.2", 0).turn, Turn::kRun) << "its address's places are free";
}

TEST_F(SignInGateTest, AFloodFromManyAddressesLeavesACleanAddressTheNextPlace) {
  SignInGate gate(clock_, SignInGate::Options{});  // the panel's: 4 running, 12 waiting
  std::vector<std::uint64_t> running;
  int full = 0;
  for (int i = 0; i < 200; ++i) {
    const SignInGate::Entry e =
        gate.enter({"10.1.0." + std::to_string(i), "", 1 + i % 4}, [](Turn) {});
    if (e.turn == Turn::kRun) running.push_back(e.id);
    if (e.turn == Turn::kFull) ++full;
  }
  ASSERT_EQ(running.size(), 4u);
  EXPECT_GT(full, 0);
  Turn user = Turn::kWait;
  ASSERT_EQ(gate.enter({"192.0.2.7", "", 0}, [&](Turn t) { user = t; }).turn, Turn::kWait);
  gate.leave(running.front());
  EXPECT_EQ(user, Turn::kRun) << "the first place that frees";
}

}  // namespace
}  // namespace holdfast::panel
