// How the panel answers a request it cannot serve (DESIGN §8): the client's own mistakes
// get a 4xx with a message written for them; everything else gets a short generic answer
// and a digest, while the console and the logs table keep the detail under that digest.
// No answer carries SQL text, an engine message or a file path.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "holdfast/core/status.hpp"
#include "holdfast/log/logger.hpp"

namespace holdfast::panel::http {
struct Response;
}

namespace holdfast::panel {

struct PanelCounters;

// A failure the user should wait out (the database is busy), not a bug.
[[nodiscard]] bool is_busy(const Status& s);
// The database ran out of space: SQLITE_FULL or PostgreSQL's 53100 (disk_full).
[[nodiscard]] bool is_storage_full(const Status& s);
// Seconds for Retry-After: the Status's own hint, 2 s without one.
[[nodiscard]] int retry_after_seconds(const Status& s);
// True when a database engine or driver made `s` (its message may quote SQL or paths).
[[nodiscard]] bool from_engine(const Status& s);

// A refusal that is the database's configuration, not load and not the request (DESIGN §9):
// PostgreSQL's 25006 (read_only_sql_transaction: a primary that stays read-only, a
// standby written to) and 42501 (insufficient_privilege: the panel's role lacks a GRANT).
// Neither is retried (the classifier calls both permanent) and neither means "signed out".
enum class Refusal : std::uint8_t { kNone, kReadOnly, kNotPermitted };
[[nodiscard]] Refusal database_refusal(const Status& s);
// Retry-After of a read-only refusal: a failover or an operator turning the setting off
// fixes it, typically within seconds.
inline constexpr int kReadOnlyRetryAfterSeconds = 10;

class Answers {
 public:
  Answers(Logger& log, PanelCounters& counters, bool holdfast)
      : log_(log), counters_(counters), holdfast_(holdfast) {}

  // A fresh 10-hex-digit digest for an answer and its log line.
  std::string new_digest();

  // The client's mistake: `status` (4xx) with `message`, which must be written for the client.
  void client_error(http::Response& res, int status, std::string_view message, bool as_json) const;
  // A failure of the database or of the panel: logged with its detail under a digest, then
  // answered with the digest: 503 + Retry-After when the database is read-only (25006) or
  // busy (holdfast), 507 when its storage is full, 500 otherwise -- a permission the
  // database refused (42501) included: it is the server's configuration, not the client's
  // (a 403 would tell the client they may not, and nothing they do changes it). A refusal
  // (database_refusal()) is said for what it is and logged as ERROR with its SQLSTATE.
  void failure(http::Response& res, const Status& s, std::string_view path, bool as_json);
  // failure() for a write, as JSON: a 503 and a refusal also say whether anything was applied.
  void write_failure(http::Response& res, const Status& s, std::string_view path);
  // A write's refusal by the store (a domain rule, or a conflicting idempotency key): 404,
  // 409 or 422 with a fixed message; any other status goes to write_failure().
  void write_refusal(http::Response& res, const Status& s, std::string_view path);

 private:
  void answer(http::Response& res, const Status& s, std::string_view path, bool as_json,
              bool write);
  void refused(http::Response& res, const Status& s, Refusal why, std::string_view path,
               bool as_json, bool write);

  Logger& log_;
  PanelCounters& counters_;
  bool holdfast_;
  std::atomic<std::uint64_t> digest_counter_{0};
};

}  // namespace holdfast::panel
