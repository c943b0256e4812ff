// Checks of issues #13 and #42 that hold on both stores (panel_hardening_test.cpp runs them
// on SQLite, panel_pg_test.cpp on PostgreSQL): idempotency keys scoped to (user, route) and
// carrying the request's fingerprint; refusals that quote no SQL; NUL bytes refused; an
// unknown email costs what a wrong password costs.
#pragma once

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "club_store.hpp"
#include "http_client.hpp"
#include "passwords.hpp"

namespace holdfast::panel::hardening {

using nlohmann::json;

// Signs in as `email` (password "demo"): the headers a signed-in client sends with its writes
// (the session cookie and, when the panel gives one, its CSRF token).
inline http_client::Headers sign_in(http_client::Client& http, const std::string& email) {
  auto r = http.Post("/login", http_client::Params{{"email", email}, {"password", "demo"}});
  EXPECT_TRUE(r);
  if (!r) return {};
  EXPECT_EQ(r->status, 303) << r->body;
  const std::string set = r->get_header_value("Set-Cookie");
  http_client::Headers h{{"Cookie", set.substr(0, set.find(';'))}};
  if (r->has_header("X-CSRF-Token")) h.emplace("X-CSRF-Token", r->get_header_value("X-CSRF-Token"));
  return h;
}

// Sends `request` as raw bytes to the panel on loopback `port` and returns the raw answer.
inline std::string raw_exchange(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string answer;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
      answer.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return answer;
}

inline http_client::Headers with_key(http_client::Headers h, const std::string& key) {
  h.emplace("Idempotency-Key", key);
  return h;
}

// An answer body that quotes no SQL or engine text.
inline void expect_no_internals(const std::string& body) {
  for (const char* leak : {"INSERT", "SELECT", "UNIQUE", "constraint", "SQLITE", "sqlite",
                           "duplicate key", "idempotency_keys", ".db"}) {
    EXPECT_EQ(body.find(leak), std::string::npos) << "the answer quotes '" << leak << "': " << body;
  }
}

// `payments()` counts the payments table; `game` is a game neither user has joined.
inline void expect_keys_scoped_and_fingerprinted(http_client::Client& http,
                                                 const std::function<long long()>& payments,
                                                 long long game) {
  const http_client::Headers ada = sign_in(http, "Ada.Nowak@club.example");
  const http_client::Headers bartek = sign_in(http, "Bartek.Tran@club.example");
  const http_client::Params pay100{{"amount_cents", "100"}, {"method", "card"}};
  const long long before = payments();

  // The same key from two users: two payments, each replayed to its own user.
  auto a1 = http.Post("/payments", with_key(ada, "shared-K"), pay100);
  auto b1 = http.Post("/payments", with_key(bartek, "shared-K"), pay100);
  auto b2 = http.Post("/payments", with_key(bartek, "shared-K"), pay100);
  ASSERT_TRUE(a1 && b1 && b2);
  ASSERT_EQ(a1->status, 201) << a1->body;
  ASSERT_EQ(b1->status, 201) << b1->body;
  EXPECT_EQ(b2->status, 200) << b2->body;
  EXPECT_NE(json::parse(a1->body)["payment_id"], json::parse(b1->body)["payment_id"]);
  EXPECT_EQ(json::parse(b2->body)["payment_id"], json::parse(b1->body)["payment_id"]);
  EXPECT_EQ(payments(), before + 2);

  // The same key with another amount: 422, nothing applied, no amount quoted.
  auto other = http.Post("/payments", with_key(ada, "shared-K"),
                         http_client::Params{{"amount_cents", "9999"}, {"method", "card"}});
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 422) << other->body;
  EXPECT_NE(other->body.find("different parameters"), std::string::npos) << other->body;
  EXPECT_EQ(other->body.find("9999"), std::string::npos) << other->body;
  EXPECT_EQ(payments(), before + 2);

