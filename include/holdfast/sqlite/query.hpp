/// @file
/// holdfast::sqlite::Query (SQL prepared and judged read or write once by the engine, ADR
/// 0002), its AccessVerdict, and QueryApi: the query helpers of every SQLite handle.
///
/// @code
///   Result<Query> games = db.prepare("SELECT id, court FROM games WHERE day = ?");
///   auto rows = db.query<std::int64_t, std::string>(*games, day);   // vector<tuple<...>>
///   auto done = db.execute("INSERT INTO payments(user, cents) VALUES (?, ?)", user, cents);
/// @endcode
/// Every helper takes a Query or SQL text (QueryRef); text is looked up in a cache.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
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
#include "holdfast/detail/run_attempts.hpp"
#include "holdfast/sqlite/row.hpp"

/// The SQLite driver: options, statements, queries, the Database and its resilient form
/// (see sqlite.hpp).
namespace holdfast::sqlite {

/// Whether a statement runs as a read (on a read connection) or a write (on the writer).
enum class Access : std::uint8_t {
  kRead,  ///< a read: runs on a read connection
  kWrite  ///< a write: runs on the writer connection
};

/// Why a statement is a read or a write.
enum class Effect : std::uint8_t {
  kRead,                ///< one statement, read-only by the engine's verdict
  kExplain,             ///< EXPLAIN: describes a statement without running it
  kWrite,               ///< the engine says it may change the database
  kTransactionControl,  ///< BEGIN, COMMIT, END, ROLLBACK
  kSavepoint,           ///< SAVEPOINT, RELEASE, ROLLBACK TO
  kConnectionState,     ///< ATTACH, DETACH
  kPragmaSetting,       ///< a PRAGMA with an argument: may change the connection
  kMultipleStatements,  ///< more SQL follows the first statement
  kPragmaThatWrites,    ///< a PRAGMA the engine calls read-only that writes (optimize: ANALYZE)
};

/// "read" or "write".
[[nodiscard]] std::string_view to_string(Access access) noexcept;
/// The effect's short name ("read", "explain", ...).
[[nodiscard]] std::string_view to_string(Effect effect) noexcept;
/// One sentence saying why a statement with this effect is a read or a write.
[[nodiscard]] std::string_view describe(Effect effect) noexcept;

/// The engine's read/write verdict on one statement, and why.
struct AccessVerdict {
  Access access = Access::kWrite;  ///< read or write
  Effect effect = Effect::kWrite;  ///< why
  /// One sentence saying why (describe(effect)).
  [[nodiscard]] std::string_view reason() const noexcept { return describe(effect); }
  /// Equal when access and effect are.
  friend bool operator==(const AccessVerdict&, const AccessVerdict&) = default;
};

namespace detail {
struct QueryInfo;  // what the Database knows of the SQL (src/sqlite/query_info.hpp)
struct QueryAccess;
}  // namespace detail

/// SQL prepared and judged by one Database. Cheap to copy; valid as long as you keep
/// it (using it with another Database is an error Status).
class Query {
 public:
  Query() noexcept = default;

  /// True for a Query a Database prepared (false for a default-constructed one).
  [[nodiscard]] bool valid() const noexcept { return info_ != nullptr; }
  /// The SQL text (empty when not valid()).
  [[nodiscard]] std::string_view sql() const noexcept { return sql_; }
  /// The engine's read/write verdict (a write when not valid()).
  [[nodiscard]] const AccessVerdict& verdict() const noexcept { return verdict_; }
  /// verdict().access.
  [[nodiscard]] Access access() const noexcept { return verdict_.access; }
  /// False when the statement cache was full: the statement is prepared on every use.
  [[nodiscard]] bool cached() const noexcept;

 private:
  friend struct detail::QueryAccess;
  std::shared_ptr<const detail::QueryInfo> info_;
  // Copies of what info_ holds (it never changes), read on every call without a hop.
  std::string_view sql_;  // into info_
  AccessVerdict verdict_;
};

/// A Query or SQL text, as the helpers take them. Holds a reference: pass it straight on.
/// Two words, so it travels in registers.
class QueryRef {
 public:
  /// A prepared Query; it must outlive the QueryRef.
  QueryRef(const Query& query) noexcept  // NOLINT(google-explicit-constructor)
      : ptr_(&query), size_(kQuery) {}
  /// SQL text; it must outlive the QueryRef.
  QueryRef(std::string_view sql) noexcept  // NOLINT(google-explicit-constructor)
      : ptr_(sql.data()), size_(sql.size()) {}
  /// SQL text (a C string); it must outlive the QueryRef.
  QueryRef(const char* sql) noexcept  // NOLINT(google-explicit-constructor)
      : QueryRef(std::string_view(sql)) {}
  /// SQL text; it must outlive the QueryRef.
  QueryRef(const std::string& sql) noexcept  // NOLINT(google-explicit-constructor)
      : QueryRef(std::string_view(sql)) {}

  /// The Query, or nullptr for SQL text.
  [[nodiscard]] const Query* query() const noexcept {
    return size_ == kQuery ? static_cast<const Query*>(ptr_) : nullptr;
  }
  /// The SQL text, of the Query or as given.
  [[nodiscard]] std::string_view sql() const noexcept {
    if (size_ == kQuery) return static_cast<const Query*>(ptr_)->sql();
    return {static_cast<const char*>(ptr_), size_};
  }

