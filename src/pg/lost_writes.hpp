// A Database's watch for confirmed writes that a change of writer lost (not installed;
// holdfast/pg/lost_writes.hpp, ADR 0036).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "confirmed_writes.hpp"
#include "holdfast/core/metrics.hpp"
#include "holdfast/core/shield.hpp"
#include "holdfast/log/console.hpp"
#include "holdfast/pg/connection.hpp"
#include "holdfast/pg/lost_writes.hpp"
#include "holdfast/pg/lost_writes_watch.hpp"

namespace holdfast::pg::detail {

class LostWrites {
 public:
  // `connect`: how the checker reaches the writer (a connection of its own). `newest`: the
  // Database's newest timeline seen. `metrics`: the primary Shield's. `table`: the
  // idempotency-key table. All outlive this.
  LostWrites(const LostWritesOptions& options, ConnectOptions connect, std::string table,
             const std::atomic<std::uint32_t>& newest, Metrics& metrics, Clock& clock);
  ~LostWrites();
  LostWrites(const LostWrites&) = delete;
  LostWrites& operator=(const LostWrites&) = delete;

  // A write was confirmed at `lsn` on `timeline` (0: not known) by the writer of `host`, with
  // idempotency key `key` (empty: none). The success path: one slot of the ring and two relaxed
  // loads; a change of writer wakes the checker. `host`: ConnectionAccess::host_id() of the
  // connection; `conn` (may be null) names it.
  void confirmed(std::uint64_t lsn, std::uint32_t timeline, std::uintptr_t host,
                 const Connection* conn, std::string_view key) noexcept;

  [[nodiscard]] LostWritesReport report() const;

 private:
  struct Writer {
    std::uint32_t timeline = 0;
    std::uintptr_t host = 0;
  };
  void changed(Writer to, const Connection* conn) noexcept;
  void loop();
  // One check against the writer: true when it was made (whatever it found).
  bool check(TimePoint change_at);
  // REQUIRES: mutex_ held. Reports `missing` (confirmed writes the writer does not hold): an
  // ERROR line per 64, the metric, the report.
  void report_missing(const std::string& writer, const std::vector<const ConfirmedWrite*>& missing);
  void log(Level level, const std::string& message) noexcept;
  std::string host_name(std::uintptr_t host) const;

  const LostWritesOptions options_;
  const ConnectOptions connect_;
  const std::string table_;
  const std::atomic<std::uint32_t>& newest_;
  Metrics& metrics_;
  Clock& clock_;
  ConfirmedWrites ring_;
  std::atomic<std::uint32_t> writer_timeline_{0};
  std::atomic<std::uintptr_t> writer_host_{0};

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool pending_ = false;
  TimePoint change_at_{};
  std::unordered_map<std::uintptr_t, std::string> host_names_;  // bounded: hosts of the URL
  LostWritesReport report_;
  std::thread thread_;
  // The checker thread's own: tickets already reported missing (never twice).
  std::unordered_set<std::uint64_t> reported_;
};

}  // namespace holdfast::pg::detail
