// HttpServer: the panel's one HTTP/1.1 server (DESIGN §8; docs/adr/0026-one-http-server.md).
//
// Boost.Beast on Asio C++20 coroutines. One event-loop thread owns every connection: it
// accepts, reads each request with Beast's parser against the panel's limits, and writes
// each answer, with no thread per connection. What it does before any route runs:
//   - a deadline for each phase on the connection's tcp_stream: the head (which is also the
//     keep-alive idle timeout), the body, the whole answer; a client that misses one gets
//     408 (or, idle between requests, a quiet close);
//   - the parser's own limits: a head over max_head_bytes is 431 as soon as that many bytes
//     have come; a body over its route's limit (forms max_form_bytes, others
//     max_body_bytes) is 413 from its Content-Length, before a byte of it is read;
//   - one Host field, naming this server (Options::allowed_hosts): 400 or 421 otherwise
//     (DNS rebinding);
//   - no ranges: every answer is whole (no range amplification), Range is ignored;
//   - every byte bounded before it is kept: each connection reads into a buffer of
//     max_read_buffer_bytes, so a head, chunk line or trailer section that does not fit is
//     refused at once; a chunk extension over max_chunk_extension_bytes is 400; trailer
//     fields are 400 (never merged into the head); a Transfer-Encoding other than exactly
//     "chunked", or beside a Content-Length, is 400 (RFC 9112 6.1: no smuggling).
// Then the request runs on a worker: light routes (/healthz, /metrics, the sign-in page;
// is_light()) on a few workers of their own, so they never wait behind database work; the
// routes given to serve_async() as coroutines on `async_workers` threads, where a wait
// holds no thread; the rest on `heavy_workers`. A lane whose workers and queue are all
// taken answers 503 with Retry-After at once. Keep-alive is honoured (HTTP/1.1 by
// default), so a client need not open a connection per request.
//
// Every open connection counts against max_connections, whatever it is doing; an eighth of
// them is kept for the light routes (a request of another route that would take one gets
// 503 at once). When they are all open, a newcomer is let in and the address holding the
// most gives up the one it has been idle on longest (503 when it had sent part of a
// request, else a quiet close), failing that the answer it has been receiving longest:
// slow clients cannot hold the door shut, and one address cannot crowd the others out.
// When nothing may be cut the newcomer is told 503 at once. One address holds at most
// max_connections_per_address, and at most a quarter of the light lane's places.
//
// Thread safety: start() and stop() from one thread; stop() is idempotent. The handler is
// called on the worker threads, several at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "holdfast/core/status.hpp"
#include "http_message.hpp"
#include "traffic_ring.hpp"

namespace holdfast::panel {

class HttpServer {
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
    int heavy_workers = 16;        // database-bound requests served at once
    int light_workers = 4;         // light requests served at once
    std::size_t heavy_queue = 64;  // database-bound requests waiting for a worker
    std::size_t light_queue = 64;
    // Threads the async routes (serve_async()) run on, each its own event loop: what their
    // coroutines do between waits, blocking driver calls included, runs there, so size it
    // to the database's connections. 0: no async lane (every route on the workers).
    int async_workers = 0;
    // Async requests in flight at once (waiting costs them no thread); past it, 503.
    std::size_t max_async_requests = 256;
    // Threads for the async routes' CPU-heavy work (cpu_executor()), so that it never
    // stalls an event loop of the lane: at most this many such jobs run at once, the others
    // wait their turn holding no thread.
    int async_cpu_workers = 2;
    // For the whole request head; also how long a keep-alive connection may stay idle.
    std::chrono::milliseconds head_deadline{5000};
    std::chrono::milliseconds body_deadline{10000};  // for the whole body
    std::chrono::milliseconds send_deadline{10000};  // for writing the whole answer
    // The request line and header fields together (Beast's header_limit): a 9,000-byte
    // header line is refused with 431 as soon as this much has come.
    std::size_t max_head_bytes = 8 * 1024;
    // Header fields in one request head: more gets 431 before any work (each field is a
    // string pair the route's Request holds; 8 KiB of "a:\r\n" lines would be 2,000).
    std::size_t max_header_fields = 100;
    std::size_t max_form_bytes = 8 * 1024;   // application/x-www-form-urlencoded
    std::size_t max_body_bytes = 64 * 1024;  // any other body
    // Each connection's read buffer: what the parser has not taken yet (the head, a chunk
    // line, a chunked body's trailer section) must fit in it. A line that never ends is
    // refused when it fills the buffer (431 in the head, 400 in the body), so a client
    // cannot make the server buffer more than this on a connection, whatever it sends.
    std::size_t max_read_buffer_bytes = 16 * 1024;
    // One chunk's extensions (";name=value..."): longer is 400. The panel reads none.
    std::size_t max_chunk_extension_bytes = 256;
    // Client connections open, whatever they are doing: reading a request, waiting for its
    // answer, receiving it (at least 1). At start() this is lowered to fit the process's
    // open-file limit, leaving room for the databases. An eighth of them (at least one) is
    // kept for the light routes: a request of another route that would take one of those
    // is answered 503 at once.
    int max_connections = 1024;
    // Connections one address may hold open; a newcomer past it makes room among that
    // address's own (its longest idle one, else its answer that has been sent longest).
    // With max_read_buffer_bytes and the body limits, this bounds what one address can make
    // the server hold (256 x about 100 KiB).
    int max_connections_per_address = 256;
    // Sent on every answer unless the route set a header of that name (the panel's
    // security headers).
    std::vector<std::pair<std::string, std::string>> default_headers;
    // Stamps Request::received and counts own_answers() per second; the panel's TrafficRing
    // should be on the same clock. Outlives the server; null: the system clock.
    Clock* clock = &Clock::system();
  };

