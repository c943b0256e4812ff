/// @file
/// The options of holdfast::asio::pg::Client (holdfast/adapters/asio_pg.hpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <initializer_list>
#include <string>

#include "holdfast/core/idempotency.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/core/status.hpp"
#include "holdfast/detail/read_route.hpp"
#include "holdfast/detail/table_name.hpp"
#include "holdfast/pg/connection.hpp"
#include "holdfast/pg/lost_writes_watch.hpp"
#include "holdfast/pg/options.hpp"

namespace holdfast::asio::pg {

/// How a Client connects and how many connections it keeps.
struct ClientOptions {
  /// The server (or servers: a multi-host URL; writes need target_session_attrs=read-write
  /// when some of them are standbys), keepalives and session settings.
  holdfast::pg::ConnectOptions connect;
  /// The most connections open at once; a call that finds them all busy waits on the loop
  /// for one (within its window).
  std::size_t max_connections = 8;
  /// What the connections reach: the server itself or a pooler in session mode
  /// (Pooling::kSession: a read, on the primary or a standby, and a write are prepared once
  /// per connection, with the statement_timeout setting each sends, and then executed by
  /// name, so the server parses and plans each once), or a pooler in transaction
  /// mode (Pooling::kTransaction: nothing is prepared, since the next transaction may run on
  /// a server session that never saw it; the session settings of `connect` must then be ones
  /// the pooler accepts at connect).
  holdfast::pg::Pooling pooling = holdfast::pg::Pooling::kSession;
  /// The wait after a failed connect to the primary before the next one (pg::DatabaseOptions'
  /// default); meanwhile a call that finds no idle connection is answered at once with the
  /// connect's failure and Retry-After, as pg::Database's pool answers.
  Backoff reconnect_backoff = holdfast::pg::detail::pool_reconnect_backoff();
  /// How long a cancelled statement may take to end before its connection is closed.
  Duration cancel_grace = std::chrono::milliseconds(200);
  /// The table of async_once()'s keys (the blocking pg::Database's default name and shape:
  /// key text PRIMARY KEY, result text, created_at timestamptz).
  std::string idempotency_table = "holdfast_idempotency";
  /// The Shield's name (its metrics and log lines).
  std::string shield_name = "postgres";
  /// The Shield's settings (limit, breaker, throttle).
  Shield::Options shield;
  /// Hot standbys that may answer reads (a plain or multi-host conninfo, e.g. pg::any_of()'s;
  /// empty: none). Each host is a standby of its own (its connections, latency, lag and
  /// silence), and reads are spread over them in turn, skipping one found silent, lagging or
  /// far slower. A read goes to a standby that has replayed the request's own writes (their
  /// commit positions, kept in its RequestContext), else to the primary; when the primary
  /// cannot answer, to a standby that was only behind them, once more. pg::Database routes its
  /// replica reads the same way (ADR 0057).
  holdfast::pg::ConnectOptions standby;
  /// The most connections to each standby.
  std::size_t standby_connections = 8;
  /// How long a read waits for a standby (its connect and its answer) before the primary
  /// answers it instead, within the same attempt; with several standbys, one that does not
  /// answer it (down, a primary now, behind, slow) leaves it to the next while this has not
  /// passed since the first was asked. When no standby connection can be made, the reads of
  /// the next silence_check go to the primary at once.
  Duration standby_wait = holdfast::pg::detail::kStandbyWait;
  /// A standby that has not replayed WAL it received this long ago (its replay paused, or too
  /// slow to keep up) answers no reads: they go to the primary, and one read every 250 ms
  /// looks again (pg::DatabaseOptions::max_replica_lag's rule and default). Measured from what
  /// the standby reports with each read. Greater than 0.
  Duration max_standby_lag = std::chrono::seconds(1);
  /// Hedged reads: a standby read that has not answered within the standby's normal latency
  /// (the 95th percentile of its last 64 answers, at least hedge_min_delay) is also sent to the
  /// primary; the first answer wins and the other is cancelled. At most this share of reads is
  /// hedged (a budget earned by each read); 0 turns hedging off. Never while the primary's
  /// connections are all busy.
  double hedge_budget = 0.02;
  /// The least a standby read waits before it is hedged.
  Duration hedge_min_delay = std::chrono::milliseconds(5);
  /// Outlier ejection (the blocking pg::DatabaseOptions::slow_copy_floor's rule, the same
  /// code): a standby answer slower than slow_copy_factor x the primary's recent read latency
  /// (an EWMA), and slower than slow_copy_floor, is slow; so is a hedge the standby lost. After
  /// 3 slow ones in a row the standby gets no reads but one probe read every
  /// slow_copy_probe_every (hedged to the primary, or given up, once it has waited the
  /// threshold, so it costs its caller at most that), until 2 probes in a row answer within
  /// the threshold. A read whose primary try failed goes back to the standby whatever its
  /// state: a slow answer beats none. 0 turns it off. Must not be negative.
  Duration slow_copy_floor = std::chrono::milliseconds(20);
  /// How many times the primary's recent read latency a slow standby answer takes (see
  /// slow_copy_floor). At least 1.
  double slow_copy_factor = 4.0;
  /// How often a standby used less gets a probe read (see slow_copy_floor). Greater than 0.
  Duration slow_copy_probe_every = std::chrono::milliseconds(200);
  /// Silence (DESIGN.md section 10), judged by the watch pg::Database keeps of a server
  /// (holdfast::Liveness, ADR 0058): once a call waiting on the primary has heard nothing from
  /// it for this long, one check (one at a time) asks whether the server answers at all (a
  /// connection of its own and SELECT 1 within silence_check). A server that does not is silent:
  /// every call waiting on it gives up at once, and so do the calls that come until a recheck finds
  /// it answering. A server that answers is only slow (a lock wait): the calls wait on. A write, a
  /// transaction's statement or COMMIT given up on a silent server has its outcome unknown unless
  /// nothing was sent (docs/adr/0037; a keyed call is then repeated and finds its key).
  Duration silence_after = std::chrono::milliseconds(500);
  /// How long the check may take.
  Duration silence_check = std::chrono::milliseconds(500);
  /// Once the primary is found silent, a probe of the Client's own rechecks it this often (a
  /// connection to each host of the list and SELECT 1 within silence_check), on the executor;
  /// until one answers every call is answered at once (none waits on a silent server, nor
  /// connects to it), and the answer closes the Shield's breaker (as
  /// pg::DatabaseOptions::health_probe_interval does). The probe stops when the server answers,
  /// or when no call has found it silent for 10 s (the next call then looks for itself); while
  /// it runs it is work on the executor (io_context::run() does not return). 0: no probe (a
  /// call rechecks the server itself every silence_check; the others are answered at once).
  Duration health_probe_every = std::chrono::milliseconds(250);
  /// The watch for confirmed writes a change of writer lost (pg::DatabaseOptions::lost_writes,
  /// ADR 0036): every write, transaction and keyed call the Client confirms is remembered, and
  /// after a failover a thread of the watch's own checks the new writer for them
  /// (Client::lost_writes()). `remember` 0 turns it off.
  holdfast::pg::LostWritesOptions lost_writes;

