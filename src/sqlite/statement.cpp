#include <sqlite3.h>

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "connection.hpp"
#include "database_impl.hpp"
#include "holdfast/core/classify.hpp"
#include "holdfast/sqlite/statement.hpp"

namespace holdfast::sqlite {

std::string_view to_string(Type type) noexcept {
  switch (type) {
    case Type::kInteger:
      return "INTEGER";
    case Type::kFloat:
      return "FLOAT";
    case Type::kText:
      return "TEXT";
    case Type::kBlob:
      return "BLOB";
    case Type::kNull:
      return "NULL";
  }
  return "?";
}

// --- Row -----------------------------------------------------------------------------

int Row::size() const noexcept {
  return sqlite3_column_count(stmt_);
}

std::string_view Row::name(int column) const noexcept {
  const char* n = sqlite3_column_name(stmt_, column);
  return n != nullptr ? std::string_view(n) : std::string_view();
}

Type Row::type(int column) const noexcept {
  return static_cast<Type>(sqlite3_column_type(stmt_, column));
}

std::int64_t Row::int64(int column) const noexcept {
  return sqlite3_column_int64(stmt_, column);
}

double Row::real(int column) const noexcept {
  return sqlite3_column_double(stmt_, column);
}

std::string_view Row::text(int column) const noexcept {
  const unsigned char* p = sqlite3_column_text(stmt_, column);
  const int n = sqlite3_column_bytes(stmt_, column);
  if (p == nullptr) return {};
  return {reinterpret_cast<const char*>(p), static_cast<std::size_t>(n)};
}

std::span<const std::byte> Row::blob(int column) const noexcept {
  const void* p = sqlite3_column_blob(stmt_, column);
  const int n = sqlite3_column_bytes(stmt_, column);
  if (p == nullptr) return {};
  return {static_cast<const std::byte*>(p), static_cast<std::size_t>(n)};
}

namespace {

// One look at the column: its storage class, and its value when the class fits.
// sqlite3_column_value() hands out an "unprotected" value, which SQLite only promises to be
// safe when nothing else uses the connection at the same time. Our connections are opened
// SQLITE_OPEN_NOMUTEX and used by one thread at a time, so one look at the column serves
// both its class and its value.
Type integer_cell(sqlite3_stmt* stmt, int column, std::int64_t& out) noexcept {
  sqlite3_value* v = sqlite3_column_value(stmt, column);
  const int t = sqlite3_value_type(v);
  if (t == SQLITE_INTEGER) out = sqlite3_value_int64(v);
  return static_cast<Type>(t);
}

Type number_cell(sqlite3_stmt* stmt, int column, double& out) noexcept {
  sqlite3_value* v = sqlite3_column_value(stmt, column);
  const int t = sqlite3_value_type(v);
  if (t == SQLITE_INTEGER || t == SQLITE_FLOAT) out = sqlite3_value_double(v);
  return static_cast<Type>(t);
}

Type text_cell(const Row& row, sqlite3_stmt* stmt, int column, std::string_view& out) noexcept {
  const int t = sqlite3_column_type(stmt, column);
  if (t == SQLITE_TEXT) out = row.text(column);
  return static_cast<Type>(t);
}

Type blob_cell(const Row& row, sqlite3_stmt* stmt, int column,
               std::span<const std::byte>& out) noexcept {
  const int t = sqlite3_column_type(stmt, column);
  if (t == SQLITE_BLOB) out = row.blob(column);
  return static_cast<Type>(t);
}

Status mismatch(const Row& row, sqlite3_stmt* stmt, int column, std::string_view wanted) {
  const std::string index = std::to_string(column);
  const char* sql = sqlite3_sql(stmt);
  const std::string_view in = sql != nullptr ? detail::sql_excerpt(sql) : std::string_view();
  if (column < 0 || column >= row.size()) {
    return sqlite_status(
        SQLITE_RANGE, detail::cat({"column ", index, " does not exist in '", in, "' (it returns ",
                                   std::to_string(row.size()), " columns)"}));
  }
  return sqlite_status(SQLITE_MISMATCH, detail::cat({"column ", index, " ('", row.name(column),
                                                     "') holds ", to_string(row.type(column)),
                                                     ", not ", wanted, ", in '", in, "'"}));
}

// The Status for a column whose class `has` is not `wanted` (or OK for an allowed NULL).
Status not_a(const Row& row, sqlite3_stmt* stmt, int column, Type has, bool* null,
             std::string_view wanted) {
  if (has == Type::kNull) {
    if (null != nullptr) {
      *null = true;
      return Status();
    }
    return mismatch(row, stmt, column, "a value (read a nullable column as std::optional)");
  }
  return mismatch(row, stmt, column, wanted);
}

// Reads the column into `out`, checked. A NULL sets *null when null is given (the caller
// reads a std::optional), else it is a mismatch.
template <class U>
Status fetch(const Row& row, sqlite3_stmt* stmt, int column, U& out, bool* null) {
  if constexpr (std::is_integral_v<U>) {
    std::int64_t v = 0;
    const Type t = integer_cell(stmt, column, v);
    if (t != Type::kInteger) [[unlikely]]
      return not_a(row, stmt, column, t, null, "an integer");
    if constexpr (std::is_same_v<U, bool>) {
      out = v != 0;
      return Status();
    } else if constexpr (std::is_signed_v<U> && sizeof(U) < sizeof(std::int64_t)) {
      if (v < std::numeric_limits<U>::min() || v > std::numeric_limits<U>::max()) {
        return mismatch(row, stmt, column, "an integer in the range of the requested type");
      }
    } else if constexpr (std::is_unsigned_v<U>) {
      if (v < 0 || static_cast<std::uint64_t>(v) > std::numeric_limits<U>::max()) {
        return mismatch(row, stmt, column, "an integer in the range of the requested type");
      }
    }
    out = static_cast<U>(v);
    return Status();
  } else if constexpr (std::is_floating_point_v<U>) {
    double v = 0;
    const Type t = number_cell(stmt, column, v);
    if (t != Type::kInteger && t != Type::kFloat)
      return not_a(row, stmt, column, t, null, "a number");
    out = static_cast<U>(v);
    return Status();
  } else if constexpr (std::is_same_v<U, std::string_view> || std::is_same_v<U, std::string>) {
    std::string_view v;
    const Type t = text_cell(row, stmt, column, v);
    if (t != Type::kText) return not_a(row, stmt, column, t, null, "text");
    out = U(v);
    return Status();
  } else {
    static_assert(std::is_same_v<U, Blob> || std::is_same_v<U, std::vector<std::byte>>);
    std::span<const std::byte> v;
    const Type t = blob_cell(row, stmt, column, v);
    if (t != Type::kBlob) return not_a(row, stmt, column, t, null, "a blob");
    if constexpr (std::is_same_v<U, Blob>) {
      out = Blob{v};
    } else {
      out.assign(v.begin(), v.end());
    }
    return Status();
  }
}

// The column as T with SQLite's own conversions (Row::get()).
template <class T>
T convert(const Row& row, int column) {
  if constexpr (std::is_same_v<T, bool>) {
    return row.int64(column) != 0;
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(row.int64(column));
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(row.real(column));
  } else if constexpr (std::is_same_v<T, std::string_view>) {
    return row.text(column);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return std::string(row.text(column));
  } else if constexpr (std::is_same_v<T, Blob>) {
    return Blob{row.blob(column)};
  } else {
    static_assert(std::is_same_v<T, std::vector<std::byte>>);
    const auto bytes = row.blob(column);
    return T(bytes.begin(), bytes.end());
  }
}

}  // namespace

template <detail::readable T>
T Row::get(int column) const {
  if constexpr (detail::is_optional<T>::value) {
    if (is_null(column)) return std::nullopt;
    return T(convert<typename T::value_type>(*this, column));
  } else {
    return convert<T>(*this, column);
  }
}

template <detail::readable T>
Status Row::read(int column, T& out) const {
  if constexpr (detail::is_optional<T>::value) {
    typename T::value_type value{};
    bool null = false;
    if (Status s = fetch(*this, stmt_, column, value, &null); !s.ok()) return s;
    if (null) {
      out.reset();
    } else {
      out = std::move(value);
    }
    return Status();
  } else {
    return fetch(*this, stmt_, column, out, nullptr);
  }
}

// Row::get() and Row::read() for every type of detail::readable.
#define HOLDFAST_ROW_READS(T)                                      \
  template T Row::get<T>(int) const;                               \
  template std::optional<T> Row::get<std::optional<T>>(int) const; \
  template Status Row::read<T>(int, T&) const;                     \
  template Status Row::read<std::optional<T>>(int, std::optional<T>&) const;
HOLDFAST_ROW_READS(bool)
HOLDFAST_ROW_READS(char)
HOLDFAST_ROW_READS(signed char)
HOLDFAST_ROW_READS(unsigned char)
HOLDFAST_ROW_READS(wchar_t)
HOLDFAST_ROW_READS(char8_t)
HOLDFAST_ROW_READS(char16_t)
HOLDFAST_ROW_READS(char32_t)
HOLDFAST_ROW_READS(short)
HOLDFAST_ROW_READS(unsigned short)
HOLDFAST_ROW_READS(int)
HOLDFAST_ROW_READS(unsigned)
HOLDFAST_ROW_READS(long)
HOLDFAST_ROW_READS(unsigned long)
HOLDFAST_ROW_READS(long long)
HOLDFAST_ROW_READS(unsigned long long)
HOLDFAST_ROW_READS(float)
HOLDFAST_ROW_READS(double)
HOLDFAST_ROW_READS(long double)
HOLDFAST_ROW_READS(std::string_view)
HOLDFAST_ROW_READS(std::string)
HOLDFAST_ROW_READS(Blob)
HOLDFAST_ROW_READS(std::vector<std::byte>)
#undef HOLDFAST_ROW_READS

// --- Statement -----------------------------------------------------------------------

Statement::Statement(Statement&& other) noexcept
    : parameter_count_(other.parameter_count_),
      owned_(other.owned_),
      in_transaction_(other.in_transaction_),
      binds_references_(other.binds_references_) {
  row_.stmt_ = other.row_.stmt_;
  other.row_.stmt_ = nullptr;
}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    release();
    row_.stmt_ = other.row_.stmt_;
    other.row_.stmt_ = nullptr;
    parameter_count_ = other.parameter_count_;
    owned_ = other.owned_;
    in_transaction_ = other.in_transaction_;
    binds_references_ = other.binds_references_;
  }
  return *this;
}

