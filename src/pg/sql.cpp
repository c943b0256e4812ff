// The lexical read-only classifier (pg/sql.hpp). The lexer follows the rules of
// PostgreSQL's own scanner (src/backend/parser/scan.l) closely enough that a word inside a
// comment, a literal or a quoted identifier is never mistaken for a keyword.
#include <algorithm>
#include <array>
#include <cctype>
#include <string>

#include "holdfast/pg/sql.hpp"
#include "pg_internal.hpp"

namespace holdfast::pg {
namespace {

enum class Tok : std::uint8_t {
  kEnd,
  kError,
  kWord,         // identifier or keyword, unquoted
  kQuotedIdent,  // "..." or U&"..."
  kString,       // any string literal, dollar-quoted included
  kNumber,
  kParam,  // $1
  kLParen,
  kRParen,
  kSemicolon,
  kComma,
  kOther,  // operators and other punctuation, one character at a time
};

struct Token {
  Tok type = Tok::kEnd;
  std::string_view text;
  std::size_t begin = 0;
};

bool is_ident_start(char c) noexcept {
  const auto u = static_cast<unsigned char>(c);
  return (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || u == '_' || u >= 0x80;
}
bool is_digit(char c) noexcept {
  return c >= '0' && c <= '9';
}
bool is_ident_cont(char c) noexcept {
  return is_ident_start(c) || is_digit(c) || c == '$';
}
bool is_space(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

bool iequals(std::string_view a, std::string_view lower) noexcept {
  if (a.size() != lower.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char c = a[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != lower[i]) return false;
  }
  return true;
}

template <std::size_t N>
bool one_of(std::string_view word, const std::array<std::string_view, N>& list) noexcept {
  return std::any_of(list.begin(), list.end(),
                     [&](std::string_view w) { return iequals(word, w); });
}

class Lexer {
 public:
  Lexer(std::string_view sql, bool standard_strings) noexcept
      : s_(sql), standard_strings_(standard_strings) {}

  Token next() noexcept {
    if (!skip_space_and_comments()) return error("unterminated /* comment");
    if (pos_ >= s_.size()) return {Tok::kEnd, {}, pos_};
    const std::size_t start = pos_;
    const char c = s_[pos_];
    const char c1 = peek(1);
    // Prefixed literals: E'...', B'...', X'...', N'...', U&'...', U&"...".
    if ((c == 'e' || c == 'E') && c1 == '\'') {
      ++pos_;
      return string(start, /*backslash_escapes=*/true);
    }
    if ((c == 'b' || c == 'B' || c == 'x' || c == 'X') && c1 == '\'') {
      ++pos_;
      return string(start, false);
    }
    if ((c == 'n' || c == 'N') && c1 == '\'') {
      ++pos_;
      return string(start, !standard_strings_);
    }
    if ((c == 'u' || c == 'U') && c1 == '&' && (peek(2) == '\'' || peek(2) == '"')) {
      pos_ += 2;
      // In U& literals a backslash introduces a code point, never an escaped quote.
      return peek(0) == '\'' ? string(start, false) : quoted_ident(start);
    }
    if (is_ident_start(c)) {
      while (pos_ < s_.size() && is_ident_cont(s_[pos_]))
        ++pos_;
      return make(Tok::kWord, start);
    }
    if (is_digit(c) || (c == '.' && is_digit(c1))) return number(start);
    switch (c) {
      case '\'':
        return string(start, !standard_strings_);
      case '"':
        return quoted_ident(start);
      case '$':
        return dollar(start);
      case '(':
        ++pos_;
        return make(Tok::kLParen, start);
      case ')':
        ++pos_;
        return make(Tok::kRParen, start);
      case ';':
        ++pos_;
        return make(Tok::kSemicolon, start);
      case ',':
        ++pos_;
        return make(Tok::kComma, start);
      default:
        ++pos_;
        return make(Tok::kOther, start);
    }
  }

  [[nodiscard]] std::string_view error_reason() const noexcept { return error_; }

 private:
  [[nodiscard]] char peek(std::size_t ahead) const noexcept {
    return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : '\0';
  }
  Token make(Tok type, std::size_t start) const noexcept {
    return {type, s_.substr(start, pos_ - start), start};
  }
  Token error(std::string_view why) noexcept {
    error_ = why;
    return {Tok::kError, {}, pos_};
  }

  // False on an unterminated block comment.
  bool skip_space_and_comments() noexcept {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (is_space(c)) {
        ++pos_;
      } else if (c == '-' && peek(1) == '-') {
        while (pos_ < s_.size() && s_[pos_] != '\n')
          ++pos_;
      } else if (c == '/' && peek(1) == '*') {
        // Block comments nest in PostgreSQL (unlike the SQL standard's C-style rule).
        int depth = 1;
        pos_ += 2;
        while (depth > 0) {
          if (pos_ >= s_.size()) return false;
          if (s_[pos_] == '/' && peek(1) == '*') {
            ++depth;
            pos_ += 2;
          } else if (s_[pos_] == '*' && peek(1) == '/') {
            --depth;
            pos_ += 2;
          } else {
            ++pos_;
          }
        }
      } else {
        break;
      }
    }
    return true;
  }

  // pos_ is at the opening quote.
  Token string(std::size_t start, bool backslash_escapes) noexcept {
    ++pos_;
    for (;;) {
      if (pos_ >= s_.size()) return error("unterminated string literal");
      const char c = s_[pos_];
      if (backslash_escapes && c == '\\') {
        pos_ += 2;
      } else if (c == '\'') {
        if (peek(1) == '\'') {
          pos_ += 2;
        } else {
          ++pos_;
          return make(Tok::kString, start);
        }
      } else {
        ++pos_;
      }
    }
  }

  Token quoted_ident(std::size_t start) noexcept {
    ++pos_;
    for (;;) {
      if (pos_ >= s_.size()) return error("unterminated quoted identifier");
      if (s_[pos_] == '"') {
        if (peek(1) == '"') {
          pos_ += 2;
        } else {
          ++pos_;
          return make(Tok::kQuotedIdent, start);
        }
      } else {
        ++pos_;
      }
    }
  }

  Token number(std::size_t start) noexcept {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      const bool part =
          is_digit(c) || c == '.' || c == '_' || std::isalpha(static_cast<unsigned char>(c)) != 0;
      // An exponent's sign: 1e-5.
      const bool sign = (c == '+' || c == '-') && (s_[pos_ - 1] == 'e' || s_[pos_ - 1] == 'E');
      if (!part && !sign) break;
      ++pos_;
    }
    return make(Tok::kNumber, start);
  }

  // $1 is a parameter; $tag$ ... $tag$ (tag empty or an identifier without $) a literal.
  Token dollar(std::size_t start) noexcept {
    if (is_digit(peek(1))) {
      ++pos_;
      while (pos_ < s_.size() && is_digit(s_[pos_]))
        ++pos_;
      return make(Tok::kParam, start);
    }
    std::size_t j = pos_ + 1;
    while (j < s_.size() && (is_ident_start(s_[j]) || is_digit(s_[j])))
      ++j;
    if (j >= s_.size() || s_[j] != '$') {
      ++pos_;
      return make(Tok::kOther, start);
    }
    const std::string_view tag = s_.substr(pos_, j - pos_ + 1);
    const std::size_t close = s_.find(tag, j + 1);
    if (close == std::string_view::npos) return error("unterminated dollar-quoted string");
    pos_ = close + tag.size();
    return make(Tok::kString, start);
  }

  std::string_view s_;
  bool standard_strings_;
  std::size_t pos_ = 0;
  std::string_view error_;
};

constexpr std::array<std::string_view, 6> kReadHeads = {"select", "values", "table",
                                                        "with",   "show",   "explain"};
constexpr std::array<std::string_view, 8> kTransactionControl = {
    "begin", "start", "commit", "end", "rollback", "abort", "savepoint", "release"};
constexpr std::array<std::string_view, 4> kSessionControl = {"set", "reset", "discard", "load"};
constexpr std::array<std::string_view, 3> kNotifications = {"listen", "unlisten", "notify"};
constexpr std::array<std::string_view, 4> kCursors = {"declare", "fetch", "move", "close"};
constexpr std::array<std::string_view, 3> kPrepared = {"prepare", "execute", "deallocate"};
constexpr std::array<std::string_view, 6> kDataModification = {"insert", "update",   "delete",
                                                               "merge",  "truncate", "copy"};
constexpr std::array<std::string_view, 2> kProcedural = {"call", "do"};

// Built-in functions whose effects a READ ONLY transaction does not stop, or that change
// session state a pooled connection would carry to its next user, or that write.
constexpr std::array<std::string_view, 44> kSideEffectFunctions = {
    "nextval",
    "setval",
    "set_config",
    "pg_advisory_lock",
    "pg_advisory_lock_shared",
    "pg_try_advisory_lock",
    "pg_try_advisory_lock_shared",
    "pg_advisory_unlock",
    "pg_advisory_unlock_shared",
    "pg_advisory_unlock_all",
    "pg_advisory_xact_lock",
    "pg_advisory_xact_lock_shared",
    "pg_try_advisory_xact_lock",
    "pg_try_advisory_xact_lock_shared",
    "pg_notify",
    "pg_terminate_backend",
    "pg_cancel_backend",
    "pg_reload_conf",
    "pg_rotate_logfile",
    "pg_switch_wal",
    "pg_create_restore_point",
    "pg_promote",
    "pg_stat_reset",
    "pg_stat_reset_shared",
    "pg_stat_reset_single_table_counters",
    "pg_stat_reset_single_function_counters",
    "pg_stat_reset_slru",
    "pg_stat_reset_replication_slot",
    "pg_create_physical_replication_slot",
    "pg_create_logical_replication_slot",
    "pg_drop_replication_slot",
    "pg_replication_origin_create",
    "pg_logical_emit_message",
    "lo_create",
    "lo_creat",
    "lo_import",
    "lo_export",
    "lo_unlink",
    "lo_put",
    "lo_from_bytea",
    "lo_truncate",
    "dblink_exec",
    "dblink_connect",
    "dblink_send_query",
};

SqlClass make(SqlKind kind, std::string_view reason, std::string_view detail = {}) noexcept {
  return SqlClass{kind, reason, detail, false};
}

SqlClass session(std::string_view reason, std::string_view detail) noexcept {
  return SqlClass{SqlKind::kWrite, reason, detail, true};
}

bool is_word(const Token& t, std::string_view lower) noexcept {
  return t.type == Tok::kWord && iequals(t.text, lower);
}

// Falsy values of a boolean EXPLAIN option (defGetBoolean accepts these and true/on/1).
bool is_false_value(const Token& t) noexcept {
  std::string_view v = t.text;
  if (t.type == Tok::kString && v.size() >= 2) v = v.substr(1, v.size() - 2);
  return iequals(v, "false") || iequals(v, "off") || v == "0";
}

class Classifier {
 public:
  Classifier(std::string_view sql, bool standard_strings) noexcept
      : sql_(sql), standard_strings_(standard_strings), lexer_(sql, standard_strings) {}