  /// OK, or INVALID_ARGUMENT naming the field of options that can never work: no conninfo, no
  /// connection allowed, a table name that is not an identifier, a negative time, a slow-copy
  /// rule that cannot hold. Client::open() refuses such options; a caller may check them first.
  [[nodiscard]] Status check() const {
    if (connect.conninfo.empty()) {
      return Status(Code::kInvalidArgument, "ClientOptions::connect.conninfo is empty");
    }
    if (max_connections == 0) {
      return Status(Code::kInvalidArgument, "ClientOptions::max_connections must be at least 1");
    }
    if (!standby.conninfo.empty() && standby_connections == 0) {
      return Status(Code::kInvalidArgument,
                    "ClientOptions::standby_connections must be at least 1 with a standby");
    }
    if (!holdfast::detail::is_table_name(idempotency_table)) {
      return Status(Code::kInvalidArgument, "ClientOptions::idempotency_table '" +
                                                idempotency_table +
                                                "' is not a plain or schema-qualified identifier");
    }
    if (cancel_grace < Duration::zero() || standby_wait < Duration::zero() ||
        health_probe_every < Duration::zero()) {
      return Status(Code::kInvalidArgument,
                    "ClientOptions::cancel_grace, standby_wait and health_probe_every must not be "
                    "negative");
    }
    if (silence_after <= Duration::zero() || silence_check <= Duration::zero()) {
      return Status(Code::kInvalidArgument,
                    "ClientOptions::silence_after and silence_check must be greater than zero");
    }
    for (const Duration d :
         {cancel_grace, standby_wait, silence_after, silence_check, health_probe_every}) {
      if (d > std::chrono::hours(1)) {
        return Status(Code::kInvalidArgument,
                      "ClientOptions::cancel_grace, standby_wait, silence_after, silence_check "
                      "and health_probe_every must be at most an hour");
      }
    }
    if (max_standby_lag <= Duration::zero()) {
      return Status(Code::kInvalidArgument,
                    "ClientOptions::max_standby_lag must be greater than zero");
    }
    if (slow_copy_floor < Duration::zero() || !(slow_copy_factor >= 1.0) ||
        slow_copy_probe_every <= Duration::zero()) {
      return Status(Code::kInvalidArgument,
                    "ClientOptions::slow_copy_floor must not be negative, slow_copy_factor must "
                    "be at least 1 and slow_copy_probe_every greater than zero");
    }
    if (lost_writes.remember > 0) {
      if (Status bad = holdfast::pg::check(lost_writes); !bad.ok()) {
        return Status(Code::kInvalidArgument, "ClientOptions::" + std::string(bad.message()));
      }
    }
    return Status();
  }
};

}  // namespace holdfast::asio::pg
