#include "holdfast/pg/log_store.hpp"
#include "holdfast/pg/url.hpp"

#include <algorithm>
#include <exception>
#include <string>
#include <utility>

#include "array_literal.hpp"
#include "pg_internal.hpp"

namespace holdfast::pg {

namespace {

// The client waits this much longer than statement_timeout before it cancels on its own
// (the server's 57014 is the better answer; this only covers a server that does not
// answer at all).
constexpr Duration kClientGrace = std::chrono::milliseconds(500);

// Whether the index exists already on the logs table the search_path finds. CREATE INDEX IF
// NOT EXISTS would first take a SHARE lock on the table, waiting for (and then holding up)
// every other process's log INSERTs each time a store opens; this query takes no lock.
constexpr std::string_view kHasIndex =
    "SELECT count(*) FROM pg_catalog.pg_index x "
    "JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid "
    "WHERE x.indrelid = 'logs'::regclass AND i.relname = 'logs_created_at'";

// Serializes the creation of the logs table between processes (released at COMMIT).
constexpr std::string_view kLockSchema =
    "SELECT pg_advisory_xact_lock(hashtext('holdfast.logs_table'))";

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

bool continuation(unsigned char c) noexcept {
  return c >= 0x80 && c <= 0xBF;
}

// Bytes of the valid UTF-8 sequence at the start of `s`, or 0 when it is not valid; then
// `bad` is the length of its maximal invalid prefix (at least 1), which is what one
// U+FFFD replaces (Unicode's "maximal subpart" practice).
std::size_t valid_sequence(std::string_view s, std::size_t& bad) noexcept {
  const auto b0 = static_cast<unsigned char>(s[0]);
  std::size_t need = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    bad = 1;  // a stray continuation byte, C0, C1, F5..FF
    return 0;
  }
  for (std::size_t k = 1; k <= need; ++k) {
    if (k >= s.size()) {
      bad = k;
      return 0;
    }
    const auto c = static_cast<unsigned char>(s[k]);
    const bool ok = k == 1 ? (c >= lo && c <= hi) : continuation(c);
    if (!ok) {
      bad = k;
      return 0;
    }
  }
  return need + 1;
}

// Appends `{"a","b",...}` for `n` values read by `value(i)`. Returns how many values had
// to be changed to be storable.
template <class Get>
std::uint64_t build_array(std::string& out, std::size_t n, Get&& value) {
  out.clear();
  out.push_back('{');
  std::uint64_t changed = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) out.push_back(',');
    if (append_array_element(out, value(i))) ++changed;
  }
  out.push_back('}');
  return changed;
}

// A timeout as PostgreSQL settings take it: whole milliseconds, at least 1.
std::string setting_ms(Duration d) {
  return std::to_string(
      std::max<long long>(1, std::chrono::ceil<std::chrono::milliseconds>(d).count()));
}

Status internal_failure(std::string_view what, const std::exception* e) {
  std::string message(what);
  message += e != nullptr ? std::string(": ") + e->what() : std::string(": unknown exception");
  return Status(Code::kInternal, std::move(message));
}

}  // namespace

bool append_array_element(std::string& out, std::string_view text) {
  bool changed = false;
  out.push_back('"');
  std::size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (static_cast<unsigned char>(c) < 0x80) {
      if (c == '\0') {
        changed = true;  // text cannot hold NUL
      } else {
        if (c == '"' || c == '\\') out.push_back('\\');
        out.push_back(c);
      }
      ++i;
      continue;
    }
    std::size_t bad = 0;
    const std::size_t n = valid_sequence(text.substr(i), bad);
    if (n > 0) {
      out.append(text.substr(i, n));
      i += n;
    } else {
      out.append(kReplacement);
      changed = true;
      i += bad;
    }
  }
  out.push_back('"');
  return changed;
}

std::uint64_t LogBatch::fill(std::span<const LogRecord> records) {
  std::uint64_t changed = 0;
  changed += build_array(levels, records.size(),
                         [&](std::size_t i) { return to_string(records[i].level); });
  changed += build_array(contexts, records.size(),
                         [&](std::size_t i) -> std::string_view { return records[i].context; });
  changed += build_array(messages, records.size(),
                         [&](std::size_t i) -> std::string_view { return records[i].message; });
  stamps.clear();
  stamps.push_back('{');
  for (std::size_t i = 0; i < records.size(); ++i) {
    if (i > 0) stamps.push_back(',');
    stamps.append(utc_stamp(records[i].created_at).view());  // digits, '-', ':', '.', 'T', 'Z'
  }
  stamps.push_back('}');
  return changed;
}