  SqlClass run() noexcept {
    Token t = lexer_.next();
    while (t.type == Tok::kLParen)
      t = lexer_.next();
    if (t.type == Tok::kError) return make(SqlKind::kInvalid, lexer_.error_reason());
    if (t.type == Tok::kEnd || t.type == Tok::kSemicolon) {
      return make(SqlKind::kInvalid, "empty statement");
    }
    if (t.type != Tok::kWord) {
      return make(SqlKind::kInvalid, "does not start with a keyword", t.text);
    }
    if (is_word(t, "explain")) return explain();

    SqlClass decided = head(t);
    const bool candidate_read = decided.kind == SqlKind::kRead;
    // Scan to the end: a later word may make a read a write, and every statement must be
    // complete and alone.
    bool after_semicolon = false;
    for (;;) {
      t = lexer_.next();
      if (t.type == Tok::kError) return make(SqlKind::kInvalid, lexer_.error_reason());
      if (t.type == Tok::kEnd) break;
      if (t.type == Tok::kSemicolon) {
        after_semicolon = true;
        continue;
      }
      if (after_semicolon) {
        return make(SqlKind::kInvalid,
                    "more than one statement (holdfast runs one statement per call)");
      }
      if (candidate_read && decided.kind == SqlKind::kRead) {
        if (SqlClass w = body_token(t); w.kind != SqlKind::kRead) decided = w;
      }
      shift(t);
    }
    return decided;
  }

