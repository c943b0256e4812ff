// The PostgreSQL store's writes as statements and what their rows decide: one place for the
// SQL of a payment, a sign-up and a problem report and for a sign-up's refusals, used by the
// blocking transactions (club_store_pg.cpp) and by the async lane's on the event loop
// (pg_lane.cpp), so that both write and refuse the same.
#pragma once

#include <cstdint>
#include <string_view>

#include "holdfast/core/result.hpp"
#include "holdfast/pg/rows.hpp"

namespace holdfast::panel::pgwrites {

// A payment: $1 user, $2 amount in cents, $3 method, $4 now; returns its id.
inline constexpr std::string_view kInsertPayment =
    "INSERT INTO payments(user_id, amount_cents, method, created_at) "
    "VALUES ($1, $2, $3, $4) RETURNING id";

// A sign-up's first statement: the game's row ($1), locked so that concurrent sign-ups for
// one game take turns, its capacity and whether it has started ($2 now). The count that
// follows (a new statement: a new snapshot) sees every sign-up committed before.
inline constexpr std::string_view kLockGame =
    "SELECT capacity, starts_at <= ($2::timestamptz AT TIME ZONE 'UTC') FROM games "
    "WHERE id = $1 FOR UPDATE";
// The game's ($1) sign-ups, and the user's ($2) among them.
inline constexpr std::string_view kSeatsTaken =
    "SELECT count(*), count(*) FILTER (WHERE user_id = $2) FROM signups WHERE game_id = $1";
// The sign-up: $1 game, $2 user, $3 now; returns its id.
inline constexpr std::string_view kInsertSignup =
    "INSERT INTO signups(game_id, user_id, created_at) VALUES ($1, $2, $3) RETURNING id";

// A sign-in's new hash ($1) for user $2, only over the hash just checked ($3): a password
// changed meanwhile stays changed, and applying it twice is applying it once.
inline constexpr std::string_view kRehash =
    "UPDATE users SET password_hash = $1 WHERE id = $2 AND password_hash = $3";
// A session: $1 its fresh random token, $2 the user, $3 now; valid for 30 days. Inserting a
// fresh token twice inserts it once.
inline constexpr std::string_view kInsertSession =
    "INSERT INTO sessions(token, user_id, created_at, last_seen, expires_at) "
    "VALUES ($1, $2, $3, $3, $3::timestamptz + interval '30 days') "
    "ON CONFLICT (token) DO NOTHING";
// User $1's expired sessions (at $2) and the oldest beyond the newest $3: deleting down to a
// cap twice is deleting once.
inline constexpr std::string_view kCapSessions =
    "DELETE FROM sessions WHERE user_id = $1 AND (expires_at <= $2::timestamptz OR "
    "token NOT IN (SELECT token FROM sessions WHERE user_id = $1 AND expires_at > "
    "$2::timestamptz ORDER BY created_at DESC, token DESC LIMIT $3::bigint))";
// A sign-out: the session $1 goes (deleting a row by its key twice deletes it once).
inline constexpr std::string_view kEndSession = "DELETE FROM sessions WHERE token = $1";

// A problem report: $1 path, $2 digest, $3 note, $4 now.
inline constexpr std::string_view kInsertReport =
    "INSERT INTO problem_reports(path, digest, note, created_at) VALUES ($1, $2, $3, $4)";

// The game's capacity from kLockGame's rows, or the refusal: NOT_FOUND (no such game),
// OUT_OF_RANGE with kGameStartedMessage (it has started).
[[nodiscard]] Result<std::int64_t> open_game(const pg::Rows& game);
// OK when kSeatsTaken's rows leave the user a seat in a game of `capacity`, else the refusal:
// ALREADY_EXISTS (signed up already), FAILED_PRECONDITION (the game is full).
[[nodiscard]] Status seat_free(const pg::Rows& taken, std::int64_t capacity);
// The id in the first column of an INSERT ... RETURNING id's row.
[[nodiscard]] Result<std::int64_t> id_of(const pg::Rows& rows);

}  // namespace holdfast::panel::pgwrites
