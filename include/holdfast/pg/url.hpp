/// @file
/// Where the passwords are in a PostgreSQL connection string, so that it can be shown.
///
/// @code
///   std::puts(holdfast::pg::redact_password(url).c_str());
///     // postgresql://app:***@db:5432/club?sslmode=disable
/// @endcode
///
/// Both forms libpq takes are read: a URL (postgresql:// or postgres://, with a user-info
/// password and `password` query parameters) and key=value keywords (a value bare or
/// single-quoted with `\'` and `\\` escapes). Malformed input is read as far as it goes; a
/// password is never left in the output because the text around it did not parse.
#pragma once

#include <string>
#include <string_view>

namespace holdfast::pg {

/// `url` with every password replaced by "***".
[[nodiscard]] std::string redact_password(std::string_view url);

/// `text` with every occurrence of `url`'s passwords replaced by "***": for error messages
/// that libpq built from the URL. Passwords shorter than 4 characters are left (they cannot
/// be told from ordinary words).
[[nodiscard]] std::string without_password(std::string_view text, std::string_view url);

}  // namespace holdfast::pg