PgLogStore::PgLogStore(Options options, std::string display_url)
    : options_(std::move(options)),
      display_url_(std::move(display_url)),
      clock_(options_.clock != nullptr ? options_.clock : &Clock::system()) {
  connect_.conninfo = options_.url;
  connect_.application_name = options_.application_name;
  connect_.keywords = {{"client_encoding", "UTF8"}};
  // Several hosts (a failover URL): the logs go to the one that takes writes, as a
  // Database's writes do.
  detail::ConnectionAccess::ask_for_writer(connect_);
  // Sent with the startup packet: no round trip, and they hold for every statement.
  connect_.settings = {{"statement_timeout", setting_ms(options_.statement_timeout)},
                       {"lock_timeout", setting_ms(options_.lock_timeout)}};
  for (const auto& setting : options_.settings)
    connect_.settings.push_back(setting);
  connect_.connect_timeout = options_.connect_timeout;
  connect_.clock = clock_;
}

PgLogStore::~PgLogStore() = default;

Result<std::unique_ptr<PgLogStore>> PgLogStore::open(Options options) {
  try {
    auto invalid = [](std::string_view field, std::string_view why) {
      return Status(Code::kInvalidArgument,
                    "PgLogStore::Options::" + std::string(field) + " " + std::string(why));
    };
    if (options.url.empty()) return invalid("url", "is empty");
    if (options.statement_timeout <= Duration::zero()) {
      return invalid("statement_timeout", "must be positive");
    }
    if (options.lock_timeout <= Duration::zero()) {
      return invalid("lock_timeout", "must be positive");
    }
    if (options.connect_timeout <= Duration::zero()) {
      return invalid("connect_timeout", "must be positive");
    }
    std::string display = redact_password(options.url);
    std::unique_ptr<PgLogStore> store(new PgLogStore(std::move(options), std::move(display)));
    Lane& lane = store->writer_;
    std::lock_guard<std::mutex> hold(lane.mutex);
    if (Status s = store->ready(lane); !s.ok()) return s.annotate("opening the logs table");
    const std::string where = "creating the logs table at " + store->display_url_;
    auto run = [&](std::string_view sql) -> Result<Rows> {
      lane.conn.set_deadline(store->clock_->now() + store->options_.statement_timeout +
                             kClientGrace);
      return lane.conn.query(sql);
    };
    static_assert(logs_table::kSchema.size() == 2);
    // Several processes may open at the same instant: CREATE ... IF NOT EXISTS is not safe
    // against itself (23505 on pg_type, 42P07), so creation takes a transaction-scoped
    // advisory lock first. Nothing here is retried: a failure rolls back and is reported.
    auto create = [&]() -> Status {
      for (std::string_view sql : {kLockSchema, logs_table::kSchema[0], kHasIndex}) {
        Result<Rows> r = run(sql);
        if (!r.ok()) return r.status();
        if (sql == kHasIndex && r->text(0, 0) == "0") {
          Result<Rows> index = run(logs_table::kSchema[1]);
          if (!index.ok()) return index.status();
        }
      }
      return Status();
    };
    if (Result<Rows> begun = run("BEGIN"); !begun.ok()) {
      return Status(begun.status()).annotate(where);
    }
    Status created = create();
    Result<Rows> ended = run(created.ok() ? "COMMIT" : "ROLLBACK");
    if (!created.ok()) return created.annotate(where);
    if (!ended.ok()) return Status(ended.status()).annotate(where);
    return store;
  } catch (const std::exception& e) {
    return internal_failure("PgLogStore::open", &e);
  } catch (...) {
    return internal_failure("PgLogStore::open", nullptr);
  }
}

