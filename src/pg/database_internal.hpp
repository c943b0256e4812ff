// The helpers Database::Impl's files share (not installed): a call's pipeline, how a
// failure is judged, what a replica's read says of it. Database::Impl: database_impl.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "holdfast/detail/read_route.hpp"
#include "holdfast/pg.hpp"
#include "holdfast/pg/connection.hpp"
#include "holdfast/pg/lsn.hpp"
#include "holdfast/pg/pool.hpp"
#include "holdfast/pg/transactions.hpp"
#include "pg_internal.hpp"

namespace holdfast::pg::detail {

// The most a replica read waits for a new connection to its replica. A connect takes a few
// milliseconds; one that takes longer reaches a host that does not answer (after a failover,
// the replica URL's frozen old primary, until the replica's liveness finds it silent), and
// the primary can answer the read meanwhile.
inline constexpr Duration kReplicaConnectTimeout = std::chrono::milliseconds(500);

// The statements a pipeline prepares under a name, marked prepared on the connection once
// the pipeline ran past them.
struct Marks {
  std::size_t step[2] = {};
  std::uint32_t id[2] = {};
  std::size_t size = 0;

  // `failed`: the index of the step that failed (steps.size() when none did).
  void apply(Connection& conn, std::size_t failed) const;
};

// One call's pipeline on a leased connection: its steps, the statements it prepares, and
// the statement_timeout its prefix sets (Database::add_prefix). Not copyable: the steps
// point into it.
struct CallPipeline {
  CallPipeline() = default;
  CallPipeline(const CallPipeline&) = delete;
  CallPipeline& operator=(const CallPipeline&) = delete;

  Steps steps;
  Marks marks;
  char timeout_ms[24] = {};
  Param timeout{nullptr};   // the prefix's first parameter: timeout_ms
  std::vector<Param> more;  // the prefix's parameters with settings (Pooling::kTransaction)
};

// Adds one statement to `steps`: prepared as `name` when `name` is not empty (with its
// Parse first when `conn` has not prepared statement `id` yet), else sent unnamed. Returns
// the index of the step whose rows are the statement's.
std::size_t add_statement(Steps& steps, Connection& conn, std::string_view sql,
                          std::string_view name, std::uint32_t id, std::span<const Param> params,
                          Marks& marks);

// A failure before anything of ours could have been applied (connect, BEGIN, the prefix,
// a Parse).
Status nothing_applied(Status s);
using holdfast::pg::in_transaction;  // holdfast/pg/transactions.hpp
// After a failed call on `lease`: true when `s` is a pooler's own refusal saying it cannot
// reach the server (pooler_cannot_reach_server()). The connection then goes back to the
// pool as a failed connect (PooledConnection::server_unreachable(), which sets `s`'s
// retry_after()), and no server saw the call: nothing of it was applied.
bool pooler_refused(PooledConnection& lease, Status& s);
// A read-only server refused `s` (25006) on a multi-host URL: nothing was applied, and
// `lease` reaches a primary that was demoted. It and `writes`' idle connections go, so the
// next connect finds the writer (target_session_attrs=read-write); `s` is re-scoped to
// `scope` (the write, or a re-runnable transaction, goes again) and says so.
Status left_demoted_primary(PooledConnection& lease, Pool& writes, Status s, RetryScope scope);
// INVALID_ARGUMENT: `what` and why the classifier said so.
Status refused(std::string_view what, const SqlClass& c);
// The WAL position in `rows` (row 0), or 0 when there is none.
std::uint64_t wal_position(const Rows& rows, int col) noexcept;
// The timeline in `rows` (row 0; 8 hex digits, as a WAL file's name begins), or 0.
std::uint32_t wal_timeline(const Rows& rows, int col) noexcept;

// What a replica's read said about the replica (its prefix's columns), for a request whose
// writes are at `need` (0: it has none): whether the replica's answer is the read's.
enum class ReplicaVerdict : std::uint8_t {
  kServes,         // its answer is the read's
  kNotAReplica,    // not in recovery (a promoted standby): the primary answers (ADR 0025)
  kBehind,         // it has not replayed `need` yet: the primary answers
  kEarlySnapshot,  // replayed it, but the read's snapshot may be older: the primary answers
};
// `in_recovery`, `replayed`, `read_committed`: what the replica reported. A server not in
// recovery is no replica whatever the rest says: its replay position stopped at its
// promotion and says nothing of what it holds.
ReplicaVerdict replica_verdict(bool in_recovery, std::uint64_t replayed, bool read_committed,
                               std::uint64_t need) noexcept;
// The answer of replica `name` found not in recovery (by a read or its health probe): an
// overload failure for its breaker, so that a replica URL that keeps reaching that server
// (one host, no target_session_attrs=standby) is tried once per open period, not by every
// read; scope kReconnect: another connection may reach a real standby.
Status not_a_replica(const std::string& name);

}  // namespace holdfast::pg::detail
