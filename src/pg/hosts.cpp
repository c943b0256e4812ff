// Several hosts in one conninfo (DESIGN.md §9, ADR 0024): Connection::open() tries each in
// turn with a deadline of its own, from the one that answered last; the liveness check of
// such a server asks each. One host's connect is connection.cpp's (open_one()).
#include <libpq-fe.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "connection_impl.hpp"
#include "holdfast/core/classify.hpp"
#include "holdfast/core/liveness.hpp"
#include "holdfast/pg/connection.hpp"
#include "pg_internal.hpp"

namespace holdfast::pg {
namespace {

// The hosts a conninfo names: libpq's comma-separated host, hostaddr and port lists.
struct Hosts {
  std::vector<std::string> host;
  std::vector<std::string> hostaddr;
  std::vector<std::string> port;
  [[nodiscard]] std::size_t count() const noexcept {
    return std::max(host.size(), hostaddr.size());
  }
  // Keywords that make a connection reach host i only.
  [[nodiscard]] detail::ConnectionAccess::HostKeywords pick(std::size_t i) const {
    detail::ConnectionAccess::HostKeywords k;
    if (i < host.size()) k.emplace_back("host", host[i]);
    if (i < hostaddr.size()) k.emplace_back("hostaddr", hostaddr[i]);
    if (!port.empty()) k.emplace_back("port", port.size() == 1 ? port[0] : port.at(i));
    return k;
  }
  [[nodiscard]] std::string name(std::size_t i) const {
    std::string n = i < host.size() ? host[i] : i < hostaddr.size() ? hostaddr[i] : "";
    if (!port.empty()) n += ":" + (port.size() == 1 ? port[0] : port.at(i));
    return n;
  }
};

std::vector<std::string> split_list(const char* text) {
  std::vector<std::string> out;
  if (text == nullptr || *text == '\0') return out;
  std::string_view rest(text);
  for (;;) {
    const std::size_t comma = rest.find(',');
    out.emplace_back(rest.substr(0, comma));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

// The hosts of `options` (its conninfo, then its keywords); one or none for a plain URL.
Hosts hosts_of(const ConnectOptions& options) {
  Hosts h;
  char* err = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(options.conninfo.c_str(), &err);
  if (err != nullptr) PQfreemem(err);
  if (parsed == nullptr) return h;  // libpq reports the bad conninfo at connect
  for (PQconninfoOption* o = parsed; o->keyword != nullptr; ++o) {
    const std::string_view key(o->keyword);
    if (key == "host") h.host = split_list(o->val);
    if (key == "hostaddr") h.hostaddr = split_list(o->val);
    if (key == "port") h.port = split_list(o->val);
  }
  PQconninfoFree(parsed);
  for (const auto& [key, value] : options.keywords) {
    if (key == "host") h.host = split_list(value.c_str());
    if (key == "hostaddr") h.hostaddr = split_list(value.c_str());
    if (key == "port") h.port = split_list(value.c_str());
  }
  const std::size_t n = h.count();
  // libpq's rule: as many ports as hosts, or one for all. Anything else is left to libpq.
  if (n > 1 && h.port.size() > 1 && h.port.size() != n) return Hosts{};
  if (n > 1 && !h.host.empty() && !h.hostaddr.empty() && h.host.size() != h.hostaddr.size()) {
    return Hosts{};
  }
  return h;
}

// Which host of a multi-host conninfo answered last, so that later connects go there first
// and do not wait on a silent one each time. Process-wide: every pool to those hosts learns.
class HostMemory {
 public:
  std::size_t preferred(const std::string& conninfo) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = last_.find(conninfo);
    return it != last_.end() ? it->second : 0;
  }
  void remember(const std::string& conninfo, std::size_t host) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (last_.size() >= 256 && last_.find(conninfo) == last_.end()) last_.clear();
    last_[conninfo] = host;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::size_t> last_;
};

HostMemory& host_memory() {
  static HostMemory* const memory = new HostMemory();  // used by detached threads at exit
  return *memory;
}

// What one host said to a liveness check: a session that answers SELECT 1 (or any answer
// to it but silence), a refusal of the session, or nothing within `until`.
enum class HostAnswer : std::uint8_t { kServed, kRefused, kSilent };

HostAnswer check_host(const ConnectOptions& o, const detail::ConnectionAccess::HostKeywords& host,
                      TimePoint until) {
  Clock& clock = o.clock != nullptr ? *o.clock : Clock::system();
  bool timed_out = false;
  Result<Connection> conn = detail::ConnectionAccess::open_one(o, host, until, &timed_out);
  if (!conn.ok()) return timed_out ? HostAnswer::kSilent : HostAnswer::kRefused;
  // The exchange's cancel grace comes on top of its deadline: leave room for it.
  constexpr Duration kGrace = std::chrono::milliseconds(250);
  conn->set_deadline(std::max(clock.now() + std::chrono::milliseconds(50), until - kGrace));
  Result<Rows> r = conn->query("SELECT 1");
  if (r.ok() || !r.status().sqlstate().empty() || conn->is_open() ||
      r.status().code() != Code::kDeadlineExceeded) {
    return HostAnswer::kServed;
  }
  return HostAnswer::kSilent;
}

}  // namespace

Result<Connection> Connection::open(const ConnectOptions& options, TimePoint deadline) {
  if (options.conninfo.empty()) {
    return Status(Code::kInvalidArgument, "ConnectOptions::conninfo is empty");
  }
  Clock& clock = options.clock != nullptr ? *options.clock : Clock::system();
  const TimePoint until = std::min(deadline, clock.now() + options.connect_timeout);
  const Hosts hosts = hosts_of(options);
  const std::size_t n = hosts.count();
  if (n <= 1) return detail::ConnectionAccess::open_one(options, {}, until);
  // Several hosts: each in turn, from the one that answered last, each with a deadline of
  // its own (host_connect_timeout; the last one tried gets what is left), so that a host
  // that accepts the connection and then says nothing is skipped. Hosts a check found silent
  // come last, and never get more than host_connect_timeout.
  // Whether this connect probes a server found silent is decided once, here: a silence found
  // while an earlier host refused it must end this connect, not make the next host's a
  // probe that waits out host_connect_timeout.
  const auto probe = options.watch != nullptr && options.watch->silent()
                         ? detail::ConnectionAccess::Probe::kYes
                         : detail::ConnectionAccess::Probe::kNo;
  const std::size_t first = host_memory().preferred(options.conninfo) % n;
  std::vector<std::size_t> order(n);
  std::vector<std::shared_ptr<detail::ServerWatch>> watches(n);
  for (std::size_t k = 0; k < n; ++k) {
    order[k] = (first + k) % n;
    watches[order[k]] = detail::host_watch(hosts.name(order[k]));
  }
  std::stable_partition(order.begin(), order.end(),
                        [&](std::size_t i) { return !watches[i]->silent(); });
  Status last;
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = order[k];
    const TimePoint now = clock.now();
    if (now >= until) break;
    const bool silent = watches[i]->silent();
    const TimePoint host_until =
        k + 1 == n && !silent ? until : std::min(until, now + options.host_connect_timeout);
    Result<Connection> c =
        detail::ConnectionAccess::open_one(options, hosts.pick(i), host_until, nullptr, probe);
    if (c.ok()) {
      if (i != first) host_memory().remember(options.conninfo, i);
      watches[i]->set_silent(false);  // it answered
      detail::ConnectionAccess::set_host(*c, std::move(watches[i]));
      return c;
    }
    last = Status(c.status()).annotate("host " + hosts.name(i));
  }
  if (last.ok()) {
    last = Status(Code::kUnavailable, "no host answered within the deadline",
                  classify_pg_connect_failure().fault);
    last.with_sqlstate("");
  }
  return last;
}

namespace {

// A conninfo's keywords that have a value (libpq's parse), but its hosts and ports.
struct Parsed {
  std::vector<std::pair<std::string, std::string>> settings;
  std::vector<std::string> host;
  std::vector<std::string> port;
};

Result<Parsed> parse_conninfo(const std::string& conninfo, std::size_t which) {
  char* err = nullptr;
  PQconninfoOption* options = PQconninfoParse(conninfo.c_str(), &err);
  if (options == nullptr) {
    std::string why = err != nullptr ? err : "out of memory";
    if (err != nullptr) PQfreemem(err);
    while (!why.empty() && why.back() == '\n')
      why.pop_back();
    return Status(Code::kInvalidArgument, "pg::any_of: conninfo " + std::to_string(which + 1) +
                                              " cannot be parsed: " + why);
  }
  Parsed p;
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    const std::string_view key(o->keyword);
    if (key == "host") {
      p.host = split_list(o->val);
    } else if (key == "port") {
      p.port = split_list(o->val);
    } else {
      p.settings.emplace_back(o->keyword, o->val);
    }
  }
  PQconninfoFree(options);
  if (p.host.empty()) p.host.emplace_back();  // libpq's default host
  if (p.port.size() == 1) p.port.resize(p.host.size(), p.port.front());
  if (p.port.empty()) p.port.resize(p.host.size());  // libpq's default port
  if (p.port.size() != p.host.size()) {
    return Status(Code::kInvalidArgument, "pg::any_of: conninfo " + std::to_string(which + 1) +
                                              " names " + std::to_string(p.host.size()) +
                                              " hosts and " + std::to_string(p.port.size()) +
                                              " ports");
  }
  return p;
}

// A key=value conninfo's value, quoted as libpq reads it.
std::string quoted(std::string_view value) {
  std::string out = "'";
  for (const char c : value) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out + "'";
}

// The name of the first setting of `a` that `b` lacks or holds with another value.
std::optional<std::string> first_not_in(const std::vector<std::pair<std::string, std::string>>& a,
                                        const std::vector<std::pair<std::string, std::string>>& b) {
  for (const auto& setting : a) {
    if (std::find(b.begin(), b.end(), setting) == b.end()) return setting.first;
  }
  return std::nullopt;
}

std::string joined(const std::vector<std::string>& list) {
  std::string out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (i > 0) out += ',';
    out += list[i];
  }
  return out;
}

}  // namespace