  // Serves one request: fills `res` from `req`. Called on a worker thread; an exception it
  // throws is answered 500.
  using Handler = std::function<void(const http::Request& req, http::Response& res)>;
  // Serves one request as a coroutine on one of the async lane's event loops (its executor:
  // co_await boost::asio::this_coro::executor), holding no thread while it waits; `req`
  // and `res` live until it ends. An exception it throws is answered 500.
  using AsyncHandler =
      std::function<boost::asio::awaitable<void>(const http::Request& req, http::Response& res)>;
  // Says, on the event loop, whether a request (not a light one) goes to the AsyncHandler.
  // Cheap and thread-safe.
  using AsyncRoutes = std::function<bool(const http::Request& req)>;
  // What lives on the async lane's first event loop (a database client whose round trips
  // wait there): `started` is called by start() with that loop's executor before any request
  // comes; `stopped` by stop() once every thread of the server has ended, while the loops
  // still exist (their unfinished operations are destroyed with them right after), so that
  // what `started` made can be let go of before its loop goes. Either may be empty.
  struct LaneHooks {
    std::function<void(const boost::asio::any_io_executor& loop)> started;
    std::function<void()> stopped;
  };

  // What the server has done (for tests and /metrics).
  struct Counters {
    std::atomic<std::uint64_t> accepted{0};       // connections
    std::atomic<std::uint64_t> served{0};         // requests handed to the handler
    std::atomic<std::uint64_t> served_async{0};   // of which to the AsyncHandler
    std::atomic<std::uint64_t> shed_503{0};       // a lane full, or a connection cut to make room
    std::atomic<std::uint64_t> timed_out_408{0};  // head or body deadline
    std::atomic<std::uint64_t> refused_4xx{0};    // 400, 413, 421, 431
    std::atomic<std::uint64_t> answers_cut{0};    // not read by the client within send_deadline
  };

  HttpServer(Options options, Handler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Before start(): the requests `routes` accepts are served by `handler` on the async lane
  // (Options::async_workers > 0), the others by the Handler.
  void serve_async(AsyncRoutes routes, AsyncHandler handler, LaneHooks hooks = {});
  // Where an AsyncHandler runs CPU-heavy work (Options::async_cpu_workers threads):
  //   co_await boost::asio::co_spawn(server.cpu_executor(), job(), boost::asio::use_awaitable);
  // resumes the handler on its own event loop when the job is done. A job still queued when
  // the server stops is dropped with its request. REQUIRES: started with an async lane.
  [[nodiscard]] boost::asio::any_io_executor cpu_executor() const;

  // Binds, listens and starts the event loop and the workers. A port in use is
  // UNAVAILABLE, a host that is not an address or a name of one INVALID_ARGUMENT, each
  // naming the address and the reason.
  Status start();
  // Stops accepting, closes every connection, lets the requests being served finish and
  // joins every thread. Idempotent.
  void stop() noexcept;
  [[nodiscard]] int port() const noexcept { return port_; }
  // Options::max_connections as start() fitted it to the open-file limit.
  [[nodiscard]] int max_connections() const noexcept { return max_connections_; }
  [[nodiscard]] const Counters& counters() const noexcept { return counters_; }
  // The answers the server makes itself (refusals, its 503s), per second on Options::clock;
  // the handler's answers are the panel's to count.
  [[nodiscard]] const TrafficRing& own_answers() const noexcept { return own_answers_; }

  // Reads one request from `bytes` as a connection would (Beast's parser with the limits of
  // `options`, then the Host and body checks): 200 with `out` filled, the status a
  // connection would be refused with (400, 413, 421, 431), or 0 when `bytes` end before
  // the request does. For tests and the fuzzer; any bytes are fine.
  [[nodiscard]] static int parse_request(std::string_view bytes, const Options& options,
                                         http::Request& out);

  // True for a request that never touches the database: it has workers of its own.
  [[nodiscard]] static bool is_light(std::string_view method, std::string_view path) noexcept;
  // True when a request's Host field `host` names this server (Options::allowed_hosts).
  [[nodiscard]] static bool host_allowed(std::string_view host, const Options& options) noexcept;

 private:
  struct Impl;
  Options options_;
  Handler handler_;
  AsyncRoutes async_routes_;
  AsyncHandler async_handler_;
  LaneHooks lane_hooks_;
  int port_ = 0;
  int max_connections_ = 0;
  Counters counters_;
  TrafficRing own_answers_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace holdfast::panel