  // The same request again: the original answer.
  auto again = http.Post("/payments", with_key(ada, "shared-K"), pay100);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200) << again->body;
  const json replay = json::parse(again->body);
  EXPECT_EQ(replay["payment_id"], json::parse(a1->body)["payment_id"]);
  EXPECT_EQ(replay["amount_cents"], 100);
  EXPECT_EQ(replay["replayed"], true);

  // Routes are separate key spaces: no 409 quoting SQL, no 500.
  const http_client::Params join{{"game_id", std::to_string(game)}};
  auto joined = http.Post("/signups", with_key(ada, "shared-K"), join);
  ASSERT_TRUE(joined);
  EXPECT_EQ(joined->status, 201) << joined->body;
  auto paid = http.Post("/payments", with_key(bartek, "signup-first"), pay100);
  auto b_joined = http.Post("/signups", with_key(bartek, "signup-first"), join);
  ASSERT_TRUE(paid && b_joined);
  EXPECT_EQ(paid->status, 201) << paid->body;
  EXPECT_EQ(b_joined->status, 201) << b_joined->body;

  // Signing up twice without a key: a plain 409.
  auto twice = http.Post("/signups", ada, join);
  ASSERT_TRUE(twice);
  EXPECT_EQ(twice->status, 409) << twice->body;
  EXPECT_EQ(json::parse(twice->body)["error"], "already signed up for this game");
  expect_no_internals(twice->body);
}

// A key with a NUL never reaches the database. (Over HTTP one cannot be sent to a route:
// http_client refuses to send a NUL in a header, and the panel answers a raw one 400 before
// any route (panel_http_test.cpp); so the store is asked directly.)
inline void expect_nul_key_refused(ClubStore& store) {
  Result<PaymentReceipt> r =
      store.pay(1, 100, "cash", std::string("cut\0here", 8), "2026-01-01T00:00:00.000Z");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("control characters"), std::string::npos);
}

inline void expect_bad_keys_refused(http_client::Client& http,
                                    const std::function<long long()>& payments) {
  const http_client::Headers ada = sign_in(http, "Ada.Nowak@club.example");
  const http_client::Params pay{{"amount_cents", "100"}, {"method", "cash"}};
  const long long before = payments();
  auto tab = http.Post("/payments", with_key(ada, "a\tb"), pay);
  ASSERT_TRUE(tab);
  EXPECT_EQ(tab->status, 400) << tab->body;
  EXPECT_NE(tab->body.find("control characters"), std::string::npos) << tab->body;
  auto long_key = http.Post("/payments", with_key(ada, std::string(256, 'k')), pay);
  ASSERT_TRUE(long_key);
  EXPECT_EQ(long_key->status, 400) << long_key->body;
  EXPECT_NE(long_key->body.find("255"), std::string::npos) << long_key->body;
  EXPECT_EQ(payments(), before);
  auto longest = http.Post("/payments", with_key(ada, std::string(255, 'k')), pay);
  ASSERT_TRUE(longest);
  EXPECT_EQ(longest->status, 201) << longest->body;
}

