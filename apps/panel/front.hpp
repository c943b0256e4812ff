// HttpFront: what stands between the panel's clients and its HTTP server (DESIGN §8,
// docs/adr/0009-the-panel-behind-a-front.md).
//
// cpp-httplib gives each connection a thread and puts no deadline on a request's headers:
// twenty clients that send a header line every two seconds hold twenty threads, and a
// header flood or a 400 MB body is read before any route sees it. The front owns the
// public socket instead and, on one event-loop thread, with no thread per connection:
//   - reads each request's head and body against a total deadline and size caps (head
//     bytes, header lines, body per method), answering 408, 411, 413 or 431 with a short
//     text before any work or authentication;
//   - then hands the whole request to one of a fixed set of relay threads, which send it
//     to the panel's httplib server on its private socket (Connection: close, the
//     client's address in X-Holdfast-Client, the body framed by Content-Length) and copy
//     the answer back, within send_deadline of its first byte;
//   - keeps two bulkheads: light routes (/healthz, /metrics, the sign-in page) have relays
//     of their own and never queue behind database work; database work waits in a bounded
//     queue, and when that is full the answer is an immediate 503 with Retry-After.
// One request per connection: the front closes it after the answer, so an idle keep-alive
// client holds nothing.
//
// Thread safety: start() and stop() from one thread; stop() is idempotent.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "holdfast/status.hpp"
#include "traffic_ring.hpp"

namespace holdfast::panel {

class HttpFront {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;  // 0: any free port (see port())
    // The names a request's Host may carry besides the loopback names (localhost, 127.0.0.1,
    // [::1]) and `host`, which are always allowed: a name ("panel.example", matching it with
    // any port or none) or a name and port ("panel.example:8443", only that). A request with
    // another Host gets 421, one without a Host (or with two) 400, before any work: a page
    // from another site whose name was re-pointed at this address (DNS rebinding) still
    // sends its own name.
    std::vector<std::string> allowed_hosts;
    // REQUIRED, one of them: the httplib server behind the front, on a Unix socket (the
    // panel's: only its own user can connect) or on a port of 127.0.0.1.
    std::string upstream_socket;
    int upstream_port = 0;
    // Sent upstream on every request as X-Holdfast-Front (one a client sent is dropped), so
    // the server can tell the front's requests from a local process that connects to it
    // directly. Empty: none sent.
    std::string upstream_secret;
    int heavy_relays = 12;         // database-bound requests at the server at once
    int light_relays = 4;          // light requests at the server at once
    std::size_t heavy_queue = 64;  // database-bound requests waiting for a relay
    std::size_t light_queue = 64;
    std::chrono::milliseconds head_deadline{5000};   // for the whole request head
    std::chrono::milliseconds body_deadline{10000};  // for the whole body
    std::chrono::milliseconds send_deadline{10000};  // for writing the whole answer
    std::size_t max_head_bytes = 16 * 1024;
    int max_header_lines = 100;
    std::size_t max_form_bytes = 8 * 1024;   // application/x-www-form-urlencoded
    std::size_t max_body_bytes = 64 * 1024;  // any other body
    // Client connections still sending their request (at least 1). At start() this is
    // lowered to fit the process's open-file limit, leaving room for the relays, the queues
    // and the databases. When it is full, a newcomer is let in and the address holding the
    // most connections gives up the one it has been sending longest (503): slow clients
    // cannot hold the door shut, and one address cannot crowd the others out.
    int max_connections = 1024;
    // Counts own_answers() per second; the panel's TrafficRing should be on the same clock
    // (GET /status adds the two second by second). Outlives the front; null: the system clock.
    Clock* clock = &Clock::system();
  };

