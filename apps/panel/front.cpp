#include "front.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>

#include "security.hpp"

namespace holdfast::panel {
namespace {

using Steady = std::chrono::steady_clock;

std::string_view reason_of(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 421:
      return "Misdirected Request";
    case 431:
      return "Request Header Fields Too Large";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

bool iequals(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x | 0x20) == (y | 0x20);
         });
}

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// Writes all of `data` to a blocking socket by `until`: each send() may wait only for the
// time left, so a client that reads a trickle cannot stretch the answer past it.
bool send_all(int fd, std::string_view data, Steady::time_point until) {
  while (!data.empty()) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(until - Steady::now());
    if (left.count() <= 0) return false;
    const timeval t{static_cast<time_t>(left.count() / 1000000),
                    static_cast<suseconds_t>(left.count() % 1000000)};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &t, sizeof(t));
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

void set_timeouts(int fd, std::chrono::milliseconds send, std::chrono::milliseconds receive) {
  const auto tv = [](std::chrono::milliseconds d) {
    timeval t{};
    t.tv_sec = static_cast<time_t>(d.count() / 1000);
    t.tv_usec = static_cast<suseconds_t>((d.count() % 1000) * 1000);
    return t;
  };
  const timeval s = tv(send);
  const timeval r = tv(receive);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &s, sizeof(s));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &r, sizeof(r));
}

void set_blocking(int fd, bool blocking) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, blocking ? (flags & ~O_NONBLOCK) : (flags | O_NONBLOCK));
}

// How long the relay waits for the panel's answer: longer than any request's window.
constexpr std::chrono::milliseconds kUpstreamAnswer{30000};
// How long the loop stops accepting after accept() ran out of descriptors or memory.
constexpr std::chrono::milliseconds kAcceptPause{100};
// Descriptors kept for the panel's server, its databases and its logs.
constexpr long long kReservedDescriptors = 128;

// Options::max_connections, lowered so that the client connections, the relays (each holds
// a client, an upstream socket and the server's end of it), the queued requests and the
// reserve all fit under the soft open-file limit; at least 16 (or max_connections).
int fitted_connections(const HttpFront::Options& o) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return o.max_connections;
  }
  const long long taken = 3LL * (o.heavy_relays + o.light_relays) +
                          static_cast<long long>(o.heavy_queue + o.light_queue) +
                          kReservedDescriptors;
  const long long room = static_cast<long long>(limit.rlim_cur) - taken;
  return static_cast<int>(std::min<long long>(o.max_connections, std::max(room, 16LL)));
}

}  // namespace

// A client connection being read by the event loop.
struct HttpFront::Conn {
  int fd = -1;
  std::string client;
  std::string buf;
  Steady::time_point deadline;
  bool in_body = false;
  std::size_t head_end = 0;  // bytes of the head in `buf` (with its blank line)
  std::size_t body_len = 0;
  std::string head;  // the head to send upstream
  bool light = false;
  std::map<std::string, int>::iterator per_client;  // in reading_by_client_, when counted
  bool counted = false;
};

HttpFront::HttpFront(Options options)
    : options_(std::move(options)),
      own_answers_(options_.clock != nullptr ? *options_.clock : Clock::system()) {
  heavy_.limit = options_.heavy_queue;
  light_.limit = options_.light_queue;
}

HttpFront::~HttpFront() {
  stop();
}

bool HttpFront::host_allowed(std::string_view host, const Options& options) noexcept {
  // name[:port]; an IPv6 literal keeps its brackets ("[::1]:8080").
  std::string_view name = host;
  std::string_view port;
  const std::size_t colon = host.rfind(':');
  if (colon != std::string_view::npos && host.find(']', colon) == std::string_view::npos) {
    name = host.substr(0, colon);
    port = host.substr(colon + 1);
    if (port.empty() || port.size() > 5 ||
        !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return false;
    }
  }
  if (name.empty()) return false;
  // The port does not matter for rebinding (the page's own name gives it away) and may be
  // a proxy's, so a name without a port allows any.
  for (std::string_view loopback : {"localhost", "127.0.0.1", "[::1]"}) {
    if (iequals(name, loopback)) return true;
  }
  if (iequals(name, options.host)) return true;
  for (const std::string& allowed : options.allowed_hosts) {
    if (iequals(host, allowed) || iequals(name, allowed)) return true;
  }
  return false;
}