 private:
  SqlClass head(const Token& t) noexcept {
    shift(t);
    const std::string_view w = t.text;
    if (one_of(w, kReadHeads)) {
      if (iequals(w, "show")) return make(SqlKind::kRead, "shows a setting", w);
      return make(SqlKind::kRead, "query", w);
    }
    if (one_of(w, kTransactionControl)) return session("transaction control", w);
    if (one_of(w, kSessionControl)) return session("session control", w);
    if (one_of(w, kNotifications)) return session("session control (notifications)", w);
    if (one_of(w, kCursors)) return session("cursor control", w);
    if (one_of(w, kPrepared)) return session("prepared statement control", w);
    if (iequals(w, "lock")) return session("explicit table lock", w);
    if (one_of(w, kDataModification)) return make(SqlKind::kWrite, "data modification", w);
    if (one_of(w, kProcedural)) return make(SqlKind::kWrite, "runs procedural code", w);
    return make(SqlKind::kWrite, "not a query (schema change, maintenance or other command)", w);
  }

  // A token in the body of a statement that starts like a read.
  SqlClass body_token(const Token& t) noexcept {
    if (t.type == Tok::kLParen && prev_[0].type == Tok::kWord &&
        one_of(prev_[0].text, kSideEffectFunctions)) {
      return make(SqlKind::kWrite, "calls a function with side effects", prev_[0].text);
    }
    if (t.type != Tok::kWord) return make(SqlKind::kRead, {});
    const std::string_view w = t.text;
    if (iequals(w, "into")) return make(SqlKind::kWrite, "SELECT INTO creates a table", w);
    if (iequals(w, "update") || iequals(w, "share")) {
      // FOR UPDATE, FOR NO KEY UPDATE, FOR SHARE, FOR KEY SHARE.
      const Token* lock_start = nullptr;
      if (is_word(prev_[0], "for")) {
        lock_start = &prev_[0];
      } else if (is_word(prev_[0], "key") && is_word(prev_[1], "for")) {
        lock_start = &prev_[1];
      } else if (is_word(prev_[0], "key") && is_word(prev_[1], "no") && is_word(prev_[2], "for")) {
        lock_start = &prev_[2];
      }
      if (lock_start != nullptr) {
        return make(SqlKind::kWrite, "row-locking clause",
                    sql_.substr(lock_start->begin, t.begin + w.size() - lock_start->begin));
      }
      if (iequals(w, "share")) return make(SqlKind::kRead, {});
    }
    if (iequals(w, "update") || iequals(w, "insert") || iequals(w, "delete") ||
        iequals(w, "merge")) {
      if (prev_[0].type == Tok::kLParen) {
        return make(SqlKind::kWrite, "data-modifying statement in WITH", w);
      }
      return make(SqlKind::kWrite, "data-modifying statement", w);
    }
    return make(SqlKind::kRead, {});
  }