Result<std::string> any_of(std::span<const std::string> conninfos) {
  if (conninfos.empty()) return Status(Code::kInvalidArgument, "pg::any_of: no conninfo given");
  Parsed all;
  for (std::size_t i = 0; i < conninfos.size(); ++i) {
    Result<Parsed> p = parse_conninfo(conninfos[i], i);
    if (!p.ok()) return p.status();
    if (i == 0) {
      all.settings = p->settings;
    } else if (p->settings != all.settings) {
      // Name the first setting that differs (not its value: it may be a password).
      const std::string differs =
          first_not_in(p->settings, all.settings)
              .value_or(first_not_in(all.settings, p->settings).value_or(""));
      return Status(Code::kInvalidArgument, "pg::any_of: conninfo " + std::to_string(i + 1) +
                                                " differs from the first in '" + differs +
                                                "' (only hosts and ports may differ)");
    }
    all.host.insert(all.host.end(), p->host.begin(), p->host.end());
    all.port.insert(all.port.end(), p->port.begin(), p->port.end());
  }
  std::string out = "host=" + quoted(joined(all.host)) + " port=" + quoted(joined(all.port));
  for (const auto& [key, value] : all.settings)
    out += " " + key + "=" + quoted(value);
  return out;
}

std::size_t detail::ConnectionAccess::host_count(const std::string& conninfo) {
  ConnectOptions o;
  o.conninfo = conninfo;
  return hosts_of(o).count();
}