bool HttpFront::is_light(std::string_view method, std::string_view path) noexcept {
  if (method != "GET" && method != "HEAD") return false;
  const std::string_view p = path.substr(0, path.find('?'));
  return p == "/healthz" || p == "/metrics" || p == "/login";
}

Status HttpFront::start() {
  if (options_.max_connections < 1) {
    return Status(Code::kInvalidArgument, "HttpFront: max_connections must be at least 1");
  }
  if (options_.upstream_socket.size() >= sizeof(sockaddr_un::sun_path)) {
    return Status(Code::kInvalidArgument,
                  "HttpFront: the upstream socket's path is too long: " + options_.upstream_socket);
  }
  max_connections_ = fitted_connections(options_);
  const std::string where = options_.host + ":" + std::to_string(options_.port);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(options_.port));
  if (::inet_pton(AF_INET, options_.host.c_str(), &addr.sin_addr) != 1) {
    // A name ("localhost"): its first IPv4 address.
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(options_.host.c_str(), nullptr, &hints, &found);
    if (rc != 0 || found == nullptr) {
      return Status(Code::kInvalidArgument,
                    "cannot listen on " + where + ": not an IPv4 address or a name of one (" +
                        (rc != 0 ? ::gai_strerror(rc) : "no address") + ")");
    }
    addr.sin_addr = reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr;
    ::freeaddrinfo(found);
  }
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) {
    return Status(Code::kInternal, std::string("socket() failed: ") + std::strerror(errno));
  }
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_fd_, 512) != 0) {
    const int error = errno;
    ::close(listen_fd_);
    listen_fd_ = -1;
    return Status(error == EADDRINUSE ? Code::kUnavailable : Code::kInvalidArgument,
                  "cannot listen on " + where + ": " + std::strerror(error));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  if (::pipe2(wake_fds_, O_NONBLOCK | O_CLOEXEC) != 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
    return Status(Code::kInternal, "pipe2() failed");
  }
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  for (int i = 0; i < options_.heavy_relays; ++i)
    relays_.emplace_back([this] { relay_loop(heavy_); });
  for (int i = 0; i < options_.light_relays; ++i)
    relays_.emplace_back([this] { relay_loop(light_); });
  loop_thread_ = std::thread([this] { loop(); });
  return Status();
}

void HttpFront::stop() noexcept {
  if (!loop_thread_.joinable()) return;
  stopping_ = true;
  const char byte = 1;
  (void)!::write(wake_fds_[1], &byte, 1);
  loop_thread_.join();
  for (Lane* lane : {&heavy_, &light_}) {
    std::lock_guard<std::mutex> lock(lane->mutex);
    lane->ready.notify_all();
  }
  for (std::thread& t : relays_)
    t.join();
  relays_.clear();
  for (Lane* lane : {&heavy_, &light_}) {
    for (Request& r : lane->queue)
      ::close(r.fd);
    lane->queue.clear();
  }
  ::close(listen_fd_);
  ::close(wake_fds_[0]);
  ::close(wake_fds_[1]);
  if (spare_fd_ >= 0) ::close(spare_fd_);
  listen_fd_ = wake_fds_[0] = wake_fds_[1] = spare_fd_ = -1;
}

void HttpFront::loop() {
  std::vector<std::unique_ptr<Conn>> conns;
  std::vector<pollfd> fds;
  while (!stopping_) {
    const auto now = Steady::now();
    const bool accepting = now >= accept_paused_until_;
    fds.assign(
        {{listen_fd_, static_cast<short>(accepting ? POLLIN : 0), 0}, {wake_fds_[0], POLLIN, 0}});
    auto next = now + std::chrono::seconds(1);
    if (!accepting) next = std::min(next, accept_paused_until_);
    for (const auto& c : conns) {
      fds.push_back({c->fd, POLLIN, 0});
      next = std::min(next, c->deadline);
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - now);
    ::poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(wait.count(), 0) + 1));
    if (stopping_) break;
    // Existing connections first (fds[2..] match conns, before any is added or removed).
    std::vector<std::unique_ptr<Conn>> kept;
    kept.reserve(conns.size());
    const auto after = Steady::now();
    for (std::size_t i = 0; i < conns.size(); ++i) {
      Conn& c = *conns[i];
      bool keep = true;
      if ((fds[i + 2].revents & (POLLIN | POLLHUP | POLLERR)) != 0) keep = on_readable(c);
      if (keep && after >= c.deadline) {
        ++counters_.timed_out_408;
        refuse(c, 408, "the request did not arrive in time\n");
        keep = false;
      }
      if (keep) {
        kept.push_back(std::move(conns[i]));
      } else {
        forget(c);
      }
    }
    conns.swap(kept);  // in the order they were accepted: the longest-sending first
    if ((fds[0].revents & POLLIN) != 0) accept_new(conns);
  }
  for (const auto& c : conns)
    ::close(c->fd);
  reading_by_client_.clear();
}