  // EXPLAIN [ANALYZE] [VERBOSE] stmt, or EXPLAIN (option [value], ...) stmt.
  SqlClass explain() noexcept {
    bool analyze = false;
    Token t = lexer_.next();
    if (t.type == Tok::kLParen) {
      for (;;) {
        t = lexer_.next();
        if (t.type == Tok::kError) return make(SqlKind::kInvalid, lexer_.error_reason());
        if (t.type == Tok::kEnd) return make(SqlKind::kInvalid, "unterminated EXPLAIN options");
        if (t.type == Tok::kRParen) break;
        if (t.type == Tok::kComma) continue;
        const bool is_analyze = is_word(t, "analyze") || is_word(t, "analyse");
        Token value = lexer_.next();
        bool on = true;
        if (value.type != Tok::kComma && value.type != Tok::kRParen) {
          on = !is_false_value(value);
          value = lexer_.next();
        }
        if (is_analyze) analyze = on;
        if (value.type == Tok::kRParen) break;
        if (value.type != Tok::kComma) {
          return make(SqlKind::kInvalid, "malformed EXPLAIN options");
        }
      }
      t = lexer_.next();
    } else {
      while (is_word(t, "analyze") || is_word(t, "analyse") || is_word(t, "verbose")) {
        if (!is_word(t, "verbose")) analyze = true;
        t = lexer_.next();
      }
    }
    if (t.type == Tok::kError) return make(SqlKind::kInvalid, lexer_.error_reason());
    if (t.type == Tok::kEnd) return make(SqlKind::kInvalid, "EXPLAIN of nothing");
    const SqlClass inner = Classifier(sql_.substr(t.begin), standard_strings_).run();
    if (inner.kind == SqlKind::kInvalid) return inner;
    if (!analyze) {
      return make(SqlKind::kRead, "EXPLAIN without ANALYZE does not run the statement",
                  inner.detail);
    }
    if (inner.kind == SqlKind::kWrite) {
      return make(SqlKind::kWrite, "EXPLAIN ANALYZE runs the statement, and it writes",
                  inner.detail);
    }
    return make(SqlKind::kRead, "EXPLAIN ANALYZE of a read", inner.detail);
  }

