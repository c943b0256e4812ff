// What the PostgreSQL drill's faults share (not installed): the Fault interface, a
// connection of a fault's own, and the proof a silence fault gives. The faults are in
// drill_pg_faults.cpp (locks, terminations, stops, exhaustion, CPU, a standby's lag) and
// drill_pg_silence_faults.cpp (hang, blackhole, pooler-pause, failover, switchover), and
// the HA drill's in drill_pg_patroni_faults.cpp.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "drill_pg_run.hpp"
#include "drill_pg_silence.hpp"
#include "holdfast/pg/connection.hpp"

namespace holdfast::panel::drill::faults {

inline Result<pg::Connection> connect(const std::string& url, const char* application) {
  pg::ConnectOptions o;
  o.conninfo = url;
  o.application_name = application;
  o.connect_timeout = std::chrono::seconds(3);
  return pg::Connection::open(o);
}

// Runs one statement on a connection of its own.
inline Status run_on(const std::string& url, const char* sql) {
  Result<pg::Connection> conn = connect(url, "holdfast-drill");
  if (!conn.ok()) return conn.status();
  Result<pg::Rows> r = conn->query(sql);
  return r.ok() ? Status() : r.status();
}

// Whether the server at `url` is a standby (pg_is_in_recovery()).
inline Result<bool> in_recovery(const std::string& url) {
  Result<pg::Connection> conn = connect(url, "holdfast-drill");
  if (!conn.ok()) return conn.status();
  Result<pg::Rows> r = conn->query("SELECT pg_is_in_recovery()::int");
  if (!r.ok()) return r.status();
  if (r->empty() || !r->int64(0, 0).ok()) return Status(Code::kInternal, "no pg_is_in_recovery()");
  return *r->int64(0, 0) != 0;
}

// Before a fault acts on `url` as the primary (`standby` false) or the standby: the server
// there has that role. The drill tracks roles across changes of primary (PgCluster); this
// makes a fault that would hit the wrong server fail instead.
inline Status expect_role(const std::string& url, bool standby, const char* what) {
  Result<bool> r = in_recovery(url);
  if (!r.ok()) return Status(r.status()).annotate(fmt::format("asking {} its role", what));
  if (*r != standby) {
    return Status(Code::kFailedPrecondition,
                  fmt::format("{} ({}) is {}", what, url,
                              *r ? "a standby (in recovery)" : "a primary (not in recovery)"));
  }
  return Status();
}

// Every client backend of the drill's databases (the panels' and PgBouncer's connections).
constexpr const char* kTerminateDrillBackends =
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid <> "
    "pg_backend_pid() AND backend_type = 'client backend' AND datname LIKE 'drill\\_%'";

// A fault: begin() causes it, tick() runs every 50 ms while it is held, end() undoes it
// (also after a failed begin(); idempotent). The destructor lets go of what is left.
// A silence fault also says how it proved it was caused (evidence) and how long after
// end() the path it cut answered SELECT 1 again (check_undone(); answered_again_ms; -1:
// not checked). A fault that acts on one server names it in its evidence by role and port
// ("the primary (port P)"), so a report shows which server each fault hit.
class Fault {
 public:
  virtual ~Fault() = default;
  virtual Status begin() = 0;
  virtual void tick() {}
  virtual Status end() = 0;
  // After end() (the fault's end is taken between the two): the path the fault cut
  // answers again.
  virtual Status check_undone() { return Status(); }
  [[nodiscard]] const std::string& evidence() const { return evidence_; }
  [[nodiscard]] double answered_again_ms() const { return answered_again_ms_; }
  // A failover's: when the standby became the primary (seconds since the load began);
  // -1 for the others, or when it was not promoted.
  [[nodiscard]] virtual double promoted_s() const { return -1; }
  // Whether the report audits, for this fault, the payments confirmed during it (and its
  // gap) against the writer afterwards (StrategyResult::confirmed_payments_lost): a change
  // of primary, and every Patroni fault, which may bring one about.
  [[nodiscard]] virtual bool audits_payments() const { return promoted_s() >= 0; }

 protected:
  // Proof of silence: `url` must not answer SELECT 1 within `patience`.
  static Status expect_silence(const std::string& url, const char* what, Duration patience) {
    Result<double> r = ask_within(url, "SELECT 1", patience);
    if (r.ok()) {
      return Status(Code::kInternal,
                    fmt::format("{} still answered SELECT 1 ({:.0f} ms)", what, *r));
    }
    if (r.status().code() != Code::kDeadlineExceeded) {
      return Status(r.status()).annotate(fmt::format("{} was to be silent, but", what));
    }
    return Status();
  }
  // After the undoing: `url` answers SELECT 1 again within 10 s, or the fault was not
  // undone.
  Status expect_answer(const std::string& url, const char* what) {
    Result<double> r = wait_for_answer(url, std::chrono::seconds(10));
    if (!r.ok()) {
      return Status(r.status())
          .annotate(fmt::format("{} did not answer within 10 s of the fault's end", what));
    }
    answered_again_ms_ = *r;
    return Status();
  }

  std::string evidence_;
  double answered_again_ms_ = -1;
};

// How long a silence fault's proof waits for an answer that must not come. Below
// PgBouncer's query_wait_timeout in the drill (1 s), which would end a paused query.
constexpr std::chrono::milliseconds kSilenceProof{800};

// The silence faults (hang, standby-hang, blackhole, pooler-pause) and the change of
// primary (failover, failover-async, switchover), or nullptr for another kind.
std::unique_ptr<Fault> make_silence_fault(const StormSpec& spec, PgDrill& drill,
                                          const DrillRun& run);

// The HA drill's faults on the Patroni cluster (patroni-kill, patroni-freeze,
// patroni-switchover, dcs-down, dcs-down-failsafe; drill_pg_patroni_faults.cpp), or nullptr
// for another kind.
std::unique_ptr<Fault> make_patroni_fault(const StormSpec& spec, PgDrill& drill,
                                          const DrillRun& run);

}  // namespace holdfast::panel::drill::faults