void HttpFront::accept_new(std::vector<std::unique_ptr<Conn>>& conns) {
  for (;;) {
    sockaddr_in peer{};
    socklen_t len = sizeof(peer);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) on_accept_failure(errno);
      return;
    }
    ++counters_.accepted;
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    char ip[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof(ip));
    c->client = ip;
    c->deadline = Steady::now() + options_.head_deadline;
    if (static_cast<int>(conns.size()) >= max_connections_) make_room(conns);
    const auto slot = reading_by_client_.try_emplace(c->client, 0).first;
    ++slot->second;
    c->per_client = slot;
    c->counted = true;
    conns.push_back(std::move(c));
  }
}

void HttpFront::make_room(std::vector<std::unique_ptr<Conn>>& conns) {
  const auto heaviest =
      std::max_element(reading_by_client_.begin(), reading_by_client_.end(),
                       [](const auto& a, const auto& b) { return a.second < b.second; });
  // conns is in the order of acceptance: the first of that address has been sending longest.
  auto victim = std::find_if(conns.begin(), conns.end(), [&](const auto& c) {
    return c->counted && c->per_client == heaviest;
  });
  if (victim == conns.end()) victim = conns.begin();
  ++counters_.shed_503;
  forget(**victim);
  refuse(**victim, 503, "too many connections; try again in a second\n", 1);
  conns.erase(victim);
}

void HttpFront::on_accept_failure(int error) {
  // Out of descriptors or memory: stop watching the socket for a moment rather than spin
  // on a backlog the loop cannot take, and answer the client at its head through the
  // spare descriptor, so that it learns to come back instead of waiting.
  accept_paused_until_ = Steady::now() + kAcceptPause;
  if ((error != EMFILE && error != ENFILE) || spare_fd_ < 0) return;
  ::close(spare_fd_);
  const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) {
    ++counters_.accepted;
    ++counters_.shed_503;
    Conn c;
    c.fd = fd;
    refuse(c, 503, "the panel has no room for another connection; try again in a second\n", 1);
  }
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void HttpFront::forget(Conn& c) {
  if (!c.counted) return;
  c.counted = false;
  if (--c.per_client->second == 0) reading_by_client_.erase(c.per_client);
}

bool HttpFront::on_readable(Conn& c) {
  char chunk[16 * 1024];
  for (;;) {
    std::size_t want = sizeof(chunk);
    if (c.in_body) want = std::min(want, c.head_end + c.body_len - c.buf.size());
    if (want == 0) return dispatch(c);
    const ssize_t n = ::recv(c.fd, chunk, want, 0);
    if (n == 0) {  // the client went away
      ::close(c.fd);
      return false;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      ::close(c.fd);
      return false;
    }
    c.buf.append(chunk, static_cast<std::size_t>(n));
    if (!c.in_body) {
      const std::size_t end = c.buf.find("\r\n\r\n");
      if (end == std::string::npos) {
        if (c.buf.size() > options_.max_head_bytes) {
          ++counters_.refused_4xx;
          refuse(c, 431, "request header fields too large\n");
          return false;
        }
        continue;
      }
      c.head_end = end + 4;
      if (c.head_end > options_.max_head_bytes) {
        ++counters_.refused_4xx;
        refuse(c, 431, "request header fields too large\n");
        return false;
      }
      if (!on_head(c)) return false;
    }
    if (c.buf.size() >= c.head_end + c.body_len) return dispatch(c);
  }
}