  void shift(const Token& t) noexcept {
    prev_[2] = prev_[1];
    prev_[1] = prev_[0];
    prev_[0] = t;
  }

  std::string_view sql_;
  bool standard_strings_;
  Lexer lexer_;
  std::array<Token, 3> prev_{};
};

}  // namespace

std::string_view to_string(SqlKind kind) noexcept {
  switch (kind) {
    case SqlKind::kRead:
      return "read";
    case SqlKind::kWrite:
      return "write";
    case SqlKind::kInvalid:
      return "invalid";
  }
  return "?";
}

std::string SqlClass::explain() const {
  std::string out(reason);
  if (!detail.empty()) {
    out += " (";
    out += detail;
    out += ')';
  }
  return out;
}

SqlClass classify_sql(std::string_view sql, bool standard_conforming_strings) noexcept {
  return Classifier(sql, standard_conforming_strings).run();
}

bool ends_transaction(std::string_view sql, bool standard_conforming_strings) noexcept {
  Lexer lexer(sql, standard_conforming_strings);
  const Token first = lexer.next();
  if (first.type != Tok::kWord) return false;
  const Token second = lexer.next();
  if (is_word(first, "rollback")) {
    // ROLLBACK [WORK|TRANSACTION] TO [SAVEPOINT] name keeps the transaction open.
    Token t = second;
    if (is_word(t, "work") || is_word(t, "transaction")) t = lexer.next();
    return !is_word(t, "to");
  }
  if (is_word(first, "prepare")) return is_word(second, "transaction");
  return is_word(first, "commit") || is_word(first, "end") || is_word(first, "abort") ||
         is_word(first, "begin") || is_word(first, "start");
}

}  // namespace holdfast::pg
