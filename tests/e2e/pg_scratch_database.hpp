// A PostgreSQL database of a test's own on the server of scripts/pg-test-server.sh, for the
// panel's end-to-end tests.
#pragma once

#include <algorithm>
#include <string>

#include "pg_test_support.hpp"

namespace holdfast::panel {

// `url` pointing at database `name` instead of its own.
inline std::string url_for_database(const std::string& url, const std::string& name) {
  const std::size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url + " dbname=" + name;  // key=value form
  const std::size_t query = url.find('?', scheme + 3);
  const std::size_t path = std::min(url.find('/', scheme + 3), query);
  const std::string tail = query == std::string::npos ? "" : url.substr(query);
  return url.substr(0, path) + "/" + name + tail;
}

// A database of the test's own, dropped (with whoever is still connected) at the end.
class ScratchDatabase {
 public:
  ScratchDatabase() : admin_(pgtest::server_url()), name_(pgtest::unique("panel_e2e")) {
    admin_.exec("CREATE DATABASE " + name_);
    url_ = url_for_database(pgtest::server_url(), name_);
  }
  ~ScratchDatabase() { admin_.exec("DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)"); }
  ScratchDatabase(const ScratchDatabase&) = delete;
  ScratchDatabase& operator=(const ScratchDatabase&) = delete;

  [[nodiscard]] const std::string& url() const { return url_; }
  [[nodiscard]] const std::string& name() const { return name_; }
  // Terminates every backend connected to this database; returns how many.
  long long terminate_backends() {
    return admin_.count(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1",
        {name_});
  }

 private:
  pgtest::Admin admin_;
  std::string name_;
  std::string url_;
};

}  // namespace holdfast::panel