Statement::~Statement() {
  release();
}

void Statement::release() noexcept {
  sqlite3_stmt* stmt = row_.stmt_;
  if (stmt == nullptr) return;
  row_.stmt_ = nullptr;
  parameter_count_ = -1;
  if (owned_) {
    sqlite3_finalize(stmt);
    return;
  }
  sqlite3_reset(stmt);
  // Text bound by reference would dangle in the cache; integers may stay.
  if (binds_references_) sqlite3_clear_bindings(stmt);
}

std::string_view Statement::sql() const noexcept {
  const char* s = valid() ? sqlite3_sql(row_.stmt_) : nullptr;
  return s != nullptr ? std::string_view(s) : std::string_view();
}

int Statement::count_parameters() const noexcept {
  return sqlite3_bind_parameter_count(row_.stmt_);
}

int Statement::parameter_index(std::string_view name) const {
  char small[64];
  if (name.size() < sizeof(small)) {
    name.copy(small, name.size());
    small[name.size()] = '\0';
    return sqlite3_bind_parameter_index(row_.stmt_, small);
  }
  const std::string copy(name);
  return sqlite3_bind_parameter_index(row_.stmt_, copy.c_str());
}

bool Statement::readonly() const noexcept {
  return sqlite3_stmt_readonly(row_.stmt_) != 0;
}

