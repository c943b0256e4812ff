/// @file
/// holdfast::pg::Param and Params: a statement's parameters, typed values sent as text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace holdfast::pg {

/// Type OIDs of the parameters we type ourselves (pg_type.dat).
inline constexpr std::uint32_t kOidUnknown = 0;   ///< the server infers the type, like a literal
inline constexpr std::uint32_t kOidBool = 16;     ///< bool
inline constexpr std::uint32_t kOidInt8 = 20;     ///< int8 (bigint)
inline constexpr std::uint32_t kOidInt4 = 23;     ///< int4 (integer)
inline constexpr std::uint32_t kOidText = 25;     ///< text
inline constexpr std::uint32_t kOidFloat8 = 701;  ///< float8 (double precision)

/// One statement parameter: NULL, a bool, an integer, a double or text. Numbers are sent in
/// text form with their type; text is sent untyped so the server infers its type from the
/// statement (like a quoted literal), unless built with Param::typed().
///
/// A Param refers to the text it was built from: that text must outlive the call it is
/// passed to (the usual `conn.query(sql, {a, b})` does).
class Param {
 public:
  /// NULL.
  Param(std::nullptr_t) noexcept : null_(true) {}  // NOLINT(google-explicit-constructor)
  /// A bool ('t' or 'f', typed bool).
  Param(bool v) noexcept;  // NOLINT(google-explicit-constructor)
  /// An integer: int4 for a signed type of at most 4 bytes, otherwise int8.
  template <class I>
  requires(std::is_integral_v<I> && !std::is_same_v<I, bool> && !std::is_same_v<I, char>) Param(I v)
  noexcept {  // NOLINT(google-explicit-constructor)
    if constexpr (std::is_signed_v<I> && sizeof(I) <= 4) {
      set_int(static_cast<long long>(v), kOidInt4);
    } else {
      set_int(static_cast<long long>(v), kOidInt8);
    }
  }
  /// A double (typed float8).
  Param(double v) noexcept;  // NOLINT(google-explicit-constructor)
  /// Text, untyped; nullptr is NULL.
  Param(const char* text) noexcept;  // NOLINT(google-explicit-constructor)
  /// Text, untyped.
  Param(const std::string& text) noexcept;  // NOLINT(google-explicit-constructor)
  /// Text, untyped.
  Param(std::string_view text) noexcept;  // NOLINT(google-explicit-constructor)
  /// The optional's value, or NULL when it has none.
  template <class T>
  Param(const std::optional<T>& v) noexcept  // NOLINT(google-explicit-constructor)
      : Param(v ? Param(*v) : Param(nullptr)) {}

  /// Text with an explicit type ("{\"a\":1}" as json, a transaction id as xid8, ...).
  static Param typed(std::string_view text, std::uint32_t oid) noexcept;

  /// True for NULL.
  [[nodiscard]] bool is_null() const noexcept { return null_; }
  /// The type sent with the value; kOidUnknown for untyped text.
  [[nodiscard]] std::uint32_t oid() const noexcept { return oid_; }
  /// The text form. NUL-terminated when terminated() is true.
  [[nodiscard]] std::string_view text() const noexcept {
    return inline_ ? std::string_view(buf_, length_) : std::string_view(ext_, length_);
  }
  /// True when text() is followed by a NUL.
  [[nodiscard]] bool terminated() const noexcept { return terminated_; }

 private:
  Param() noexcept = default;
  void set_int(long long v, std::uint32_t oid) noexcept;

  const char* ext_ = nullptr;
  std::uint32_t length_ = 0;
  std::uint32_t oid_ = kOidUnknown;
  bool null_ = false;
  bool inline_ = false;
  bool terminated_ = false;
  char buf_[32] = {};
};

/// The parameters of one statement: a braced list (`db.read(sql, {day, court})`), a span, or
/// a contiguous container of Param. A view: what it was built from must outlive the call.
class Params : public std::span<const Param> {
 public:
  Params() noexcept = default;
  /// A braced list of values.
  Params(std::initializer_list<Param> list) noexcept  // NOLINT(google-explicit-constructor)
      : span(list.begin(), list.size()) {}
  /// A std::span, std::vector or array of Param.
  template <class R>
  requires(!std::is_same_v<std::remove_cvref_t<R>, Params> &&
           std::is_convertible_v<R&&, std::span<const Param>>) Params(R&& range)
  noexcept  // NOLINT(google-explicit-constructor)
      : span(std::forward<R>(range)) {}
};

}  // namespace holdfast::pg