Status PgLogStore::ready(Lane& lane) {
  // check() reads what the server sent while the connection was idle (a FATAL from a
  // terminated backend) without a round trip.
  if (lane.conn.is_open() && lane.conn.check()) return Status();
  lane.conn.close();
  if (&lane == &writer_) writer_pid_.store(0, std::memory_order_relaxed);
  Result<Connection> conn = Connection::open(connect_, clock_->now() + options_.connect_timeout);
  if (!conn.ok()) {
    connect_failures_.fetch_add(1, std::memory_order_relaxed);
    return Status(conn.status()).annotate("connecting to " + display_url_);
  }
  connects_.fetch_add(1, std::memory_order_relaxed);
  lane.conn = std::move(*conn);
  if (&lane == &writer_) writer_pid_.store(lane.conn.backend_pid(), std::memory_order_relaxed);
  return Status();
}

Status PgLogStore::write_batch(std::span<const LogRecord> records) {
  try {
    std::lock_guard<std::mutex> hold(writer_.mutex);
    Status s = write_locked(records);
    (s.ok() ? batches_ : failed_batches_).fetch_add(1, std::memory_order_relaxed);
    return s;
  } catch (const std::exception& e) {
    failed_batches_.fetch_add(1, std::memory_order_relaxed);
    return internal_failure("PgLogStore::write_batch", &e);
  } catch (...) {
    failed_batches_.fetch_add(1, std::memory_order_relaxed);
    return internal_failure("PgLogStore::write_batch", nullptr);
  }
}

Status PgLogStore::write_locked(std::span<const LogRecord> records) {
  if (records.empty()) return Status();
  if (const std::uint64_t changed = batch_.fill(records); changed > 0) {
    sanitized_.fetch_add(changed, std::memory_order_relaxed);
  }

  if (Status s = ready(writer_); !s.ok()) return s;
  const Param params[] = {Param(batch_.levels), Param(batch_.contexts), Param(batch_.messages),
                          Param(batch_.stamps)};
  writer_.conn.set_deadline(clock_->now() + options_.statement_timeout + kClientGrace);
  Result<Rows> done =
      detail::ConnectionAccess::query_unchecked(writer_.conn, logs_table::kInsertBatch, params);
  if (!done.ok()) {
    // A connection lost here is replaced at the next call, not now; so is one to a server
    // that turned read-only (a demoted primary: the next connect finds the writer).
    if (!writer_.conn.is_open() || done.status().sqlstate() == "25006") {
      writer_.conn.close();
      writer_pid_.store(0, std::memory_order_relaxed);
    }
    return done.status();
  }
  if (done->affected() != static_cast<long long>(records.size())) {
    return Status(Code::kInternal, "the logs INSERT stored " + std::to_string(done->affected()) +
                                       " rows of a batch of " + std::to_string(records.size()));
  }
  return Status();
}

Result<int> PgLogStore::delete_older_than(WallTime cutoff, int limit) {
  try {
    if (limit <= 0) {
      return Status(Code::kInvalidArgument,
                    "delete_older_than: limit must be positive, got " + std::to_string(limit));
    }
    std::lock_guard<std::mutex> hold(pruner_.mutex);
    if (Status s = ready(pruner_); !s.ok()) return s;
    const UtcStamp at = utc_stamp(cutoff);
    const Param params[] = {Param(at.view()), Param(limit)};
    pruner_.conn.set_deadline(clock_->now() + options_.statement_timeout + kClientGrace);
    Result<Rows> gone = detail::ConnectionAccess::query_unchecked(
        pruner_.conn, logs_table::kDeleteOlderThan, params);
    if (!gone.ok()) {
      if (!pruner_.conn.is_open()) pruner_.conn.close();
      return gone.status();
    }
    return static_cast<int>(gone->affected());
  } catch (const std::exception& e) {
    return internal_failure("PgLogStore::delete_older_than", &e);
  } catch (...) {
    return internal_failure("PgLogStore::delete_older_than", nullptr);
  }
}

PgLogStoreStats PgLogStore::stats() const noexcept {
  PgLogStoreStats s;
  s.connects = connects_.load(std::memory_order_relaxed);
  s.connect_failures = connect_failures_.load(std::memory_order_relaxed);
  s.batches = batches_.load(std::memory_order_relaxed);
  s.failed_batches = failed_batches_.load(std::memory_order_relaxed);
  s.sanitized = sanitized_.load(std::memory_order_relaxed);
  return s;
}

int PgLogStore::backend_pid() const noexcept {
  return writer_pid_.load(std::memory_order_relaxed);
}

}  // namespace holdfast::pg
