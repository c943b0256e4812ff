/// @file
/// holdfast::sqlite::Statement: a prepared statement, bound and stepped by hand.
///
/// The query helpers (sqlite/query.hpp) bind, step and read for you; a Statement is for a
/// caller that drives one itself, through Transaction::statement() or with_statement():
///
/// @code
///   Result<Statement> st = tx.statement("INSERT INTO payments(user, cents) VALUES (?, :cents)");
///   st->bind(1, user_id);                  // by index (1-based, as in SQLite)
///   st->bind(":cents", 1250);              // by name
///   Result<bool> row = st->step();         // true: a row is ready in st->row()
/// @endcode
///
/// Errors are values: every failure is a Status built by holdfast::sqlite_status(), so it
/// carries the SQLite extended result code and its Fault. A Status from a statement inside a
/// transaction also says whether SQLite rolled the transaction back (TxnState).
///
/// Text and blobs are bound without copying: they must stay valid until the statement is
/// reset or bound again (binding a temporary std::string does not compile).
///
/// Thread safety: a Statement belongs to one connection; use it from one thread at a time.
/// A Statement handed out by a Database or Transaction is borrowed from a per-connection
/// cache: it is reset when destroyed and must not outlive what handed it out.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "holdfast/core/result.hpp"
#include "holdfast/core/status.hpp"
#include "holdfast/sqlite/row.hpp"

namespace holdfast::sqlite {

/// One prepared SQLite statement, owned or borrowed from a connection's cache (see the top
/// of this file). Move-only; used by one thread at a time.
class Statement {
 public:
  Statement() noexcept = default;  ///< empty; valid() is false
  /// Takes over `other`'s statement; `other` is left empty.
  Statement(Statement&& other) noexcept;
  /// Releases this statement, then takes over `other`'s.
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  /// Finalizes a statement it owns; resets (and unbinds text) one borrowed from a cache.
  ~Statement();

  /// True when it holds a statement.
  [[nodiscard]] bool valid() const noexcept { return row_.stmt_ != nullptr; }
  /// The SQL text it was prepared from.
  [[nodiscard]] std::string_view sql() const noexcept;
  /// The number of parameters.
  [[nodiscard]] int parameter_count() const noexcept {
    return parameter_count_ >= 0 ? parameter_count_ : count_parameters();
  }
  /// 1-based index of a named parameter (":id"), 0 when there is none.
  [[nodiscard]] int parameter_index(std::string_view name) const;
  /// The engine's verdict: the statement makes no direct change to the database file.
  [[nodiscard]] bool readonly() const noexcept;

  /// Binds `value` to parameter `index` (1-based): an integer, a floating-point number, text,
  /// Blob, std::vector<std::byte>, Null (or nullptr, std::nullopt) or std::optional of one.
  /// On failure (index out of range, an integer that does not fit SQLite's 64 bits) returns
  /// a Status naming the parameter.
  template <class T>
  Status bind(int index, const T& value) {
    return bind_value(index, detail::value_of(value));
  }
  /// Binds by name. An unknown name is a Status naming it.
  template <class T>
  Status bind(std::string_view name, const T& value) {
    return bind_value(name, detail::value_of(value));
  }
  Status bind(int index, std::string&&) = delete;  ///< would dangle: bind an lvalue
  Status bind(std::string_view name, std::string&&) = delete;

  /// Binds every parameter: plain values by position, Named values by name. The number of
  /// values must equal parameter_count(), else a Status says how many were expected.
  template <class... Args>
  Status bind_all(const Args&... args) {
    const std::array<detail::Value, sizeof...(Args)> values{detail::value_of(args)...};
    return bind_values(values);
  }

  /// Runs the statement up to its next row. true: a row is ready in row(); false: done.
  Result<bool> step();
  /// Steps to the end, ignoring rows.
  Result<Exec> run();
  /// Makes the statement ready to run again; bindings stay. Never fails (step() reported
  /// any error already).
  void reset() noexcept;
  /// Unbinds every parameter (they read as NULL).
  void clear_bindings() noexcept;

  /// The current row, after step() returned true.
  [[nodiscard]] const Row& row() const noexcept { return row_; }
  /// row().get<T>(index).
  template <detail::readable T>
  [[nodiscard]] T column(int index) const {
    return row_.get<T>(index);
  }

 private:
  friend struct detail::StatementAccess;

  Status bind_value(int index, const detail::Value& value);
  Status bind_value(std::string_view name, const detail::Value& value);
  Status bind_values(std::span<const detail::Value> values);
  [[nodiscard]] Status bind_failed(int rc, int index) const;
  [[nodiscard]] Status unknown_parameter(std::string_view name) const;
  [[nodiscard]] Status wrong_parameter_count(std::size_t given) const;
  [[nodiscard]] Status too_large(int index) const;
  Status step_failed(int rc);
  [[nodiscard]] int count_parameters() const noexcept;
  void release() noexcept;

  Row row_;
  int parameter_count_ = -1;  // known from the Query, or asked of SQLite
  bool owned_ = false;
  bool in_transaction_ = false;    // errors say whether SQLite rolled the transaction back
  bool binds_references_ = false;  // text or blob bound by reference since the last reset
};

}  // namespace holdfast::sqlite
