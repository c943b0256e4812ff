/// @file
/// holdfast::sqlite::Row and the values the SQLite driver binds and reads: the storage
/// classes (Type), Null, Blob, Named parameters and Exec.
///
/// Text and blobs are bound without copying: they must stay valid until the statement has
/// run. A Row is valid until its statement steps or resets; its text and blob views too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
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

class Statement;  // holdfast/sqlite/statement.hpp

namespace detail {
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};
template <class T>
struct is_named : std::false_type {};
template <class T>
struct is_named<Named<T>> : std::true_type {};
// The types a Row reads, and std::optional of one (compiled for each, in statement.cpp).
template <class U, class... Ts>
inline constexpr bool kOneOf = (std::is_same_v<U, Ts> || ...);
template <class U>
inline constexpr bool kPlain =
    kOneOf<U, bool, char, signed char, unsigned char, wchar_t, char8_t, char16_t, char32_t, short,
           unsigned short, int, unsigned, long, unsigned long, long long, unsigned long long, float,
           double, long double, std::string_view, std::string, Blob, std::vector<std::byte>>;
template <class T>
struct Readable : std::bool_constant<kPlain<T>> {};
template <class T>
struct Readable<std::optional<T>> : std::bool_constant<kPlain<T>> {};
template <class T>
concept readable = Readable<T>::value;

// One value to bind, whatever its C++ type: the binding itself is compiled (statement.cpp).
struct Value {
  enum class Kind : std::uint8_t { kNull, kInt64, kUint64, kDouble, kText, kBlob };
  union {
    std::int64_t integer = 0;  // kInt64; kUint64 as its bits (checked when bound)
    double real;               // kDouble
    const void* data;          // kText, kBlob
  };
  std::size_t size = 0;   // kText, kBlob
  std::string_view name;  // a Named value's parameter; empty: by position
  Kind kind = Kind::kNull;
};

template <class T>
Value value_of(const T& v) noexcept {
  Value out;
  if constexpr (is_named<T>::value) {
    out = value_of(v.value);
    out.name = v.name;
  } else if constexpr (is_optional<T>::value) {
    if (v.has_value()) out = value_of(*v);
  } else if constexpr (std::is_integral_v<T>) {
    static_assert(sizeof(T) <= sizeof(std::int64_t), "integer wider than 64 bits");
    const bool wide = std::is_unsigned_v<T> && sizeof(T) == sizeof(std::int64_t);
    out.kind = wide ? Value::Kind::kUint64 : Value::Kind::kInt64;
    out.integer = static_cast<std::int64_t>(v);
  } else if constexpr (std::is_floating_point_v<T>) {
    out.kind = Value::Kind::kDouble;
    out.real = static_cast<double>(v);
  } else if constexpr (std::is_same_v<T, Blob>) {
    out = value_of(v.bytes);
  } else if constexpr (std::is_convertible_v<const T&, std::span<const std::byte>>) {
    out.kind = Value::Kind::kBlob;
    out.data = std::span<const std::byte>(v).data();
    out.size = std::span<const std::byte>(v).size();
  } else if constexpr (!kOneOf<T, Null, std::nullptr_t, std::nullopt_t>) {  // those bind NULL
    static_assert(std::is_convertible_v<const T&, std::string_view>,
                  "holdfast::sqlite: cannot bind this type (use an integer, a floating-point "
                  "number, text, Blob, Null or std::optional of one)");
    const std::string_view text(v);
    out.kind = Value::Kind::kText;
    out.data = text.data();
    out.size = text.size();
  }
  return out;
}
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
  template <detail::readable T>
  [[nodiscard]] T get(int column) const;

  /// The column as T (the types of get()), checked: a storage class that does not fit T,
  /// NULL for a T that is not std::optional, or an integer out of T's range gives a Status
  /// naming the column.
  template <detail::readable T>
  [[nodiscard]] Result<T> read(int column) const {
    T value{};
    if (Status s = read(column, value); !s.ok()) return s;
    return value;
  }
  /// The same into `out` (left as it was on failure).
  template <detail::readable T>
  Status read(int column, T& out) const;

 private:
  friend class Statement;
  friend struct detail::StatementAccess;
  sqlite3_stmt* stmt_ = nullptr;
};

}  // namespace holdfast::sqlite
