#include "drill_pg_proxy.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

namespace holdfast::panel::drill {
namespace {

constexpr std::size_t kPipeBytes = std::size_t{64} * 1024;
// The most a link holds back while its server's answers are delayed: past it the proxy stops
// reading from that server until some is passed on.
constexpr std::size_t kMaxDelayedBytes = std::size_t{1024} * 1024;

using SteadyTime = std::chrono::steady_clock::time_point;

// What a server sent while its answers are delayed, and when it may be passed on.
struct Delayed {
  SteadyTime due;
  std::string bytes;
};

// Bytes read from one side and not yet written to the other.
struct Pipe {
  std::unique_ptr<char[]> data = std::make_unique<char[]>(kPipeBytes);
  std::size_t begin = 0, end = 0;
  [[nodiscard]] bool empty() const { return begin == end; }
  [[nodiscard]] bool full() const { return end == kPipeBytes && begin == 0; }
  // Room at the end, moving what is left to the front when the end is reached.
  std::size_t room() {
    if (end == kPipeBytes && begin > 0) {
      std::memmove(data.get(), data.get() + begin, end - begin);
      end -= begin;
      begin = 0;
    }
    return kPipeBytes - end;
  }
};

struct Link;

// One side of a proxied connection: the client's socket or the one to the primary.
struct End {
  Link* link = nullptr;
  bool server = false;
  int fd = -1;
  std::uint32_t mask = 0;  // the interest registered with epoll
  bool eof = false;        // it closed its sending side
};

struct Link {
  Link() {
    client.link = this;
    server.link = this;
    server.server = true;
  }
  End client, server;
  Pipe to_server, to_client;
  bool connecting = false;  // the connect to the primary is under way
  bool closed = false;      // freed at the end of the loop's turn
  bool broken = false;      // a side failed during a blackhole: closed when it ends
  // The server's bytes held back by a delay, oldest first (passed on in order, also after
  // the delay ends).
  std::deque<Delayed> delayed;
  std::size_t delayed_bytes = 0;
};

void no_delay(int fd) {
  const int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

Status os_error(const char* what) {
  return Status(Code::kFailedPrecondition,
                fmt::format("proxy: {}: {}", what, std::strerror(errno)));
}

}  // namespace

// The proxy's thread: its links and their epoll registrations.
struct TcpProxy::Loop {
  explicit Loop(TcpProxy& p) : proxy(p) {}
  ~Loop() {
    for (auto& [raw, link] : links) {
      for (End* e : {&link->client, &link->server}) {
        if (e->fd >= 0) ::close(e->fd);
      }
    }
  }
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  void run() {
    std::array<epoll_event, 128> events{};
    bool blackholed = proxy.blackhole_.load();
    while (!proxy.stop_.load()) {
      const int n = ::epoll_wait(proxy.epoll_fd_, events.data(), static_cast<int>(events.size()),
                                 release_due(blackholed));
      if (n < 0 && errno != EINTR) return;
      for (int i = 0; i < n; ++i) {
        void* tag = events[static_cast<std::size_t>(i)].data.ptr;
        const std::uint32_t ev = events[static_cast<std::size_t>(i)].events;
        if (tag == &proxy.listen_fd_) {
          accept_all(blackholed);
        } else if (tag == &proxy.wake_fd_) {
          std::uint64_t count = 0;
          (void)!::read(proxy.wake_fd_, &count, sizeof count);
        } else {
          handle(*static_cast<End*>(tag), ev, blackholed);
        }
      }
      if (const bool now = proxy.blackhole_.load(); now != blackholed) {
        blackholed = now;
        for (auto& [raw, link] : links) {
          if (link->closed) continue;
          if (!blackholed && link->broken) {
            close(*link);
            continue;
          }
          if (!blackholed && link->server.fd < 0) connect_upstream(*link);
          watch(*link, blackholed);
        }
      }
      free_closed();
    }
  }

  // Passes on the delayed bytes that are due (not while blackholed); returns the epoll
  // timeout until the next are (-1: none waits).
  int release_due(bool blackholed) {
    if (blackholed) return -1;
    const SteadyTime now = std::chrono::steady_clock::now();
    SteadyTime next = SteadyTime::max();
    for (auto& [raw, link] : links) {
      Link& l = *link;
      if (l.closed || l.delayed.empty()) continue;
      while (!l.delayed.empty() && l.delayed.front().due <= now) {
        Delayed& d = l.delayed.front();
        const std::size_t room = l.to_client.room();
        const std::size_t n = std::min(room, d.bytes.size());
        if (n == 0) break;
        std::memcpy(l.to_client.data.get() + l.to_client.end, d.bytes.data(), n);
        l.to_client.end += n;
        l.delayed_bytes -= n;
        if (n == d.bytes.size()) {
          l.delayed.pop_front();
        } else {
          d.bytes.erase(0, n);
        }
      }
      if (l.client.fd >= 0 && !l.to_client.empty()) flush(l.client);
      if (l.closed) continue;
      if (!l.delayed.empty()) next = std::min(next, l.delayed.front().due);
      if (l.server.eof && l.delayed.empty() && l.to_client.empty()) {
        close(l);
        continue;
      }
      watch(l, false);
    }
    free_closed();
    if (next == SteadyTime::max()) return -1;
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - now).count();
    return static_cast<int>(std::clamp<long long>(ms, 1, 1000));
  }