Status Statement::bind_failed(int rc, int index) const {
  sqlite3* db = sqlite3_db_handle(row_.stmt_);
  return sqlite_status(rc, detail::cat({"cannot bind parameter ", std::to_string(index), " of '",
                                        detail::sql_excerpt(sql()), "': ", sqlite3_errmsg(db)}));
}

namespace {

// Binds one value; SQLite's result code (SQLITE_OK, or a failure for Statement::bind_failed()).
// Text and blobs are bound by reference, and *references says so.
int bind_one(sqlite3_stmt* stmt, int index, const detail::Value& value, bool* references) {
  using K = detail::Value::Kind;
  switch (value.kind) {
    case K::kInt64:
    case K::kUint64:  // checked by the caller
      return sqlite3_bind_int64(stmt, index, value.integer);
    case K::kDouble:
      return sqlite3_bind_double(stmt, index, value.real);
    case K::kText:
      *references = true;
      // A null pointer would bind NULL, not "".
      return sqlite3_bind_text64(stmt, index,
                                 value.data != nullptr ? static_cast<const char*>(value.data) : "",
                                 value.size, SQLITE_STATIC, SQLITE_UTF8);
    case K::kBlob:
      *references = true;
      return value.data != nullptr
                 ? sqlite3_bind_blob64(stmt, index, value.data, value.size, SQLITE_STATIC)
                 : sqlite3_bind_zeroblob(stmt, index, 0);
    case K::kNull:
      break;
  }
  return sqlite3_bind_null(stmt, index);
}

}  // namespace

