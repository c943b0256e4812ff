// What the PgLogStore tests share (log_store_test.cpp, log_store_sink_test.cpp): a schema
// of the test's own for its logs table, a lock on that table, and records to write.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "holdfast/log/logger.hpp"
#include "holdfast/pg/log_store.hpp"
#include "pg_test_support.hpp"

namespace holdfast::pg::logstore_test {

using pgtest::Admin;
using pgtest::server_url;
using pgtest::unique;

// 2026-09-11T06:20:00.000Z, the day of the origin's incident.
constexpr WallTime kMorning{std::chrono::sys_days{std::chrono::year{2026} / 9 / 11} +
                            std::chrono::hours(6) + std::chrono::minutes(20)};

struct Row {
  long long id = 0;
  std::string level;
  std::string context;
  std::string message;
  std::string created_at;
};

// A schema of the test's own holding its logs table; dropped at the end.
class LogSchema {
 public:
  // `owner`: a role to own the schema (the store then connects as that role).
  explicit LogSchema(const std::string& owner = "")
      : admin_(server_url()), name_(unique("hf_logs")) {
    admin_.exec("CREATE SCHEMA " + name_ + (owner.empty() ? "" : " AUTHORIZATION " + owner));
  }
  ~LogSchema() { admin_.exec("DROP SCHEMA IF EXISTS " + name_ + " CASCADE"); }
  LogSchema(const LogSchema&) = delete;
  LogSchema& operator=(const LogSchema&) = delete;

  [[nodiscard]] std::string table() const { return name_ + ".logs"; }

  // Store options for this schema, under an application_name of their own.
  [[nodiscard]] PgLogStore::Options options(const std::string& url = server_url()) const {
    PgLogStore::Options o;
    o.url = url;
    o.application_name = unique("hf_logstore");
    o.settings = {{"search_path", name_}};
    return o;
  }

  std::vector<Row> rows() {
    Rows r = admin_.exec("SELECT id, level, context, message, created_at FROM " + table() +
                         " ORDER BY id");
    std::vector<Row> out;
    for (int i = 0; i < r.size(); ++i) {
      out.push_back({*r.int64(i, 0), std::string(r.text(i, 1)), std::string(r.text(i, 2)),
                     std::string(r.text(i, 3)), std::string(r.text(i, 4))});
    }
    return out;
  }
  long long count() { return admin_.count("SELECT count(*) FROM " + table()); }

  // Backends of `app` waiting for a lock.
  long long waiting_for_lock(const std::string& app) {
    return admin_.count(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 "
        "AND wait_event_type = 'Lock'",
        {app});
  }

  Admin& admin() { return admin_; }

 private:
  Admin admin_;
  std::string name_;
};

// Another session holding ACCESS EXCLUSIVE on a table until release() (or destruction).
class TableLock {
 public:
  explicit TableLock(const std::string& table) : holder_(server_url()) {
    holder_.exec("BEGIN");
    holder_.exec("LOCK TABLE " + table + " IN ACCESS EXCLUSIVE MODE");
  }
  ~TableLock() { release(); }
  void release() {
    if (held_) holder_.exec("ROLLBACK");
    held_ = false;
  }

 private:
  Admin holder_;
  bool held_ = true;
};

inline std::unique_ptr<PgLogStore> open_store(const PgLogStore::Options& options) {
  auto store = PgLogStore::open(options);
  EXPECT_TRUE(store.ok()) << store.status().to_string();
  return store.ok() ? std::move(*store) : nullptr;
}

inline LogRecord record(Level level, std::string context, std::string message, WallTime at) {
  LogRecord r;
  r.level = level;
  r.context = std::move(context);
  r.message = std::move(message);
  r.created_at = at;
  return r;
}

}  // namespace holdfast::pg::logstore_test
