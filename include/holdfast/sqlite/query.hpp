/// @file
/// holdfast::sqlite::Query, the read/write AccessVerdict, and QueryApi: the query helpers shared
/// by Database, Transaction and ResilientDatabase.
///
/// A Query is SQL prepared once and judged once by the engine (ADR 0002): a read is one
/// statement sqlite3_stmt_readonly() calls read-only that controls neither the transaction
/// nor the connection; everything else is a write. Reads run on query_only connections, so a
/// misjudged read is refused (SQLITE_READONLY), never applied.
///
/// @code
///   Result<Query> games = db.prepare("SELECT id, court FROM games WHERE day = ?");
///   auto rows = db.query<std::int64_t, std::string>(*games, day);   // vector<tuple<...>>
///   auto done = db.execute("INSERT INTO payments(user, cents) VALUES (?, ?)", user, cents);
/// @endcode
/// Every helper takes a Query or SQL text (QueryRef); text is looked up in a cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "holdfast/core/result.hpp"
#include "holdfast/core/status.hpp"
#include "holdfast/sqlite/statement.hpp"

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
template <class... Ts>
struct RowOf {
  using type = std::tuple<Ts...>;
};
template <class T>
struct RowOf<T> {
  using type = T;
};
template <class... Ts>
using row_t = typename RowOf<Ts...>::type;

Status too_few_columns(int has, std::size_t wanted);
// A failure after rows reached the caller's function: repeating would deliver them again.
Status after_rows(Status failure, std::size_t delivered);

template <class... Ts>
Result<row_t<Ts...>> read_row(const Row& row) {
  if (row.size() < static_cast<int>(sizeof...(Ts)))
    return too_few_columns(row.size(), sizeof...(Ts));
  if constexpr (sizeof...(Ts) == 1) {
    return row.read<Ts...>(0);
  } else {
    Status failed;
    std::tuple<Ts...> out;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      const auto one = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) {
        if (!failed.ok()) return;
        auto v = row.read<std::tuple_element_t<K, std::tuple<Ts...>>>(static_cast<int>(K));
        if (v.ok()) {
          std::get<K>(out) = std::move(*v);
        } else {
          failed = v.status();
        }
      };
      (one(std::integral_constant<std::size_t, I>{}), ...);
    }
    (std::index_sequence_for<Ts...>{});
    if (!failed.ok()) return failed;
    return out;
  }
}
}  // namespace detail

/// The query helpers. Derived provides
/// @code
///   template <class Body> auto with_statement(QueryRef, Body&&)
/// @endcode
/// which runs body(Statement&) on a statement of the right connection and returns what it
/// returns. Each helper's body can be run again from the start, so a retrying Derived may
/// repeat it.
template <class Derived>
class QueryApi {
 public:
  /// Runs the statement to its end with `args` bound (values by position; named(":x", v)
  /// by name). Rows, if any, are ignored.
  template <class... Args>
  Result<Exec> execute(QueryRef q, const Args&... args) {
    return self().with_statement(q, [&](Statement& st) -> Result<Exec> {
      if (Status s = st.bind_all(args...); !s.ok()) return s;
      return st.run();
    });
  }

  /// The first column of the first row as T (checked, see Row::read), or std::nullopt when
  /// there is no row.
  template <class T, class... Args>
  Result<std::optional<T>> query_one(QueryRef q, const Args&... args) {
    return self().with_statement(q, [&](Statement& st) -> Result<std::optional<T>> {
      if (Status s = st.bind_all(args...); !s.ok()) return s;
      const int rc = st.next();
      if (rc == Statement::kDone) return std::optional<T>();
      if (rc != Statement::kRow) [[unlikely]]
        return st.step_failed(rc);
      Result<std::optional<T>> value(std::in_place, std::in_place, T{});  // a T, in place
      if (Status s = st.row().read(0, **value); !s.ok()) return s;
      return value;
    });
  }

  /// Every row, its first sizeof...(Ts) columns read as Ts (checked): a vector of T for one
  /// type, of std::tuple<Ts...> for several.
  template <class... Ts, class... Args>
  Result<std::vector<detail::row_t<Ts...>>> query(QueryRef q, const Args&... args) {
    static_assert(sizeof...(Ts) > 0, "name the column types: query<std::int64_t, std::string>");
    using Out = detail::row_t<Ts...>;
    return self().with_statement(q, [&](Statement& st) -> Result<std::vector<Out>> {
      if (Status s = st.bind_all(args...); !s.ok()) return s;
      std::vector<Out> rows;
      for (;;) {
        const int rc = st.next();
        if (rc == Statement::kDone) return rows;
        if (rc != Statement::kRow) [[unlikely]]
          return st.step_failed(rc);
        Result<Out> one = detail::read_row<Ts...>(st.row());
        if (!one.ok()) return one.status();
        rows.push_back(std::move(*one));
      }
    });
  }

  /// Calls fn(const Row&) for every row; fn returns void, or a Status that stops the walk
  /// when it is an error. A failure after the first row reached fn is not retried (fn would
  /// see the rows again): it comes back with StopReason::kNotSafeToRepeat.
  template <class Fn, class... Args>
  Status for_each(QueryRef q, Fn&& fn, const Args&... args) {
    return self().with_statement(q, [&](Statement& st) -> Status {
      if (Status s = st.bind_all(args...); !s.ok()) return s;
      std::size_t delivered = 0;
      for (;;) {
        const int rc = st.next();
        if (rc == Statement::kDone) return Status();
        if (rc != Statement::kRow) [[unlikely]]
          return detail::after_rows(st.step_failed(rc), delivered);
        ++delivered;
        if constexpr (std::is_void_v<std::invoke_result_t<Fn&, const Row&>>) {
          fn(st.row());
        } else {
          Status s = fn(st.row());
          if (!s.ok()) return detail::after_rows(std::move(s), delivered);
        }
      }
    });
  }

 private:
  Derived& self() noexcept { return static_cast<Derived&>(*this); }
};

}  // namespace holdfast::sqlite
