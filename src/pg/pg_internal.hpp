// Driver internals shared by the files of src/pg (not installed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "holdfast/core/liveness.hpp"
#include "holdfast/pg/connection.hpp"
#include "holdfast/pg/sql.hpp"
#include "holdfast/pg/transactions.hpp"

struct pg_conn;  // libpq's PGconn

namespace holdfast::pg::detail {

// Statement ids below kFirstStatementId name the driver's own prepared statements (the
// prefix a call opens with); Database::prepare() numbers from kFirstStatementId up.
inline constexpr std::uint32_t kFirstStatementId = 16;

// One statement of a pipeline.
struct Step {
  enum class Kind : std::uint8_t {
    kQuery,     // `sql` with `params`, unnamed (parsed by this call)
    kPrepare,   // prepares `sql` under `name` (`params` give the types)
    kPrepared,  // runs the statement prepared as `name` with `params`
  };
  Kind kind = Kind::kQuery;
  std::string_view sql;
  std::string_view name;
  std::span<const Param> params;
};

// A few steps, kept on the stack.
struct Steps {
  static constexpr std::size_t kMax = 8;
  Step items[kMax];
  std::size_t size = 0;

  // Appends `step` and returns its index. REQUIRES: size < kMax.
  std::size_t add(const Step& step) noexcept {
    items[size] = step;
    return size++;
  }
  [[nodiscard]] std::span<const Step> span() const noexcept { return {items, size}; }
};

struct ConnectionAccess {
  // Connection::query() without the one-statement check, for callers that classified the
  // SQL already (the Database) and for our own fixed statements.
  static Result<Rows> query_unchecked(Connection& c, std::string_view sql,
                                      std::span<const Param> params);
  // Sends `steps` as one pipeline closed by one Sync: one round trip. The server runs them
  // in one implicit transaction (unless they begin or end one themselves) and, after a
  // failed step, skips the rest up to the Sync. out[i] receives step i's rows.
  // REQUIRES: out.size() >= steps.size(); the connection is not inside a pipeline.
  // Returns OK or the first failure; `failed` (when not null) is set to that step's index,
  // or to steps.size() when every step succeeded or the failure is not a step's own (the
  // connection was lost, the deadline passed).
  static Status pipeline(Connection& c, std::span<const Step> steps, std::span<Rows> out,
                         std::size_t* failed = nullptr);
  // pipeline() in two halves, for a hedged read: the steps sent without waiting (`sent`:
  // all of them and the Sync went out), then their results collected as pipeline() does.
  static Status pipeline_send(Connection& c, std::span<const Step> steps, bool& sent);
  static Status pipeline_collect(Connection& c, std::span<const Step> steps, bool sent,
                                 std::span<Rows> out, std::size_t* failed = nullptr);
  // Waits until `a` or `b` (may be null), each with a pipeline sent, has a result to read
  // (or was lost, or its server found silent): 0 for `a`, 1 for `b`, -1 when `until` passed.
  static int first_answer(Connection& a, Connection* b, TimePoint until) noexcept;
  // Cancels what runs on `c` (off this thread) and closes it.
  static void abandon(Connection& c) noexcept;
  // Statement ids prepared on this connection (holdfast::pg::Statement and the prefixes).
  static bool is_prepared(const Connection& c, std::uint32_t id) noexcept;
  static void mark_prepared(Connection& c, std::uint32_t id);
  static pg_conn* native(const Connection& c) noexcept;
  // Whether `a` and `b` reach the same host and port, as libpq reports them (PQhost(),
  // PQport()); false when either is closed. No I/O.
  static bool same_server(const Connection& a, const Connection& b) noexcept;
  // How many hosts `conninfo` names (0 or 1 for a plain one).
  static std::size_t host_count(const std::string& conninfo);
  // With several hosts and no target_session_attrs in the conninfo: connects take only a
  // host that is not in recovery (libpq checks it at connect), the one that takes writes.
  static void ask_for_writer(ConnectOptions& options);
  // Keywords that pick one host of several ({"host", "h2"}, {"port", "5433"}).
  using HostKeywords = std::vector<std::pair<const char*, std::string>>;
  // Connection::open() on one host: `host` overrides the conninfo's hosts (empty: the
  // conninfo as it is), no later than `until`. `timed_out` (when not null): true when nothing
  // answered in time (no refusal, no error: silence). `probe`: whether the connect is a probe
  // of a server already found silent (it then waits for `until`, not for the watch); by
  // default, whether options.watch is silent now.
  enum class Probe : std::uint8_t { kIfSilentNow, kYes, kNo };
  static Result<Connection> open_one(const ConnectOptions& options, const HostKeywords& host,
                                     TimePoint until, bool* timed_out = nullptr,
                                     Probe probe = Probe::kIfSilentNow);
  // The watch of the one host `c` reaches, of several its conninfo names (host_watch()).
  static void set_host(Connection& c, std::shared_ptr<ServerWatch> host) noexcept;
  // Which host of several `c` reaches (the address of its host watch), 0 for a conninfo of
  // one host or a closed connection. No I/O.
  static std::uintptr_t host_id(const Connection& c) noexcept;
  // "host:port" as libpq reports it (PQhost(), PQport()); empty when closed. No I/O.
  static std::string server_name(const Connection& c);
  // A liveness check of the server `options` reach (holdfast/core/liveness.hpp): a connection of
  // its own (no watch) and SELECT 1, all within `deadline`. kSilent when nothing came back
  // in time: neither the connect's handshake nor the query's answer. A refusal or an error
  // is an answer.
  static Liveness::CheckResult check_server(const ConnectOptions& options, TimePoint deadline);
  // For LoopConnection (loop_connection.cpp): a connect started and not driven
  // (PQconnectStartParams), its failure classified as open() classifies it, and the
  // connection's state.
  static Result<Connection> start(const ConnectOptions& options, const HostKeywords& host = {});
  // Host `i` of the several `options` names, as keywords for start() or open_one(); empty when
  // it names one host or fewer than i + 1.
  static HostKeywords host_keywords(const ConnectOptions& options, std::size_t i);
  // The host of `conninfo` that took a connection last (process-wide), and remembering it.
  static std::size_t preferred_host(const std::string& conninfo);
  static void remember_host(const std::string& conninfo, std::size_t host);
  static Status start_failure(const Connection& c, bool done);
  static Connection::Impl* impl(Connection& c) noexcept;
};

// The current request's read-your-writes position (lsn.cpp; pg/lsn.hpp).
struct RequestPosition {
  std::uint64_t lsn = 0;
  std::uint32_t timeline = 0;  // of `lsn`; 0: not known
  bool primary_only = false;   // a write's position is not known: the primary must answer
};
[[nodiscard]] RequestPosition request_position() noexcept;
// A write of the current request committed; `lsn` is at or past its commit record, or 0
// when that is not known (the request's reads then go to the primary); `timeline` is the
// primary's (0: not known). No-op outside a RequestScope.
void note_write(std::uint64_t lsn, std::uint32_t timeline) noexcept;
// A COMMIT of the current request answered on the primary alone (ADR 0053): its reads go to
// the primary from now on, and the call answers unconfirmed_commit().
Status unconfirmed_write();

using holdfast::pg::ends_transaction;  // holdfast/pg/transactions.hpp

}  // namespace holdfast::pg::detail