HttpFront::Head HttpFront::parse_head(std::string_view head, std::string_view client,
                                      const Options& options) {
  Head out;
  const auto refuse = [&out](int status, std::string text) {
    out.status = status;
    out.text = std::move(text);
    return out;
  };
  std::size_t at = head.find("\r\n");
  const std::string_view line = head.substr(0, at);
  const std::size_t sp1 = line.find(' ');
  const std::size_t sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1 ||
      line.substr(sp2 + 1).rfind("HTTP/1.", 0) != 0 ||
      line.find_first_of(std::string_view("\0\r\n", 3)) != std::string_view::npos) {
    return refuse(400, "bad request: the request line could not be read\n");
  }
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  out.rewritten.assign(line);
  out.rewritten += "\r\n";
  int lines = 0;
  bool has_length = false;
  bool form = false;
  std::size_t length = 0;
  int hosts = 0;
  std::string_view host;
  while (at != std::string_view::npos && at + 2 < head.size()) {
    const std::size_t next = head.find("\r\n", at + 2);
    const std::string_view field = head.substr(
        at + 2, next == std::string_view::npos ? std::string_view::npos : next - at - 2);
    at = next;
    if (field.empty()) continue;
    if (++lines > options.max_header_lines) {
      return refuse(431, "too many request header fields\n");
    }
    const std::size_t colon = field.find(':');
    if (colon == std::string_view::npos || colon == 0 ||
        field.find_first_of(std::string_view("\0\r\n", 3)) != std::string_view::npos) {
      return refuse(400, "bad request: a header field could not be read\n");
    }
    const std::string_view name = field.substr(0, colon);
    const std::string_view value = trim(field.substr(colon + 1));
    if (iequals(name, "Content-Length")) {
      std::size_t n = 0;
      const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (value.empty() || ec != std::errc() || p != value.data() + value.size() ||
          (has_length && n != length)) {
        return refuse(400, "bad request: Content-Length is not one number\n");
      }
      has_length = true;
      length = n;
    } else if (iequals(name, "Transfer-Encoding")) {
      return refuse(411, "send the body with a Content-Length, not in chunks\n");
    } else if (iequals(name, "Content-Type")) {
      form = value.rfind("application/x-www-form-urlencoded", 0) == 0;
    } else if (iequals(name, "Expect")) {
      out.expect_continue = iequals(value, "100-continue");
      continue;
    } else if (iequals(name, "Host")) {
      ++hosts;
      host = value;
    } else if (iequals(name, "Range") || iequals(name, "If-Range")) {
      // Every answer is whole (200): the server behind would answer a thousand overlapping
      // ranges of one page with a thousand copies of it (range amplification), and no
      // route's answer needs a part.
      continue;
    }
    if (iequals(name, "Connection") || iequals(name, "Keep-Alive") ||
        iequals(name, "Proxy-Connection") || iequals(name, "X-Holdfast-Client") ||
        iequals(name, "X-Holdfast-Front") || iequals(name, "X-Holdfast-Received")) {
      continue;
    }
    out.rewritten.append(field);
    out.rewritten += "\r\n";
  }
  if (hosts != 1) return refuse(400, "bad request: send one Host field\n");
  if (!host_allowed(host, options)) {
    return refuse(421, "misdirected request: this server does not answer for that Host\n");
  }
  const std::size_t limit = form ? options.max_form_bytes : options.max_body_bytes;
  if (length > limit) {
    return refuse(413, "request body too large: forms up to " +
                           std::to_string(options.max_form_bytes / 1024) +
                           " KiB, other bodies up to " +
                           std::to_string(options.max_body_bytes / 1024) + " KiB\n");
  }
  // The body is exactly what the front read: without a length, the server would read a
  // POST's body until the connection closed.
  if (!has_length) out.rewritten += "Content-Length: 0\r\n";
  out.rewritten += "Connection: close\r\nX-Holdfast-Client: ";
  out.rewritten.append(client);
  if (!options.upstream_secret.empty()) {
    out.rewritten += "\r\nX-Holdfast-Front: ";
    out.rewritten += options.upstream_secret;
  }
  out.rewritten += "\r\n\r\n";
  out.body_len = length;
  out.light = is_light(method, target);
  return out;
}

