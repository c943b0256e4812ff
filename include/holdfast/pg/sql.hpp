/// @file
/// A lexical read-only classifier for PostgreSQL SQL.
///
/// PostgreSQL has no sqlite3_stmt_readonly(), so the read path decides from the text: a
/// statement is a read only when it is one SELECT / VALUES / TABLE / SHOW / EXPLAIN (of a
/// read, or without ANALYZE) statement with nothing in it that writes or changes state:
///   - data-modifying statements (INSERT/UPDATE/DELETE/MERGE), also inside WITH;
///   - row-locking clauses FOR UPDATE / FOR NO KEY UPDATE / FOR SHARE / FOR KEY SHARE;
///   - SELECT ... INTO (creates a table);
///   - EXPLAIN ANALYZE of a write (it runs the write);
///   - calls of built-in functions with side effects the server's READ ONLY mode does not
///     stop, or changes session state with (set_config, advisory locks, nextval, ...);
///   - transaction or session control (BEGIN, SET, RESET, LISTEN, PREPARE, ...).
/// Everything else is a write. The lexer understands -- and nested /* */ comments, quoted
/// identifiers, string literals ('', E'', U&'', B'', X''; backslashes per
/// standard_conforming_strings) and dollar-quoted literals, so words inside them never count.
///
/// The classifier can only see the text: a user function called by a SELECT may still
/// write. That is why the read path also runs every read in a READ ONLY transaction
/// (docs/adr/0004-postgres-read-path-and-commit-in-doubt.md): a misjudged write fails with
/// 25006 and is never applied, let alone repeated.
///
/// Pure and thread-safe; allocates nothing.
#pragma once

#include <string>
#include <string_view>

#include "holdfast/pg/sql_kind.hpp"

namespace holdfast::pg {

/// What classify_sql() found in one SQL text.
struct SqlClass {
  SqlKind kind = SqlKind::kInvalid;  ///< read, write or invalid
  /// Why, in a few words ("data-modifying statement in WITH"). Static text.
  std::string_view reason;
  /// The word of the SQL that decided it ("DELETE"), a view into the classified text; may
  /// be empty.
  std::string_view detail;
  /// Transaction, session, cursor or prepared-statement control: the statement leaves state
  /// behind on its connection (so a pool must not run it outside a transaction() of ours).
  bool changes_session = false;

  /// True when it may run on the read path.
  [[nodiscard]] bool is_read() const noexcept { return kind == SqlKind::kRead; }
  /// "data-modifying statement in WITH (DELETE)".
  [[nodiscard]] std::string explain() const;
};

/// Classifies one SQL text. `standard_conforming_strings`: the server setting of that name
/// (on by default since PostgreSQL 9.1); when off, a backslash escapes a quote in '' too.
[[nodiscard]] SqlClass classify_sql(std::string_view sql,
                                    bool standard_conforming_strings = true) noexcept;

}  // namespace holdfast::pg
