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

}  // namespace

template <class U>
Status Row::fetch(int column, U& out, bool* null) const {
  if constexpr (std::is_integral_v<U>) {
    std::int64_t v = 0;
    const Type t = integer_cell(stmt_, column, v);
    if (t != Type::kInteger) [[unlikely]]
      return not_a(*this, stmt_, column, t, null, "an integer");
    if constexpr (std::is_same_v<U, bool>) {
      out = v != 0;
      return Status();
    } else if constexpr (std::is_signed_v<U> && sizeof(U) < sizeof(std::int64_t)) {
      if (v < std::numeric_limits<U>::min() || v > std::numeric_limits<U>::max()) {
        return mismatch(*this, stmt_, column, "an integer in the range of the requested type");
      }
    } else if constexpr (std::is_unsigned_v<U>) {
      if (v < 0 || static_cast<std::uint64_t>(v) > std::numeric_limits<U>::max()) {
        return mismatch(*this, stmt_, column, "an integer in the range of the requested type");
      }
    }
    out = static_cast<U>(v);
    return Status();
  } else if constexpr (std::is_floating_point_v<U>) {
    double v = 0;
    const Type t = number_cell(stmt_, column, v);
    if (t != Type::kInteger && t != Type::kFloat)
      return not_a(*this, stmt_, column, t, null, "a number");
    out = static_cast<U>(v);
    return Status();
  } else if constexpr (std::is_same_v<U, std::string_view> || std::is_same_v<U, std::string>) {
    std::string_view v;
    const Type t = text_cell(*this, stmt_, column, v);
    if (t != Type::kText) return not_a(*this, stmt_, column, t, null, "text");
    out = U(v);
    return Status();
  } else {
    static_assert(std::is_same_v<U, Blob> || std::is_same_v<U, std::vector<std::byte>>);
    std::span<const std::byte> v;
    const Type t = blob_cell(*this, stmt_, column, v);
    if (t != Type::kBlob) return not_a(*this, stmt_, column, t, null, "a blob");
    if constexpr (std::is_same_v<U, Blob>) {
      out = Blob{v};
    } else {
      out.assign(v.begin(), v.end());
    }
    return Status();
  }
}

// Every type of detail::kReadable.
template Status Row::fetch(int, bool&, bool*) const;
template Status Row::fetch(int, char&, bool*) const;
template Status Row::fetch(int, signed char&, bool*) const;
template Status Row::fetch(int, unsigned char&, bool*) const;
template Status Row::fetch(int, wchar_t&, bool*) const;
template Status Row::fetch(int, char8_t&, bool*) const;
template Status Row::fetch(int, char16_t&, bool*) const;
template Status Row::fetch(int, char32_t&, bool*) const;
template Status Row::fetch(int, short&, bool*) const;
template Status Row::fetch(int, unsigned short&, bool*) const;
template Status Row::fetch(int, int&, bool*) const;
template Status Row::fetch(int, unsigned&, bool*) const;
template Status Row::fetch(int, long&, bool*) const;
template Status Row::fetch(int, unsigned long&, bool*) const;
template Status Row::fetch(int, long long&, bool*) const;
template Status Row::fetch(int, unsigned long long&, bool*) const;
template Status Row::fetch(int, float&, bool*) const;
template Status Row::fetch(int, double&, bool*) const;
template Status Row::fetch(int, long double&, bool*) const;
template Status Row::fetch(int, std::string_view&, bool*) const;
template Status Row::fetch(int, std::string&, bool*) const;
template Status Row::fetch(int, Blob&, bool*) const;
template Status Row::fetch(int, std::vector<std::byte>&, bool*) const;

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

int Statement::put_null(int index) noexcept {
  return sqlite3_bind_null(row_.stmt_, index);
}

int Statement::put_int64(int index, std::int64_t value) noexcept {
  return sqlite3_bind_int64(row_.stmt_, index, value);
}

int Statement::put_double(int index, double value) noexcept {
  return sqlite3_bind_double(row_.stmt_, index, value);
}

int Statement::put_text(int index, std::string_view value) noexcept {
  // A null pointer would bind NULL, not "".
  const char* data = value.data() != nullptr ? value.data() : "";
  binds_references_ = true;
  return sqlite3_bind_text64(row_.stmt_, index, data, value.size(), SQLITE_STATIC, SQLITE_UTF8);
}

int Statement::put_blob(int index, std::span<const std::byte> value) noexcept {
  binds_references_ = true;
  return value.data() != nullptr
             ? sqlite3_bind_blob64(row_.stmt_, index, value.data(), value.size(), SQLITE_STATIC)
             : sqlite3_bind_zeroblob(row_.stmt_, index, 0);
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

int Statement::next() noexcept {
  static_assert(kRow == SQLITE_ROW && kDone == SQLITE_DONE);
  return sqlite3_step(row_.stmt_);
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

}  // namespace holdfast::sqlite
