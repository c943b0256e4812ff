// The PostgreSQL store's reads as statements and what their rows mean: one place for the
// SQL and its decoding, used by the blocking calls (club_store_pg.cpp) and by the async
// lane's reads on the event loop (pg_lane.cpp), so that both answer the same values.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "club_model.hpp"
#include "club_store.hpp"
#include "holdfast/core/result.hpp"
#include "holdfast/pg/connection.hpp"

namespace holdfast::panel::pgreads {

// The live session's user: $1 the token, $2 now (ISO-8601).
inline constexpr std::string_view kSession =
    "SELECT u.id, u.name, u.email, u.role FROM sessions s JOIN users u ON u.id = s.user_id "
    "WHERE s.token = $1 AND s.expires_at > $2";

// The day's games ($1 the date), with their sign-ups counted; times in the model's
// "2026-11-30T18:00".
inline constexpr std::string_view kGames =
    "SELECT g.id, c.name, a.name, a.color, to_char(g.starts_at, 'YYYY-MM-DD\"T\"HH24:MI'), "
    "to_char(g.ends_at, 'YYYY-MM-DD\"T\"HH24:MI'), g.capacity, "
    "(SELECT count(*) FROM signups s WHERE s.game_id = g.id) "
    "FROM games g JOIN courts c ON c.id = g.court_id "
    "JOIN activity_types a ON a.id = g.activity_type_id "
    "WHERE g.starts_at >= $1::date AND g.starts_at < $1::date + 1 "
    "ORDER BY g.starts_at, c.name";

// One statement, one round trip: the club's name and currency, the courts in order, the
// day's holiday ($1 the date is its key) and the day's cash, one row each, by kind.
inline constexpr std::string_view kContext =
    "SELECT kind, a, b FROM ("
    "SELECT 0 AS kind, 0::bigint AS ord, key AS a, value AS b FROM settings "
    "WHERE key IN ('club_name', 'currency') "
    "UNION ALL SELECT 1, id, name, NULL FROM courts "
    "UNION ALL SELECT 2, 0, name, NULL FROM holidays WHERE date = $1::date "
    "UNION ALL SELECT 3, 0, count(*)::text, coalesce(sum(amount_cents), 0)::bigint::text "
    "FROM payments WHERE created_at >= $1::date AND created_at < $1::date + 1"
    ") context ORDER BY kind, ord";

// A user's id and stored password hash by email ($1).
inline constexpr std::string_view kCredentials =
    "SELECT id, password_hash FROM users WHERE email = $1";

// What the rows of each statement above say, or why they cannot be read (a column that is
// not what the schema makes it).
Result<std::optional<User>> session_of(const pg::Rows& rows);
Result<std::vector<Game>> games_of(const pg::Rows& rows);
Result<ScheduleContext> context_of(const pg::Rows& rows);
Result<std::optional<ClubStore::Credentials>> credentials_of(const pg::Rows& rows);

}  // namespace holdfast::panel::pgreads
