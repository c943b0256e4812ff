/// @file
/// The watch for confirmed writes a change of writer lost (holdfast/pg/lost_writes.hpp, ADR
/// 0036) as a class of its own, for a driver that confirms writes itself; and the check of its
/// options that both drivers make.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "holdfast/core/clock.hpp"
#include "holdfast/core/result.hpp"
#include "holdfast/pg/lost_writes.hpp"

namespace holdfast {
class Metrics;
}  // namespace holdfast

namespace holdfast::pg {

struct ConnectOptions;

/// OK when `options` can work (`remember` > 0 and the rest in range), else INVALID_ARGUMENT
/// naming the field ("lost_writes.horizon must be greater than zero").
[[nodiscard]] Status check(const LostWritesOptions& options);

/// The watch a pg::Database keeps for confirmed writes a change of writer lost, for a driver
/// that confirms writes itself (asio::pg::Client keeps one): told each write it confirmed,
/// it notices a change of writer and checks the new one, on a thread of its own, as described
/// in holdfast/pg/lost_writes.hpp. Thread-safe.
class LostWritesWatch {
 public:
  /// A watch with `options` whose checks reach the writer with `connect` (connections of its
  /// own; they ask for a server that takes writes, as target_session_attrs=read-write does),
  /// looking up keys in the idempotency-key table `table`. Findings count in `metrics` (the
  /// driver's Shield's). Fails on options that can never work, naming the field
  /// (`options.remember` 0 included: no watch is then wanted). REQUIRES: `metrics`, `clock`
  /// and `options.logger` outlive the watch.
  static Result<std::unique_ptr<LostWritesWatch>> open(const LostWritesOptions& options,
                                                       const ConnectOptions& connect,
                                                       std::string table, Metrics& metrics,
                                                       Clock& clock);
  ~LostWritesWatch();
  LostWritesWatch(const LostWritesWatch&) = delete;
  LostWritesWatch& operator=(const LostWritesWatch&) = delete;

  /// A write was confirmed at commit position `lsn` on `timeline` (0: not known) by server
  /// `host` (a number of the driver's that is the same for one server and differs between
  /// servers, e.g. its index in a multi-host URL + 1), with idempotency key `key` (empty:
  /// none). No lock and no allocation unless the writer changed.
  void confirmed(std::uint64_t lsn, std::uint32_t timeline, std::uintptr_t host,
                 std::string_view key) noexcept;
  /// What the watch found so far.
  [[nodiscard]] LostWritesReport report() const;

 private:
  struct Impl;
  explicit LostWritesWatch(std::unique_ptr<Impl> impl) noexcept;
  std::unique_ptr<Impl> impl_;
};

}  // namespace holdfast::pg