// Bytes that are not UTF-8 in what reaches the database (an Idempotency-Key, a sign-in
// email, a problem report, a session cookie) are the client's mistake on both engines: a 400
// (a sign-in form again for the cookie), never a 500 from PostgreSQL's 22021.
inline void expect_invalid_utf8_refused(http_client::Client& http,
                                        const std::function<long long()>& payments) {
  const http_client::Headers ada = sign_in(http, "Ada.Nowak@club.example");
  const long long before = payments();
  for (const std::string& key : {std::string("k\xff"), std::string("caf\xc3"),
                                 std::string("\xed\xa0\x80"), std::string("\xc0\xaf")}) {
    auto r = http.Post("/payments", with_key(ada, key),
                       http_client::Params{{"amount_cents", "100"}, {"method", "cash"}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_NE(r->body.find("Idempotency-Key must be UTF-8"), std::string::npos) << r->body;
  }
  EXPECT_EQ(payments(), before);
  auto utf8 = http.Post("/payments", with_key(ada, "zam\xc3\xb3wienie-\xe2\x9c\x93"),
                        http_client::Params{{"amount_cents", "100"}, {"method", "cash"}});
  ASSERT_TRUE(utf8);
  EXPECT_EQ(utf8->status, 201) << utf8->body;

  auto login = http.Post(
      "/login", http_client::Params{{"email", "Ada.Nowak\xff@club.example"}, {"password", "demo"}});
  ASSERT_TRUE(login);
  EXPECT_EQ(login->status, 400) << login->body;
  EXPECT_NE(login->body.find("email must be UTF-8"), std::string::npos) << login->body;

  auto report = http.Post("/report", http_client::Params{{"digest", "abc"}, {"note", "bad \xfe"}});
  ASSERT_TRUE(report);
  EXPECT_EQ(report->status, 400) << report->body;

  auto page = http.Get("/dashboard/schedule", http_client::Headers{{"Cookie", "session=\xff\xfe"}});
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 303) << page->body.substr(0, 300);
  auto pay = http.Post("/payments", http_client::Headers{{"Cookie", "session=\xff\xfe"}},
                       http_client::Params{{"amount_cents", "100"}});
  ASSERT_TRUE(pay);
  EXPECT_EQ(pay->status, 401) << pay->body;
}

// A NUL byte in what a sign-in or a problem report sends is the client's mistake on both
// engines: 400 naming the field, before any driver sees it (libpq sends text as C strings:
// "Ada.Nowak@club.example\0x" was looked up as Ada's email, and signed in as her).
inline void expect_nul_bytes_refused(http_client::Client& http) {
  const std::string form = "application/x-www-form-urlencoded";
  auto email = http.Post("/login", "email=Ada.Nowak%40club.example%00x&password=demo", form);
  ASSERT_TRUE(email);
  EXPECT_EQ(email->status, 400) << email->body;
  EXPECT_NE(email->body.find("email must not contain control characters"), std::string::npos)
      << email->body;
  EXPECT_TRUE(email->get_header_value("Set-Cookie").empty());
  auto password = http.Post("/login", "email=Ada.Nowak%40club.example&password=demo%00x", form);
  ASSERT_TRUE(password);
  EXPECT_EQ(password->status, 400) << password->body;
  EXPECT_NE(password->body.find("password must not contain a NUL byte"), std::string::npos)
      << password->body;
  for (const char* field : {"path", "digest", "note"}) {
    auto report = http.Post("/report", std::string(field) + "=cut%00here", form);
    ASSERT_TRUE(report);
    EXPECT_EQ(report->status, 400) << field << ": " << report->body;
    EXPECT_NE(report->body.find(std::string(field) + " must not contain a NUL byte"),
              std::string::npos)
        << report->body;
  }
  // The store's own checks, for callers that are not the panel.
  const Status login = ClubStore::check_login(std::string("a@b\0x", 5), "demo");
  EXPECT_EQ(login.code(), Code::kInvalidArgument);
  EXPECT_EQ(ClubStore::check_report("", "", std::string("a\0b", 3)).code(), Code::kInvalidArgument);
  // The same email without the NUL still signs in.
  sign_in(http, "Ada.Nowak@club.example");
}

// An unknown email costs the same Argon2id verification as a known one with a wrong
// password (the store's dummy hash), and is answered the same: neither the answer nor its
// time tells which emails have accounts. Counted, not timed.
inline void expect_unknown_email_costs_what_a_wrong_password_costs(http_client::Client& http) {
  struct Cost {
    int status = 0;
    std::string body;
    std::uint64_t verifications = 0;
  };
  const auto cost_of = [&](const std::string& email, const std::string& password) {
    const std::uint64_t before = password_verifications();
    auto r = http.Post("/login", http_client::Params{{"email", email}, {"password", password}});
    EXPECT_TRUE(r);
    return Cost{r ? r->status : 0, r ? r->body : "", password_verifications() - before};
  };
  const Cost wrong = cost_of("Chi.Nguyen@club.example", "nope");
  const Cost unknown = cost_of("nobody.here@club.example", "nope");
  const Cost right = cost_of("Chi.Nguyen@club.example", "demo");
  EXPECT_EQ(wrong.status, 401) << wrong.body;
  EXPECT_EQ(unknown.status, 401) << unknown.body;
  EXPECT_EQ(unknown.body, wrong.body);
  EXPECT_EQ(right.status, 303) << right.body;
  EXPECT_EQ(wrong.verifications, 1u);
  EXPECT_EQ(unknown.verifications, 1u) << "an unknown email was answered without a check";
  EXPECT_EQ(right.verifications, 1u);
}

// A sign-up for a game that has already started: 409, nothing added.
inline void expect_past_game_refused(http_client::Client& http, long long past_game,
                                     const std::function<long long()>& signups) {
  ASSERT_GT(past_game, 0);
  const http_client::Headers ada = sign_in(http, "Ada.Nowak@club.example");
  const long long before = signups();
  const http_client::Params join{{"game_id", std::to_string(past_game)}};
  auto late = http.Post("/signups", ada, join);
  auto keyed = http.Post("/signups", with_key(ada, "late-1"), join);
  ASSERT_TRUE(late && keyed);
  EXPECT_EQ(late->status, 409) << late->body;
  EXPECT_EQ(json::parse(late->body)["error"], "the game has already started: sign-ups are closed");
  EXPECT_EQ(keyed->status, 409) << keyed->body;
  expect_no_internals(late->body);
  EXPECT_EQ(signups(), before);
}

// A legacy "fnv1a:" hash still signs in and is replaced by Argon2id at that sign-in; a wrong
// password replaces nothing; the next sign-in rewrites nothing. `set_hash(email, hash)`
// stores a user's hash, `hash_of(email)` reads it.
inline void expect_legacy_hash_upgraded(
    http_client::Client& http,
    const std::function<void(const std::string&, const std::string&)>& set_hash,
    const std::function<std::string(const std::string&)>& hash_of) {
  const std::string email = "Bartek.Tran@club.example";
  EXPECT_EQ(hash_of(email).rfind("$argon2id$v=19$", 0), 0u) << hash_of(email);  // demo data
  const std::string legacy = legacy_password_hash(email, "demo");
  set_hash(email, legacy);
  const std::uint64_t verified = password_verifications();
  auto wrong = http.Post("/login", http_client::Params{{"email", email}, {"password", "Demo"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401) << wrong->body;
  // Checking the legacy form costs nothing: the dummy hash makes it cost what the others do.
  EXPECT_EQ(password_verifications() - verified, 1u);
  EXPECT_EQ(hash_of(email), legacy);
  sign_in(http, email);
  const std::string upgraded = hash_of(email);
  EXPECT_EQ(upgraded.rfind("$argon2id$v=19$", 0), 0u) << upgraded;
  EXPECT_EQ(upgraded.find("demo"), std::string::npos);
  sign_in(http, email);
  EXPECT_EQ(hash_of(email), upgraded);  // already Argon2id at the store's cost
  auto wrong_again =
      http.Post("/login", http_client::Params{{"email", email}, {"password", "Demo"}});
  ASSERT_TRUE(wrong_again);
  EXPECT_EQ(wrong_again->status, 401) << wrong_again->body;
}

// POST /logout ends the session: a form needs the session's CSRF token; the row is deleted,
// the cookie is cleared and no longer opens the schedule. `sessions()` counts the table.
inline void expect_logout_ends_the_session(http_client::Client& http,
                                           const std::function<long long()>& sessions) {
  const http_client::Headers ada = sign_in(http, "Ada.Nowak@club.example");
  http_client::Headers cookie_only;
  for (const auto& [name, value] : ada) {
    if (name == "Cookie") cookie_only.emplace(name, value);
  }
  auto page = http.Get("/dashboard/schedule", cookie_only);
  ASSERT_TRUE(page);
  ASSERT_EQ(page->status, 200);
  const long long before = sessions();

  auto forged = http.Post("/logout", cookie_only, http_client::Params{});
  ASSERT_TRUE(forged);
  EXPECT_EQ(forged->status, 403) << forged->body;
  EXPECT_EQ(sessions(), before);

  auto out = http.Post("/logout", ada, http_client::Params{});
  ASSERT_TRUE(out);
  EXPECT_EQ(out->status, 303) << out->body;
  EXPECT_EQ(out->get_header_value("Location"), "/login");
  const std::string cleared = out->get_header_value("Set-Cookie");
  EXPECT_EQ(cleared.rfind("session=;", 0), 0u) << cleared;
  EXPECT_NE(cleared.find("Max-Age=0"), std::string::npos) << cleared;
  EXPECT_EQ(sessions(), before - 1);

  auto after = http.Get("/dashboard/schedule", cookie_only);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 303);
  EXPECT_EQ(after->get_header_value("Location"), "/login");
  auto again = http.Post("/logout", ada, http_client::Params{});  // nothing left to end
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 303) << again->body;
}

}  // namespace holdfast::panel::hardening