  // Reads what the server of `l` sent into its delayed queue, due `delay` from now.
  void hold_back(End& e, std::chrono::milliseconds delay) {
    Link& l = *e.link;
    char buf[16384];
    ssize_t n;
    do {
      n = ::recv(e.fd, buf, sizeof buf, 0);
    } while (n < 0 && errno == EINTR);
    if (n > 0) {
      l.delayed.push_back(Delayed{std::chrono::steady_clock::now() + delay,
                                  std::string(buf, static_cast<std::size_t>(n))});
      l.delayed_bytes += static_cast<std::size_t>(n);
      proxy.to_client_ += static_cast<std::uint64_t>(n);
    } else if (n == 0) {
      e.eof = true;
      if (l.delayed.empty() && l.to_client.empty()) close(l);
    } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
      close(l);
    }
  }

  static Pipe& filled_by(End& e) { return e.server ? e.link->to_client : e.link->to_server; }
  static Pipe& drained_to(End& e) { return e.server ? e.link->to_server : e.link->to_client; }
  static End& other(End& e) { return e.server ? e.link->client : e.link->server; }

  void accept_all(bool blackholed) {
    for (;;) {
      const int fd = ::accept4(proxy.listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or a client that gave up already
      no_delay(fd);
      auto link = std::make_unique<Link>();
      Link& l = *link;
      l.client.fd = fd;
      links.emplace(&l, std::move(link));
      ++proxy.accepted_;
      ++proxy.open_;
      add(l.client);
      if (!blackholed) connect_upstream(l);
      watch(l, blackholed);
    }
  }

  void connect_upstream(Link& l) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      close(l);
      return;
    }
    no_delay(fd);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<std::uint16_t>(proxy.upstream_port_));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    l.server.fd = fd;
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) < 0) {
      if (errno != EINPROGRESS) {
        close(l);
        return;
      }
      l.connecting = true;
    }
    add(l.server);
  }

  void handle(End& e, std::uint32_t ev, bool blackholed) {
    Link& l = *e.link;
    if (l.closed) return;
    if (blackholed) {
      // Only a failed socket reports while nothing is watched: remember it and stop
      // watching (level-triggered, it would report again at once).
      if ((ev & (EPOLLERR | EPOLLHUP)) != 0) {
        l.broken = true;
        for (End* side : {&l.client, &l.server})
          remove(*side);
      }
      return;
    }
    if (e.eof && (ev & (EPOLLERR | EPOLLHUP)) != 0) {
      // Closed both ways while what it sent still waits: it would report again at once.
      remove(e);
    }
    if (e.server && l.connecting) {
      int err = 0;
      socklen_t len = sizeof err;
      if (::getsockopt(e.fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0) {
        close(l);
        return;
      }
      l.connecting = false;
      flush(e);
    } else {
      if ((ev & (EPOLLIN | EPOLLERR | EPOLLHUP)) != 0) receive(e);
      if (!l.closed && (ev & EPOLLOUT) != 0) flush(e);
    }
    if (!l.closed) watch(l, false);
  }

  // Reads what `e` sent and passes it on at once (a server's, while its answers are
  // delayed, once the delay has passed).
  void receive(End& e) {
    Link& l = *e.link;
    if (e.server) {
      const std::chrono::milliseconds delay(proxy.delay_ms_.load());
      if (delay.count() > 0 || !l.delayed.empty()) {
        hold_back(e, delay);
        return;
      }
    }
    Pipe& p = filled_by(e);
    const std::size_t room = p.room();
    if (room > 0) {
      ssize_t n;
      do {
        n = ::recv(e.fd, p.data.get() + p.end, room, 0);
      } while (n < 0 && errno == EINTR);
      if (n > 0) {
        p.end += static_cast<std::size_t>(n);
        (e.server ? proxy.to_client_ : proxy.to_server_) += static_cast<std::uint64_t>(n);
      } else if (n == 0) {
        e.eof = true;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
        close(l);
        return;
      }
    }
    End& to = other(e);
    if (to.fd >= 0 && !(to.server && l.connecting)) flush(to);
    if (!l.closed && e.eof && p.empty()) close(l);
  }

  // Writes what is waiting for `e`.
  void flush(End& e) {
    Link& l = *e.link;
    Pipe& p = drained_to(e);
    while (!p.empty()) {
      const ssize_t n = ::send(e.fd, p.data.get() + p.begin, p.end - p.begin, MSG_NOSIGNAL);
      if (n > 0) {
        p.begin += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      close(l);
      return;
    }
    p.begin = p.end = 0;
    // All it sent before closing is through.
    if (other(e).eof && (e.server || l.delayed.empty())) close(l);
  }

  void add(End& e) {
    epoll_event ev{};
    ev.events = 0;
    ev.data.ptr = &e;
    if (::epoll_ctl(proxy.epoll_fd_, EPOLL_CTL_ADD, e.fd, &ev) == 0) e.mask = 0;
  }
  void remove(End& e) {
    if (e.fd >= 0) (void)::epoll_ctl(proxy.epoll_fd_, EPOLL_CTL_DEL, e.fd, nullptr);
  }

  // Registers what each side of `l` waits for: nothing while blackholed.
  void watch(Link& l, bool blackholed) {
    if (l.broken) return;
    for (End* e : {&l.client, &l.server}) {
      if (e->fd < 0) continue;
      std::uint32_t want = 0;
      if (blackholed) {
        want = 0;
      } else if (e->server && l.connecting) {
        want = EPOLLOUT;
      } else {
        Pipe& in = filled_by(*e);
        const bool holding = e->server && l.delayed_bytes >= kMaxDelayedBytes;
        if (!e->eof && !in.full() && !holding) want |= EPOLLIN;
        if (!drained_to(*e).empty()) want |= EPOLLOUT;
      }
      if (want == e->mask) continue;
      epoll_event ev{};
      ev.events = want;
      ev.data.ptr = e;
      if (::epoll_ctl(proxy.epoll_fd_, EPOLL_CTL_MOD, e->fd, &ev) == 0) e->mask = want;
    }
  }

  void close(Link& l) {
    if (l.closed) return;
    l.closed = true;
    for (End* e : {&l.client, &l.server}) {
      if (e->fd < 0) continue;
      remove(*e);
      ::close(e->fd);
      e->fd = -1;
    }
    --proxy.open_;
    closed.push_back(&l);
  }

  void free_closed() {
    for (Link* l : closed)
      links.erase(l);
    closed.clear();
  }

  TcpProxy& proxy;
  std::unordered_map<Link*, std::unique_ptr<Link>> links;
  std::vector<Link*> closed;  // this turn's, freed at its end
};

Result<std::unique_ptr<TcpProxy>> TcpProxy::start(int upstream_port) {
  auto p = std::unique_ptr<TcpProxy>(new TcpProxy());
  p->upstream_port_ = upstream_port;
  p->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (p->listen_fd_ < 0) return os_error("socket");
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  at.sin_port = 0;
  if (::bind(p->listen_fd_, reinterpret_cast<const sockaddr*>(&at), sizeof at) < 0)
    return os_error("bind");
  if (::listen(p->listen_fd_, 512) < 0) return os_error("listen");
  socklen_t len = sizeof at;
  if (::getsockname(p->listen_fd_, reinterpret_cast<sockaddr*>(&at), &len) < 0)
    return os_error("getsockname");
  p->port_ = ntohs(at.sin_port);
  p->epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (p->epoll_fd_ < 0) return os_error("epoll_create1");
  p->wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (p->wake_fd_ < 0) return os_error("eventfd");
  for (int* fd : {&p->listen_fd_, &p->wake_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = fd;
    if (::epoll_ctl(p->epoll_fd_, EPOLL_CTL_ADD, *fd, &ev) < 0) return os_error("epoll_ctl");
  }
  TcpProxy* raw = p.get();
  p->thread_ = std::thread([raw] {
    Loop loop(*raw);
    loop.run();
  });
  return p;
}

TcpProxy::~TcpProxy() {
  stop_ = true;
  wake();
  if (thread_.joinable()) thread_.join();
  for (int fd : {listen_fd_, epoll_fd_, wake_fd_}) {
    if (fd >= 0) ::close(fd);
  }
}

void TcpProxy::set_blackhole(bool on) noexcept {
  blackhole_ = on;
  wake();
}

void TcpProxy::set_answer_delay(std::chrono::milliseconds delay) noexcept {
  delay_ms_ = delay.count();
  wake();
}

void TcpProxy::wake() const noexcept {
  if (wake_fd_ < 0) return;
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

TcpProxy::Counters TcpProxy::counters() const noexcept {
  return {accepted_.load(), open_.load(), to_server_.load(), to_client_.load()};
}

}  // namespace holdfast::panel::drill