bool HttpFront::on_head(Conn& c) {
  Head h = parse_head(std::string_view(c.buf.data(), c.head_end - 2), c.client, options_);
  if (h.status != 0) {
    ++counters_.refused_4xx;
    refuse(c, h.status, h.text);
    return false;
  }
  c.head = std::move(h.rewritten);
  // When the panel accepted the request: its window opens then, so the time it queues here
  // and in the server counts (DESIGN.md §10).
  const Clock& clock = options_.clock != nullptr ? *options_.clock : Clock::system();
  c.head.insert(
      c.head.size() - 2,
      "X-Holdfast-Received: " + std::to_string(clock.now().time_since_epoch().count()) + "\r\n");
  c.body_len = h.body_len;
  c.in_body = true;
  c.light = h.light;
  c.deadline = Steady::now() + options_.body_deadline;
  if (h.expect_continue && h.body_len > 0) {
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    (void)::send(c.fd, kContinue.data(), kContinue.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  return true;
}

bool HttpFront::dispatch(Conn& c) {
  Request r;
  r.fd = c.fd;
  r.client = std::move(c.client);
  r.bytes = std::move(c.head);
  r.bytes.append(c.buf, c.head_end, c.body_len);
  Lane& lane = c.light ? light_ : heavy_;
  {
    std::lock_guard<std::mutex> lock(lane.mutex);
    if (lane.queue.size() < lane.limit) {
      lane.queue.push_back(std::move(r));
      lane.ready.notify_one();
      return false;
    }
  }
  ++counters_.shed_503;
  refuse(c, 503, "the panel is busy; try again in a second\n", 1);
  return false;
}

void HttpFront::refuse(Conn& c, int status, std::string_view text, int retry_after_s) {
  own_answers_.record(status, /*stale=*/false);
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason_of(status)) +
                    "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
                    std::to_string(text.size()) + "\r\nConnection: close\r\n";
  if (retry_after_s > 0) out += "Retry-After: " + std::to_string(retry_after_s) + "\r\n";
  for (const auto& [name, value] : security_headers())
    out += name + ": " + value + "\r\n";
  out += "\r\n";
  out += text;
  // Best effort, without blocking the loop: a client that does not read loses the text.
  (void)::send(c.fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(c.fd, SHUT_WR);
  ::close(c.fd);
}

void HttpFront::relay_loop(Lane& lane) {
  for (;;) {
    Request r;
    {
      std::unique_lock<std::mutex> lock(lane.mutex);
      lane.ready.wait(lock, [&] { return stopping_.load() || !lane.queue.empty(); });
      if (lane.queue.empty()) return;  // stopping
      r = std::move(lane.queue.front());
      lane.queue.pop_front();
    }
    relay(r);
    ::close(r.fd);
  }
}

int HttpFront::connect_upstream() const {
  const bool unix_socket = !options_.upstream_socket.empty();
  const int up = ::socket(unix_socket ? AF_UNIX : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (up < 0) return -1;
  set_timeouts(up, options_.send_deadline, kUpstreamAnswer);
  int rc = -1;
  if (unix_socket) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    options_.upstream_socket.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    rc = ::connect(up, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  } else {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(options_.upstream_port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc = ::connect(up, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  }
  if (rc != 0) {
    ::close(up);
    return -1;
  }
  return up;
}

void HttpFront::relay(Request& r) {
  set_blocking(r.fd, true);  // send_all() bounds each send() by the time left
  const int up = connect_upstream();
  if (up < 0 || !send_all(up, r.bytes, Steady::now() + options_.send_deadline)) {
    if (up >= 0) ::close(up);
    own_answers_.record(503, /*stale=*/false);
    static constexpr std::string_view kDown =
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 22\r\n"
        "Retry-After: 1\r\nConnection: close\r\n\r\nthe panel is starting\n";
    (void)send_all(r.fd, kDown, Steady::now() + options_.send_deadline);
    return;
  }
  ++counters_.relayed;
  // The whole answer goes to the client within send_deadline of its first byte.
  std::optional<Steady::time_point> until;
  char chunk[16 * 1024];
  for (;;) {
    const ssize_t n = ::recv(up, chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (!until) until = Steady::now() + options_.send_deadline;
    if (!send_all(r.fd, std::string_view(chunk, static_cast<std::size_t>(n)), *until)) {
      // Reset rather than close: the kernel would go on trickling what it holds.
      ++counters_.answers_cut;
      const linger reset{1, 0};
      ::setsockopt(r.fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
      ::close(up);
      return;
    }
  }
  ::close(up);
  ::shutdown(r.fd, SHUT_WR);
}

}  // namespace holdfast::panel
