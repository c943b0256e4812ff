/// @file
/// holdfast::sqlite::Statement and Row: a prepared statement and the row it points at.
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

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "holdfast/core/result.hpp"
#include "holdfast/core/status.hpp"

struct sqlite3_stmt;

namespace holdfast::sqlite {

/// SQLite's storage classes (the values of SQLITE_INTEGER ... SQLITE_NULL).
enum class Type : std::uint8_t {
  kInteger = 1,  ///< a 64-bit integer
  kFloat = 2,    ///< an 8-byte IEEE float
  kText = 3,     ///< UTF-8 text
  kBlob = 4,     ///< bytes
  kNull = 5      ///< NULL
};
/// The storage class's name.
[[nodiscard]] std::string_view to_string(Type type) noexcept;

/// Binds SQL NULL.
struct Null {};
/// The value that binds SQL NULL: `st.bind(1, sqlite::null)`.
inline constexpr Null null{};

/// Bytes, bound as a BLOB and read from one.
struct Blob {
  std::span<const std::byte> bytes;  ///< the bytes; they must outlive the binding
};

/// A value bound to a named parameter (":name", "@name", "$name") by the query helpers.
template <class T>
struct Named {
  std::string_view name;  ///< the parameter's name, with its prefix (":id")
  const T& value;         ///< the value, by reference
};
/// A Named value for `name`, for bind_all() and the query helpers.
template <class T>
Named<T> named(std::string_view name, const T& value) noexcept {
  return {name, value};
}

/// What a statement that ran to completion did.
struct Exec {
  std::int64_t changes = 0;            ///< rows inserted, updated or deleted (0 for a read)
  std::int64_t last_insert_rowid = 0;  ///< of the connection, after the statement
};

template <class Derived>
class QueryApi;

namespace detail {
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};
template <class T>
struct is_named : std::false_type {};
template <class T>
struct is_named<Named<T>> : std::true_type {};
template <class>
inline constexpr bool kUnsupported = false;
// The types Row::read() reads (Row::fetch() is compiled for each, in statement.cpp).
template <class U, class... Ts>
inline constexpr bool kOneOf = (std::is_same_v<U, Ts> || ...);
template <class U>
inline constexpr bool kReadable =
    kOneOf<U, bool, char, signed char, unsigned char, wchar_t, char8_t, char16_t, char32_t, short,
           unsigned short, int, unsigned, long, unsigned long, long long, unsigned long long, float,
           double, long double, std::string_view, std::string, Blob, std::vector<std::byte>>;
struct StatementAccess;
}  // namespace detail

/// A view of the current row of a statement. Valid until the statement steps or resets;
/// text and blob views too.
class Row {
 public:
  /// The number of columns.
  [[nodiscard]] int size() const noexcept;
  /// The column's name.
  [[nodiscard]] std::string_view name(int column) const noexcept;
  /// The column's storage class in this row.
  [[nodiscard]] Type type(int column) const noexcept;
  /// True when the column is NULL in this row.
  [[nodiscard]] bool is_null(int column) const noexcept { return type(column) == Type::kNull; }
  /// The column as a 64-bit integer, with SQLite's conversions (NULL reads as 0).
  [[nodiscard]] std::int64_t int64(int column) const noexcept;
  /// The column as a double, with SQLite's conversions (NULL reads as 0).
  [[nodiscard]] double real(int column) const noexcept;
  /// The column as text, with SQLite's conversions (NULL reads as "").
  [[nodiscard]] std::string_view text(int column) const noexcept;
  /// The column as bytes (NULL reads as empty).
  [[nodiscard]] std::span<const std::byte> blob(int column) const noexcept;

  /// The column as T with SQLite's own conversions (NULL reads as 0, "" or std::nullopt).
  /// T: bool, an integer, a floating-point type, std::string(_view), Blob,
  /// std::vector<std::byte>, or std::optional of one.
  template <class T>
  [[nodiscard]] T get(int column) const;

  /// The column as T, checked: a storage class that does not fit T, NULL for a T that is not
  /// std::optional, or an integer out of T's range gives a Status naming the column.
  template <class T>
  [[nodiscard]] Result<T> read(int column) const;
  /// The same into `out` (left as it was on failure).
  template <class T>
  Status read(int column, T& out) const;

 private:
  friend class Statement;
  friend struct detail::StatementAccess;

  // Reads the column into `out`, checked: compiled for each type of detail::kReadable
  // (statement.cpp). A NULL sets *null when null is given (the caller reads a std::optional),
  // else it is a mismatch.
  template <class U>
  Status fetch(int column, U& out, bool* null) const;
  sqlite3_stmt* stmt_ = nullptr;
};

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

  /// Binds `value` to parameter `index` (1-based). On failure (index out of range, integer
  /// that does not fit SQLite's 64 bits) returns a Status naming the parameter.
  template <class T>
  Status bind(int index, const T& value);
  /// Binds by name. An unknown name is a Status naming it.
  template <class T>
  Status bind(std::string_view name, const T& value);
  Status bind(int index, std::string&&) = delete;  ///< would dangle: bind an lvalue
  Status bind(std::string_view name, std::string&&) = delete;

  /// Binds every parameter: plain values by position, Named values by name. The number of
  /// values must equal parameter_count(), else a Status says how many were expected.
  template <class... Args>
  Status bind_all(const Args&... args);

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
  template <class T>
  [[nodiscard]] T column(int index) const {
    return row_.get<T>(index);
  }

 private:
  friend struct detail::StatementAccess;
  template <class Derived>
  friend class QueryApi;

  // step() without the Result: kRow, kDone, or an error code for step_failed().
  static constexpr int kRow = 100;   // SQLITE_ROW
  static constexpr int kDone = 101;  // SQLITE_DONE
  int next() noexcept;

  // Bind and return SQLite's result code (0 is OK); bind() turns a failure into a Status.
  int put_null(int index) noexcept;
  int put_int64(int index, std::int64_t value) noexcept;
  int put_double(int index, double value) noexcept;
  int put_text(int index, std::string_view value) noexcept;
  int put_blob(int index, std::span<const std::byte> value) noexcept;
  template <class T>
  Status put(int index, const T& value);
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

