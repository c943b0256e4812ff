// The demo club's data, as the panel shows it. Plain values, no database types.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace holdfast::panel {

struct Game {
  std::int64_t id = 0;
  std::string court;
  std::string activity;
  std::string color;      // the activity's colour, for the schedule grid
  std::string starts_at;  // "2026-11-30T18:00"
  std::string ends_at;
  int capacity = 0;
  int signed_up = 0;
};

// Query group 2 of the schedule render: everything around the games.
struct ScheduleContext {
  std::string club_name;
  std::string currency;
  std::vector<std::string> courts;
  std::vector<std::string> holidays;  // names of holidays on the date
  std::int64_t payments_today = 0;
  std::int64_t cash_today_cents = 0;
};

struct User {
  std::int64_t id = 0;
  std::string name;
  std::string email;
  std::string role;
};

struct Schedule {
  std::string date;  // "2026-11-30"
  std::vector<Game> games;
  ScheduleContext context;
};

struct PaymentReceipt {
  std::int64_t payment_id = 0;
  std::int64_t amount_cents = 0;
  bool replayed = false;  // answered from the idempotency record: not applied again
};

struct SignupReceipt {
  std::int64_t signup_id = 0;
  std::int64_t game_id = 0;
  bool replayed = false;
};

}  // namespace holdfast::panel
