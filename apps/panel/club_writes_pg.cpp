#include "club_writes_pg.hpp"

#include "club_schema_pg.hpp"
#include "club_store.hpp"

namespace holdfast::panel::pgwrites {

using pgschema::int_at;

Result<std::int64_t> open_game(const pg::Rows& game) {
  if (game.empty()) return Status(Code::kNotFound, "no such game");
  if (game.text(0, 1) == "t") return Status(Code::kOutOfRange, std::string(kGameStartedMessage));
  return int_at(game, 0, 0);
}

Status seat_free(const pg::Rows& taken, std::int64_t capacity) {
  Result<std::int64_t> n = int_at(taken, 0, 0);
  if (!n.ok()) return n.status();
  Result<std::int64_t> mine = int_at(taken, 0, 1);
  if (!mine.ok()) return mine.status();
  if (*mine > 0) return Status(Code::kAlreadyExists, "already signed up for this game");
  if (capacity - *n <= 0) return Status(Code::kFailedPrecondition, "the game is full");
  return Status();
}

Result<std::int64_t> id_of(const pg::Rows& rows) {
  return int_at(rows, 0, 0);
}

}  // namespace holdfast::panel::pgwrites
