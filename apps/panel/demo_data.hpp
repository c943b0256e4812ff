// The demo club every store starts with, generated once and inserted by each backend
// (SQLite, PostgreSQL) in its own SQL; and the small helpers both stores share.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace holdfast::panel {

// The demo club's rows. References between rows are 1-based positions in the referenced
// vector (court 1 is courts[0]); a store maps them to the ids its database hands out.
struct DemoData {
  struct Court {
    std::string name;
    std::string surface;
  };
  struct ActivityType {
    std::string name;
    std::string color;
  };
  struct Member {
    std::string name;
    std::string email;
    std::string role;
    std::string password_hash;
  };
  struct Slot {
    int court = 0;          // position in courts
    int activity_type = 0;  // position in activity_types
    std::string starts_at;  // "2026-11-30T18:00"
    std::string ends_at;
    int capacity = 0;
  };
  struct Signup {
    int game = 0;  // position in games
    int user = 0;  // position in users
    std::string created_at;
  };
  struct CashDay {
    std::string date;
    int opening_cents = 0;
  };
  struct Payment {
    int user = 0;  // position in users
    int amount_cents = 0;
    std::string method;
    std::string created_at;
  };
  struct Holiday {
    std::string date;
    std::string name;
  };

  std::vector<Court> courts;
  std::vector<ActivityType> activity_types;
  std::vector<Member> users;
  std::vector<Slot> games;
  // In the order they were drawn; may repeat a (game, user) pair, which a store skips.
  std::vector<Signup> signups;
  std::vector<CashDay> cash_days;
  std::vector<Payment> payments;
  std::vector<Holiday> holidays;
  std::vector<std::pair<std::string, std::string>> settings;
};

// The demo club around `today` ("YYYY-MM-DD"): 4 courts, 5 activity types, 60 users
// (password "demo"), games from 14 days before to 28 days after, signups, cash days,
// payments up to today, 3 holidays and the club's settings. Deterministic: the same `today`
// gives the same club, but for the password hash (Argon2id with a random salt, made once
// per process and shared by the demo users, whose password is public anyway).
[[nodiscard]] DemoData make_demo_data(std::string_view today);

// `date` ("YYYY-MM-DD") moved by `n` days.
[[nodiscard]] std::string add_days(std::string_view date, int n);
[[nodiscard]] inline std::string day_after(std::string_view date) {
  return add_days(date, 1);
}

}  // namespace holdfast::panel
