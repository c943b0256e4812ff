/// @file
/// holdfast::pg::Rows: the rows (or command result) of one statement, read as text or as
/// typed values. What every query of the driver answers with (Connection, Transaction,
/// Database).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "holdfast/core/result.hpp"
#include "holdfast/core/status.hpp"

struct pg_result;  // libpq's PGresult

namespace holdfast::pg {

/// The rows (or command result) of one statement. Move-only; owns the libpq result.
/// Row and column indexes are 0-based. Text accessors never fail (NULL reads as "");
/// typed accessors return a Status naming the column when the value is NULL, does not
/// parse, or is out of range.
class Rows {
 public:
  /// An empty result: no rows, no columns.
  Rows() noexcept = default;
  /// Takes ownership of a libpq result (null: empty).
  explicit Rows(pg_result* result) noexcept : result_(result) {}

  [[nodiscard]] int size() const noexcept;  ///< number of rows
  /// True when there are no rows.
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  [[nodiscard]] int columns() const noexcept;  ///< number of columns
  /// The column's name; empty when out of range.
  [[nodiscard]] std::string_view column_name(int col) const noexcept;
  /// The column's index, or -1.
  [[nodiscard]] int column(std::string_view name) const noexcept;

  /// True for NULL, and for a cell out of range.
  [[nodiscard]] bool is_null(int row, int col) const noexcept;
  /// The cell's text; empty for NULL or out of range.
  [[nodiscard]] std::string_view text(int row, int col) const noexcept;

  /// The cell as a 64-bit integer.
  [[nodiscard]] Result<long long> int64(int row, int col) const;
  /// The cell as a 32-bit integer.
  [[nodiscard]] Result<int> int32(int row, int col) const;
  /// The cell as a double (NaN and Infinity included).
  [[nodiscard]] Result<double> float64(int row, int col) const;
  /// The cell as a bool ('t' or 'f').
  [[nodiscard]] Result<bool> boolean(int row, int col) const;
  /// The cell's text, copied; an error for NULL.
  [[nodiscard]] Result<std::string> string(int row, int col) const;

  /// Rows inserted, updated or deleted by the statement (0 for a query without a count).
  [[nodiscard]] long long affected() const noexcept;
  /// The command tag: "SELECT 1", "INSERT 0 1", "UPDATE 3", ...
  [[nodiscard]] std::string_view command() const noexcept;

  /// The libpq result, still owned by this object.
  [[nodiscard]] pg_result* native() const noexcept { return result_.get(); }

 private:
  struct Clear {
    void operator()(pg_result* r) const noexcept;
  };
  [[nodiscard]] Status check_cell(int row, int col) const;
  std::unique_ptr<pg_result, Clear> result_;
};

}  // namespace holdfast::pg