// ---------------------------------------------------------------------------------------
// Templates.

template <class T>
T Row::get(int column) const {
  if constexpr (detail::is_optional<T>::value) {
    if (is_null(column)) return std::nullopt;
    return T(get<typename T::value_type>(column));
  } else if constexpr (std::is_same_v<T, bool>) {
    return int64(column) != 0;
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(int64(column));
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(real(column));
  } else if constexpr (std::is_same_v<T, std::string_view>) {
    return text(column);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return std::string(text(column));
  } else if constexpr (std::is_same_v<T, Blob>) {
    return Blob{blob(column)};
  } else if constexpr (std::is_same_v<T, std::vector<std::byte>>) {
    const auto bytes = blob(column);
    return T(bytes.begin(), bytes.end());
  } else {
    static_assert(detail::kUnsupported<T>, "holdfast::sqlite::Row: cannot read this type");
  }
}

template <class T>
Status Row::read(int column, T& out) const {
  if constexpr (detail::is_optional<T>::value) {
    static_assert(detail::kReadable<typename T::value_type>,
                  "holdfast::sqlite::Row: cannot read this type");
    typename T::value_type value{};
    bool null = false;
    if (Status s = fetch(column, value, &null); !s.ok()) return s;
    if (null) {
      out.reset();
    } else {
      out = std::move(value);
    }
    return Status();
  } else {
    static_assert(detail::kReadable<T>, "holdfast::sqlite::Row: cannot read this type");
    return fetch(column, out, nullptr);
  }
}

template <class T>
Result<T> Row::read(int column) const {
  T value{};
  if (Status s = read(column, value); !s.ok()) return s;
  return value;
}

template <class T>
Status Statement::bind(int index, const T& value) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool> &&
                !(std::is_unsigned_v<T> && sizeof(T) == sizeof(std::int64_t))) {
    // The common case, kept small: one call, and a Status only on failure.
    const int rc = put_int64(index, static_cast<std::int64_t>(value));
    if (rc != 0) [[unlikely]]
      return bind_failed(rc, index);
    return Status();
  } else {
    return put(index, value);
  }
}

template <class T>
Status Statement::put(int index, const T& value) {
  int rc = 0;
  if constexpr (detail::is_optional<T>::value) {
    if (!value.has_value()) {
      rc = put_null(index);
    } else {
      return bind(index, *value);
    }
  } else if constexpr (std::is_same_v<T, Null> || std::is_same_v<T, std::nullptr_t> ||
                       std::is_same_v<T, std::nullopt_t>) {
    rc = put_null(index);
  } else if constexpr (std::is_same_v<T, bool>) {
    rc = put_int64(index, value ? 1 : 0);
  } else if constexpr (std::is_integral_v<T>) {
    static_assert(sizeof(T) <= sizeof(std::int64_t), "integer wider than 64 bits");
    if constexpr (std::is_unsigned_v<T> && sizeof(T) == sizeof(std::int64_t)) {
      if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        return too_large(index);
      }
    }
    rc = put_int64(index, static_cast<std::int64_t>(value));
  } else if constexpr (std::is_floating_point_v<T>) {
    rc = put_double(index, static_cast<double>(value));
  } else if constexpr (std::is_same_v<T, Blob>) {
    rc = put_blob(index, value.bytes);
  } else if constexpr (std::is_same_v<T, std::vector<std::byte>>) {
    rc = put_blob(index, std::span<const std::byte>(value));
  } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    rc = put_text(index, std::string_view(value));
  } else {
    static_assert(detail::kUnsupported<T>,
                  "holdfast::sqlite::Statement: cannot bind this type (use an integer, a "
                  "floating-point number, text, Blob, Null or std::optional of one)");
  }
  if (rc != 0) return bind_failed(rc, index);
  return Status();
}

template <class T>
Status Statement::bind(std::string_view name, const T& value) {
  const int index = parameter_index(name);
  if (index == 0) return unknown_parameter(name);
  return bind(index, value);
}

template <class... Args>
Status Statement::bind_all(const Args&... args) {
  if (parameter_count() != static_cast<int>(sizeof...(Args))) {
    return wrong_parameter_count(sizeof...(Args));
  }
  Status s;
  int index = 0;
  const auto one = [&](const auto& arg) {
    ++index;
    if (!s.ok()) return;
    using A = std::decay_t<decltype(arg)>;
    if constexpr (detail::is_named<A>::value) {
      s = bind(arg.name, arg.value);
    } else {
      s = bind(index, arg);
    }
  };
  (one(args), ...);
  (void)one;
  return s;
}

}  // namespace holdfast::sqlite