  // What the front has done (for tests and /metrics).
  struct Counters {
    std::atomic<std::uint64_t> accepted{0};
    std::atomic<std::uint64_t> relayed{0};
    std::atomic<std::uint64_t> shed_503{0};       // queue full
    std::atomic<std::uint64_t> timed_out_408{0};  // head or body deadline
    std::atomic<std::uint64_t> refused_4xx{0};    // 400, 411, 413, 431
    std::atomic<std::uint64_t> answers_cut{0};    // not read by the client within send_deadline
  };

  explicit HttpFront(Options options);
  ~HttpFront();
  HttpFront(const HttpFront&) = delete;
  HttpFront& operator=(const HttpFront&) = delete;

  // Binds and starts the event loop and the relays. A port in use is a Status.
  Status start();
  void stop() noexcept;
  [[nodiscard]] int port() const noexcept { return port_; }
  // Options::max_connections as start() fitted it to the open-file limit.
  [[nodiscard]] int max_connections() const noexcept { return max_connections_; }
  [[nodiscard]] const Counters& counters() const noexcept { return counters_; }
  // The answers the front makes itself (refusals, its 503s, "the panel is starting"), per
  // second on Options::clock; the answers it relays are the panel's to count.
  [[nodiscard]] const TrafficRing& own_answers() const noexcept { return own_answers_; }

  // True for a request that never touches the database: it has relays of its own.
  [[nodiscard]] static bool is_light(std::string_view method, std::string_view path) noexcept;

  // True when a request's Host field `host` names this server (Options::allowed_hosts).
  [[nodiscard]] static bool host_allowed(std::string_view host, const Options& options) noexcept;

  // A request head, read: what to send upstream, or why not.
  struct Head {
    int status = 0;         // 0: fine; else the HTTP status to refuse it with
    std::string text;       // why, for a refusal
    std::string rewritten;  // request line and fields to send upstream, with the blank line
    std::size_t body_len = 0;
    bool light = false;
    bool expect_continue = false;
  };
  // Parses `head` (the request line and fields, each ending in CRLF, without the blank
  // line) from `client` against the limits in `options`. Pure: any bytes are fine.
  [[nodiscard]] static Head parse_head(std::string_view head, std::string_view client,
                                       const Options& options);

 private:
  struct Request {
    int fd = -1;
    std::string client;  // the peer's address
    std::string bytes;   // head (rewritten) and body, ready to send upstream
  };
  struct Lane {
    std::mutex mutex;
    std::condition_variable ready;
    std::deque<Request> queue;
    std::size_t limit = 0;
  };
  struct Conn;

  void loop();
  // Accepts every waiting connection into `conns`, making room as Options says.
  void accept_new(std::vector<std::unique_ptr<Conn>>& conns);
  // Cuts off (503) the longest-sending connection of the address that holds the most.
  void make_room(std::vector<std::unique_ptr<Conn>>& conns);
  // accept() failed with `error`, other than for want of a waiting client.
  void on_accept_failure(int error);
  // Takes a connection that is done with off its client's count.
  void forget(Conn& c);
  void relay_loop(Lane& lane);
  void relay(Request& r);
  // A connected socket to the server behind the front, or -1.
  [[nodiscard]] int connect_upstream() const;
  // Reads what `c` sent; false when it is done with (answered, refused or gone).
  bool on_readable(Conn& c);
  bool on_head(Conn& c);
  bool dispatch(Conn& c);
  void refuse(Conn& c, int status, std::string_view text, int retry_after_s = 0);

  Options options_;
  int max_connections_ = 0;
  int listen_fd_ = -1;
  int spare_fd_ = -1;  // closed to accept (and refuse) a client when descriptors run out
  std::chrono::steady_clock::time_point accept_paused_until_{};
  std::map<std::string, int> reading_by_client_;  // the event loop's connections per address
  int wake_fds_[2] = {-1, -1};                    // a pipe that wakes the loop for stop()
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  Counters counters_;
  TrafficRing own_answers_;
  Lane heavy_;
  Lane light_;
  std::thread loop_thread_;
  std::vector<std::thread> relays_;
};

}  // namespace holdfast::panel
