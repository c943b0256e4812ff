#include "demo_data.hpp"

#include <array>
#include <chrono>
#include <cstdio>
#include <random>

#include <fmt/format.h>

#include "passwords.hpp"

namespace holdfast::panel {

namespace {

// One Argon2id hash of "demo" per process (passwords.hpp): about 0.1 s, not 60 times that.
// Should libsodium fail, the legacy form, which the first sign-in replaces.
std::string demo_password_hash(std::string_view email) {
  static const Result<std::string> hashed = hash_password("demo", PasswordCost::interactive());
  return hashed.ok() ? *hashed : legacy_password_hash(email, "demo");
}

}  // namespace

std::string add_days(std::string_view date, int n) {
  using namespace std::chrono;
  int y = 0;
  unsigned m = 0, d = 0;
  std::sscanf(std::string(date).c_str(), "%d-%u-%u", &y, &m, &d);
  const year_month_day ymd(sys_days(year_month_day(year(y), month(m), day(d))) + days(n));
  return fmt::format("{:04}-{:02}-{:02}", static_cast<int>(ymd.year()),
                     static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()));
}

DemoData make_demo_data(std::string_view today) {
  DemoData out;
  // The origin incident's date: the same demo club every time. The order of the draws below
  // is the club: changing it changes every store's demo data.
  std::mt19937 rng(20260828);
  const auto draw = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };

  out.courts = {
      {"Court 1", "hard"}, {"Court 2", "hard"}, {"Court 3", "clay"}, {"Court 4", "grass"}};
  out.activity_types = {{"Open play", "#4e79a7"},
                        {"Coaching", "#f28e2b"},
                        {"League", "#e15759"},
                        {"Juniors", "#76b7b2"},
                        {"Seniors", "#59a14f"}};
  const std::array<const char*, 12> first = {"Ada",   "Bartek", "Chi",  "Dorota", "Emil",  "Fang",
                                             "Gosia", "Huong",  "Igor", "Jana",   "Khanh", "Lena"};
  const std::array<const char*, 5> last = {"Nowak", "Tran", "Kowalska", "Nguyen", "Smith"};
  for (const char* f : first) {
    for (const char* l : last) {
      const int n = static_cast<int>(out.users.size()) + 1;
      std::string email = fmt::format("{}.{}@club.example", f, l);
      std::string hash = demo_password_hash(email);
      out.users.push_back({fmt::format("{} {}", f, l), std::move(email),
                           n == 1 ? "admin" : (n % 9 == 0 ? "staff" : "member"), std::move(hash)});
    }
  }
  const int user_count = static_cast<int>(out.users.size());

  const std::array<int, 6> hours = {8, 10, 12, 16, 18, 20};
  for (int d = -14; d <= 28; ++d) {
    const std::string date = add_days(today, d);
    for (int court = 1; court <= 4; ++court) {
      for (int h : hours) {
        const int type = 1 + draw(5);
        const int capacity = type == 2 ? 4 : 8;
        out.games.push_back({court, type, fmt::format("{}T{:02}:00", date, h),
                             fmt::format("{}T{:02}:30", date, h + 1), capacity});
        const int game = static_cast<int>(out.games.size());
        const int taken = draw(capacity + 1);
        for (int i = 0; i < taken; ++i) {
          out.signups.push_back(
              {game, 1 + draw(user_count), fmt::format("{}T07:00:00.000Z", date)});
        }
      }
    }
    out.cash_days.push_back({date, 20000 + draw(5000)});
    for (int p = 0; p < 8 && d <= 0; ++p) {
      const int amount = 500 + draw(4000);
      const int user = 1 + draw(user_count);
      out.payments.push_back({user, amount, p % 3 == 0 ? "cash" : "card",
                              fmt::format("{}T{:02}:15:00.000Z", date, 9 + p)});
    }
  }
  out.holidays = {{add_days(today, 3), "Club anniversary"},
                  {add_days(today, 10), "Regional holiday"},
                  {add_days(today, 17), "Court maintenance day"}};
  out.settings = {{"club_name", "Riverside Court Club"}, {"currency", "PLN"}, {"timezone", "UTC"}};
  return out;
}

}  // namespace holdfast::panel