 private:
  static constexpr std::size_t kQuery = ~std::size_t{0};  // no SQL text is this long
  const void* ptr_;
  std::size_t size_;
};

namespace detail {
// A row of the helpers: T for one type, std::tuple<Ts...> for several.
template <class... Ts>
using row_t =
    std::conditional_t<sizeof...(Ts) == 1, std::tuple_element_t<0, std::tuple<Ts..., void>>,
                       std::tuple<Ts...>>;

// A with_statement() body, as Derived::run_statement() sees it.
using StatementBody = holdfast::detail::StatusRef<Statement&>;

// The helpers' steps on a Statement, compiled (statement.cpp), so that this header only
// declares Statement: first_row() binds every value and steps, setting `row` to the row or to
// nullptr when there is none; next_row() steps again.
Status first_row(Statement& st, std::span<const Value> values, const Row*& row);
Status next_row(Statement& st, const Row*& row);
Result<Exec> execute(Statement& st, std::span<const Value> values);
Status too_few_columns(int has, std::size_t wanted);
// A failure after rows reached the caller's function: repeating would deliver them again.
Status after_rows(Status failure, std::size_t delivered);

template <class... Ts>
Status read_row(const Row& row, row_t<Ts...>& out) {
  if (row.size() < static_cast<int>(sizeof...(Ts)))
    return too_few_columns(row.size(), sizeof...(Ts));
  if constexpr (sizeof...(Ts) == 1) {
    return row.read(0, out);
  } else {
    Status s;
    int column = 0;
    std::apply([&](auto&... v) { ((s.ok() ? void(s = row.read(column++, v)) : void()), ...); },
               out);
    return s;
  }
}
}  // namespace detail

/// The query helpers of Database, Transaction and ResilientDatabase (Derived, which runs a
/// body on a statement in its compiled run_statement()). Arguments are bound by position,
/// or by name when given as named(":x", v).
template <class Derived>
class QueryApi {
 public:
  /// Runs body(Statement&) -> Status or Result<T> (holdfast/sqlite/statement.hpp) on a
  /// statement of `q` (on the writer in a Transaction or for a write, else on a read
  /// connection), reset afterwards, once per attempt. Transaction control is refused (use
  /// transaction()), and so is SAVEPOINT outside a Transaction.
  template <class Body>
  auto with_statement(QueryRef q, Body&& body) -> std::invoke_result_t<Body&, Statement&> {
    return holdfast::detail::run_through<Statement&>(body, [&](detail::StatementBody b) {
      return static_cast<Derived&>(*this).run_statement(q, b);
    });
  }

  /// Runs the statement to its end with `args` bound. Rows, if any, are ignored.
  template <class... Args>
  Result<Exec> execute(QueryRef q, const Args&... args) {
    const std::array<detail::Value, sizeof...(Args)> values{detail::value_of(args)...};
    return with_statement(
        q, [&](Statement& st) -> Result<Exec> { return detail::execute(st, values); });
  }

  /// The first column of the first row as T (checked, see Row::read), or std::nullopt when
  /// there is no row.
  template <class T, class... Args>
  Result<std::optional<T>> query_one(QueryRef q, const Args&... args) {
    const std::array<detail::Value, sizeof...(Args)> values{detail::value_of(args)...};
    std::optional<T> out;
    auto body = [&](Statement& st) -> Status {
      out.reset();
      const Row* row = nullptr;
      if (Status s = detail::first_row(st, values, row); !s.ok() || row == nullptr) return s;
      return row->read(0, out.emplace());
    };
    if (Status s = with_statement(q, body); !s.ok()) [[unlikely]]
      return s;
    return out;
  }

  /// Every row, its first sizeof...(Ts) columns read as Ts (checked): a vector of T for one
  /// type, of std::tuple<Ts...> for several.
  template <class... Ts, class... Args>
  Result<std::vector<detail::row_t<Ts...>>> query(QueryRef q, const Args&... args) {
    static_assert(sizeof...(Ts) > 0, "name the column types: query<std::int64_t, std::string>");
    using Out = detail::row_t<Ts...>;
    const std::array<detail::Value, sizeof...(Args)> values{detail::value_of(args)...};
    return with_statement(q, [&](Statement& st) -> Result<std::vector<Out>> {
      std::vector<Out> rows;
      const Row* row = nullptr;
      for (Status s = detail::first_row(st, values, row);; s = detail::next_row(st, row)) {
        if (!s.ok()) [[unlikely]]
          return s;
        if (row == nullptr) return rows;
        if (Status r = detail::read_row<Ts...>(*row, rows.emplace_back()); !r.ok()) return r;
      }
    });
  }

  /// Calls fn(const Row&) for every row; fn returns void, or a Status that stops the walk
  /// when it is an error. A failure after the first row reached fn is not retried (fn would
  /// see the rows again): it comes back with StopReason::kNotSafeToRepeat.
  template <class Fn, class... Args>
  Status for_each(QueryRef q, Fn&& fn, const Args&... args) {
    const std::array<detail::Value, sizeof...(Args)> values{detail::value_of(args)...};
    return with_statement(q, [&](Statement& st) -> Status {
      const Row* row = nullptr;
      std::size_t delivered = 0;
      for (Status s = detail::first_row(st, values, row);; s = detail::next_row(st, row)) {
        if (!s.ok()) [[unlikely]]
          return detail::after_rows(std::move(s), delivered);
        if (row == nullptr) return Status();
        ++delivered;
        if constexpr (std::is_void_v<std::invoke_result_t<Fn&, const Row&>>) {
          fn(*row);
        } else if (Status r = fn(*row); !r.ok()) {
          return detail::after_rows(std::move(r), delivered);
        }
      }
    });
  }
};

}  // namespace holdfast::sqlite
