#include "holdfast/sqlite/log_store.hpp"

namespace holdfast::sqlite {

Result<std::unique_ptr<SqliteLogStore>> SqliteLogStore::open(Options options) {
  holdfast::sqlite::Options db_options;
  db_options.path = options.path;
  db_options.busy_timeout = options.busy_timeout;
  db_options.read_connections = 1;
  db_options.clock = options.clock;
  Result<Database> db = Database::open(db_options);
  if (!db.ok()) return db.status();
  for (std::string_view ddl : logs_table::kSchema) {
    Result<Exec> made = db->execute(ddl);
    if (!made.ok()) return Status(made.status()).annotate("creating the logs table");
  }
  return std::unique_ptr<SqliteLogStore>(new SqliteLogStore(std::move(*db)));
}

// The logger's writes are background (ADR 0035): when the database has no room for all,
// they give their places to the requests people wait on.
constexpr Operation kWriteBatch = Operation::transaction(false, "logs.insert").background();

Status SqliteLogStore::write_batch(std::span<const LogRecord> records) {
  return db_.transaction(
      [&](Transaction& tx) -> Status {
        for (const LogRecord& r : records) {
          const UtcStamp at = utc_stamp(r.created_at);
          Result<Exec> row =
              tx.execute(logs_table::kInsert, to_string(r.level), r.context, r.message, at.view());
          if (!row.ok()) return row.status();
        }
        return Status();
      },
      kWriteBatch);
}

Result<int> SqliteLogStore::delete_older_than(WallTime cutoff, int limit) {
  const UtcStamp at = utc_stamp(cutoff);
  Result<Exec> gone = db_.execute(logs_table::kDeleteOlderThan, at.view(), limit);
  if (!gone.ok()) return gone.status();
  return static_cast<int>(gone->changes);
}

}  // namespace holdfast::sqlite