detail::ConnectionAccess::HostKeywords detail::ConnectionAccess::host_keywords(
    const ConnectOptions& options, std::size_t i) {
  const Hosts hosts = hosts_of(options);
  if (hosts.count() <= 1 || i >= hosts.count()) return {};
  return hosts.pick(i);
}

std::size_t detail::ConnectionAccess::preferred_host(const std::string& conninfo) {
  return host_memory().preferred(conninfo);
}

void detail::ConnectionAccess::remember_host(const std::string& conninfo, std::size_t host) {
  host_memory().remember(conninfo, host);
}

void detail::ConnectionAccess::ask_for_writer(ConnectOptions& options) {
  if (hosts_of(options).count() <= 1) return;
  if (options.conninfo.find("target_session_attrs") != std::string::npos) return;
  for (const auto& [key, value] : options.keywords) {
    if (key == "target_session_attrs") return;
  }
  options.keywords.emplace_back("target_session_attrs", "read-write");
}

Liveness::CheckResult detail::ConnectionAccess::check_server(const ConnectOptions& options,
                                                             TimePoint deadline) {
  ConnectOptions o = options;
  o.watch = nullptr;  // neither counted in the liveness it feeds nor woken by its silence
  Clock& clock = o.clock != nullptr ? *o.clock : Clock::system();
  const Hosts hosts = hosts_of(o);
  const std::size_t n = std::max<std::size_t>(1, hosts.count());
  // Several hosts, each with its share of the time (a silent one cannot hide the others),
  // the one in use first: the server is there when one of them gives a session that answers
  // (it is then the one to use). A host that refuses (a standby, for target_session_attrs=
  // read-write, before its promotion) serves nobody: when no host serves and one of them said
  // nothing at all, the server is silent. When every host refused, the refusals are the
  // answer (the pools' refusal paths take it from there), as on one host. Every host is
  // asked, also after one served: each host's own watch (host_watch()) learns whether it
  // answered, so that work waiting on a host that went silent while another one took over
  // (a frozen primary, its standby promoted) gives up, and its idle connections go.
  const std::size_t first = n > 1 ? host_memory().preferred(o.conninfo) % n : 0;
  std::size_t refused = 0;
  bool served = false;
  std::vector<std::pair<std::size_t, bool>> heard;  // (host, silent), set once all were asked
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = (first + k) % n;
    const TimePoint now = clock.now();
    if (now >= deadline) break;
    const TimePoint until = now + (deadline - now) / static_cast<long>(n - k);
    const HostAnswer a = check_host(o, n > 1 ? hosts.pick(i) : HostKeywords{}, until);
    if (n > 1) heard.emplace_back(i, a == HostAnswer::kSilent);
    if (a == HostAnswer::kRefused) ++refused;
    if (a == HostAnswer::kServed && !served) {
      served = true;
      if (n > 1 && i != first) host_memory().remember(o.conninfo, i);
    }
  }
  // Only now, so that work given up on a silent host does not try again before the
  // server's own verdict (set by the caller right after this returns) is known.
  for (const auto& [i, silent] : heard)
    host_watch(hosts.name(i))->set_silent(silent);
  if (served || refused == n) return Liveness::CheckResult::kAnswered;
  return Liveness::CheckResult::kSilent;
}

}  // namespace holdfast::pg
