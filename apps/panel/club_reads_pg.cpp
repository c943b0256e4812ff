#include "club_reads_pg.hpp"

#include <string>

#include "club_schema_pg.hpp"

namespace holdfast::panel::pgreads {

using pgschema::int_at;

Result<std::optional<User>> session_of(const pg::Rows& rows) {
  if (rows.empty()) return std::optional<User>();
  Result<std::int64_t> id = int_at(rows, 0, 0);
  if (!id.ok()) return id.status();
  return std::optional<User>(User{*id, std::string(rows.text(0, 1)), std::string(rows.text(0, 2)),
                                  std::string(rows.text(0, 3))});
}

Result<std::vector<Game>> games_of(const pg::Rows& rows) {
  std::vector<Game> games;
  games.reserve(static_cast<std::size_t>(rows.size()));
  for (int r = 0; r < rows.size(); ++r) {
    Result<std::int64_t> id = int_at(rows, r, 0);
    Result<std::int64_t> capacity = int_at(rows, r, 6);
    Result<std::int64_t> taken = int_at(rows, r, 7);
    if (!id.ok()) return id.status();
    if (!capacity.ok()) return capacity.status();
    if (!taken.ok()) return taken.status();
    games.push_back(Game{*id, std::string(rows.text(r, 1)), std::string(rows.text(r, 2)),
                         std::string(rows.text(r, 3)), std::string(rows.text(r, 4)),
                         std::string(rows.text(r, 5)), static_cast<int>(*capacity),
                         static_cast<int>(*taken)});
  }
  return games;
}

Result<ScheduleContext> context_of(const pg::Rows& rows) {
  ScheduleContext ctx;
  for (int r = 0; r < rows.size(); ++r) {
    const std::string_view kind = rows.text(r, 0);
    const std::string_view a = rows.text(r, 1);
    if (kind == "0" && a == "club_name") ctx.club_name = rows.text(r, 2);
    if (kind == "0" && a == "currency") ctx.currency = rows.text(r, 2);
    if (kind == "1") ctx.courts.emplace_back(a);
    if (kind == "2") ctx.holidays.emplace_back(a);
    if (kind == "3") {
      Result<std::int64_t> count = int_at(rows, r, 1);
      Result<std::int64_t> cents = int_at(rows, r, 2);
      if (!count.ok()) return count.status();
      if (!cents.ok()) return cents.status();
      ctx.payments_today = *count;
      ctx.cash_today_cents = *cents;
    }
  }
  return ctx;
}

Result<std::optional<ClubStore::Credentials>> credentials_of(const pg::Rows& rows) {
  if (rows.empty()) return std::optional<ClubStore::Credentials>();
  Result<std::int64_t> id = int_at(rows, 0, 0);
  if (!id.ok()) return id.status();
  return std::optional<ClubStore::Credentials>(
      ClubStore::Credentials{*id, std::string(rows.text(0, 1))});
}

}  // namespace holdfast::panel::pgreads
