// Param and Rows: what a statement sends and what it returns.
#include <libpq-fe.h>

#include <charconv>
#include <cstring>
#include <limits>
#include <string>

#include "connection_impl.hpp"
#include "holdfast/pg/connection.hpp"

namespace holdfast::pg {

// ---------------------------------------------------------------------------------------
// Param

Param::Param(bool v) noexcept : oid_(kOidBool), inline_(true), terminated_(true) {
  buf_[0] = v ? 't' : 'f';
  buf_[1] = '\0';
  length_ = 1;
}

void Param::set_int(long long v, std::uint32_t oid) noexcept {
  oid_ = oid;
  inline_ = true;
  terminated_ = true;
  const auto r = std::to_chars(buf_, buf_ + sizeof(buf_) - 1, v);
  *r.ptr = '\0';
  length_ = static_cast<std::uint32_t>(r.ptr - buf_);
}

Param::Param(double v) noexcept : oid_(kOidFloat8), inline_(true), terminated_(true) {
  const auto r = std::to_chars(buf_, buf_ + sizeof(buf_) - 1, v);
  *r.ptr = '\0';
  length_ = static_cast<std::uint32_t>(r.ptr - buf_);
}

Param::Param(const char* text) noexcept : ext_(text), terminated_(true) {
  if (text == nullptr) {
    null_ = true;
  } else {
    length_ = static_cast<std::uint32_t>(std::strlen(text));
  }
}

Param::Param(const std::string& text) noexcept
    : ext_(text.c_str()), length_(static_cast<std::uint32_t>(text.size())), terminated_(true) {}

Param::Param(std::string_view text) noexcept
    : ext_(text.data()), length_(static_cast<std::uint32_t>(text.size())) {}

Param Param::typed(std::string_view text, std::uint32_t oid) noexcept {
  Param p(text);
  p.oid_ = oid;
  return p;
}

// ---------------------------------------------------------------------------------------
// Rows

void Rows::Clear::operator()(pg_result* r) const noexcept {
  PQclear(r);
}

int Rows::size() const noexcept {
  return result_ ? PQntuples(result_.get()) : 0;
}
int Rows::columns() const noexcept {
  return result_ ? PQnfields(result_.get()) : 0;
}

std::string_view Rows::column_name(int col) const noexcept {
  if (col < 0 || col >= columns()) return {};
  return or_empty(PQfname(result_.get(), col));
}

int Rows::column(std::string_view name) const noexcept {
  for (int c = 0; c < columns(); ++c) {
    if (column_name(c) == name) return c;
  }
  return -1;
}

bool Rows::is_null(int row, int col) const noexcept {
  if (row < 0 || row >= size() || col < 0 || col >= columns()) return true;
  return PQgetisnull(result_.get(), row, col) != 0;
}

std::string_view Rows::text(int row, int col) const noexcept {
  if (row < 0 || row >= size() || col < 0 || col >= columns()) return {};
  return std::string_view(PQgetvalue(result_.get(), row, col),
                          static_cast<std::size_t>(PQgetlength(result_.get(), row, col)));
}

Status Rows::check_cell(int row, int col) const {
  if (row < 0 || row >= size()) {
    return Status(Code::kOutOfRange, "row " + std::to_string(row) + " does not exist (" +
                                         std::to_string(size()) + " rows)");
  }
  if (col < 0 || col >= columns()) {
    return Status(Code::kOutOfRange, "column " + std::to_string(col) + " does not exist (" +
                                         std::to_string(columns()) + " columns)");
  }
  if (PQgetisnull(result_.get(), row, col) != 0) {
    return Status(Code::kFailedPrecondition, "column " + std::string(column_name(col)) +
                                                 " is NULL in row " + std::to_string(row));
  }
  return Status();
}

namespace {
template <class T>
Result<T> parse_number(const Rows& rows, int row, int col, std::string_view text) {
  T v{};
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (r.ec == std::errc::result_out_of_range) {
    return Status(Code::kOutOfRange, "column " + std::string(rows.column_name(col)) + " value '" +
                                         std::string(text) + "' is out of range");
  }
  if (r.ec != std::errc() || r.ptr != text.data() + text.size()) {
    return Status(Code::kInvalidArgument,
                  "column " + std::string(rows.column_name(col)) + " value '" + std::string(text) +
                      "' is not a number of the requested type (row " + std::to_string(row) + ")");
  }
  return v;
}
}  // namespace

Result<long long> Rows::int64(int row, int col) const {
  if (Status s = check_cell(row, col); !s.ok()) return s;
  return parse_number<long long>(*this, row, col, text(row, col));
}

Result<int> Rows::int32(int row, int col) const {
  if (Status s = check_cell(row, col); !s.ok()) return s;
  return parse_number<int>(*this, row, col, text(row, col));
}

Result<double> Rows::float64(int row, int col) const {
  if (Status s = check_cell(row, col); !s.ok()) return s;
  const std::string_view t = text(row, col);
  if (t == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (t == "Infinity") return std::numeric_limits<double>::infinity();
  if (t == "-Infinity") return -std::numeric_limits<double>::infinity();
  return parse_number<double>(*this, row, col, t);
}

Result<bool> Rows::boolean(int row, int col) const {
  if (Status s = check_cell(row, col); !s.ok()) return s;
  const std::string_view t = text(row, col);
  if (t == "t") return true;
  if (t == "f") return false;
  return Status(Code::kInvalidArgument, "column " + std::string(column_name(col)) + " value '" +
                                            std::string(t) + "' is not a boolean");
}

Result<std::string> Rows::string(int row, int col) const {
  if (Status s = check_cell(row, col); !s.ok()) return s;
  return std::string(text(row, col));
}

long long Rows::affected() const noexcept {
  if (!result_) return 0;
  const char* n = PQcmdTuples(result_.get());
  long long v = 0;
  if (n != nullptr) std::from_chars(n, n + std::strlen(n), v);
  return v;
}

std::string_view Rows::command() const noexcept {
  return result_ ? or_empty(PQcmdStatus(result_.get())) : std::string_view();
}

}  // namespace holdfast::pg