Status Statement::bind_value(int index, const detail::Value& value) {
  // A 64-bit unsigned integer above INT64_MAX reads as negative bits.
  if (value.kind == detail::Value::Kind::kUint64 && value.integer < 0) [[unlikely]]
    return too_large(index);
  const int rc = bind_one(row_.stmt_, index, value, &binds_references_);
  if (rc != SQLITE_OK) [[unlikely]]
    return bind_failed(rc, index);
  return Status();
}

Status Statement::bind_value(std::string_view name, const detail::Value& value) {
  const int index = parameter_index(name);
  if (index == 0) return unknown_parameter(name);
  return bind_value(index, value);
}

Status Statement::bind_values(std::span<const detail::Value> values) {
  if (parameter_count() != static_cast<int>(values.size())) [[unlikely]]
    return wrong_parameter_count(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const detail::Value& v = values[i];
    const int index = static_cast<int>(i) + 1;
    // The common case in one call: a value by position that SQLite takes.
    if (v.name.empty() && v.kind != detail::Value::Kind::kUint64 &&
        bind_one(row_.stmt_, index, v, &binds_references_) == SQLITE_OK) [[likely]]
      continue;
    Status s = v.name.empty() ? bind_value(index, v) : bind_value(v.name, v);
    if (!s.ok()) return s;
  }
  return Status();
}

Status Statement::unknown_parameter(std::string_view name) const {
  return sqlite_status(SQLITE_RANGE, detail::cat({"no parameter named '", name, "' in '",
                                                  detail::sql_excerpt(sql()), "'"}));
}

Status Statement::wrong_parameter_count(std::size_t given) const {
  const int want = parameter_count();
  return sqlite_status(
      SQLITE_RANGE,
      detail::cat({"'", detail::sql_excerpt(sql()), "' has ", std::to_string(want),
                   want == 1 ? " parameter, " : " parameters, ", std::to_string(given),
                   given == 1 ? " value was given" : " values were given"}));
}

Status Statement::too_large(int index) const {
  return sqlite_status(
      SQLITE_MISMATCH,
      detail::cat({"the value for parameter ", std::to_string(index), " of '",
                   detail::sql_excerpt(sql()), "' does not fit SQLite's signed 64-bit integer"}));
}

Result<bool> Statement::step() {
  const int rc = sqlite3_step(row_.stmt_);
  if (rc == SQLITE_ROW) [[likely]]
    return true;
  if (rc == SQLITE_DONE) return false;
  return step_failed(rc);
}

Status Statement::step_failed(int rc) {
  sqlite3* db = sqlite3_db_handle(row_.stmt_);
  int code = rc;
  if (code == (code & 0xff)) {
    const int ext = sqlite3_extended_errcode(db);
    if ((ext & 0xff) == code) code = ext;
  }
  Status s =
      sqlite_status(code, detail::cat({detail::sql_excerpt(sql()), ": ", sqlite3_errmsg(db)}));
  if (in_transaction_) {
    s.with_txn_state(sqlite3_get_autocommit(db) != 0 ? TxnState::kRolledBack
                                                     : TxnState::kStillOpen);
  }
  return s;
}

Result<Exec> Statement::run() {
  for (;;) {
    Result<bool> more = step();
    if (!more.ok()) return more.status();
    if (!*more) break;
  }
  sqlite3* db = sqlite3_db_handle(row_.stmt_);
  Exec e;
  e.changes = readonly() ? 0 : sqlite3_changes64(db);
  e.last_insert_rowid = sqlite3_last_insert_rowid(db);
  return e;
}

void Statement::reset() noexcept {
  sqlite3_reset(row_.stmt_);
}

void Statement::clear_bindings() noexcept {
  sqlite3_clear_bindings(row_.stmt_);
  binds_references_ = false;
}

// --- The query helpers' steps ----------------------------------------------------------

namespace detail {

Status next_row(Statement& st, const Row*& row) {
  const int rc = sqlite3_step(StatementAccess::handle(st));
  if (rc == SQLITE_ROW) [[likely]] {
    row = &st.row();
    return Status();
  }
  row = nullptr;
  if (rc == SQLITE_DONE) return Status();
  return StatementAccess::step_failed(st, rc);
}

Status first_row(Statement& st, std::span<const Value> values, const Row*& row) {
  row = nullptr;
  if (Status s = StatementAccess::bind_values(st, values); !s.ok()) [[unlikely]]
    return s;
  return next_row(st, row);
}

Result<Exec> execute(Statement& st, std::span<const Value> values) {
  if (Status s = StatementAccess::bind_values(st, values); !s.ok()) return s;
  return st.run();
}

}  // namespace detail

}  // namespace holdfast::sqlite
