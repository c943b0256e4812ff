// HttpServer's insides (http_server.hpp), shared by its two files: http_server.cpp
// (connections: accepting, reading, refusing, answering; start and stop) and
// http_server_lanes.cpp (where a read request is served: the workers' lanes and the async
// lane). Private to them.
#pragma once

#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include "http_reading.hpp"
#include "http_server.hpp"

namespace holdfast::panel {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;
using net::awaitable;
inline constexpr auto kNothrow = net::as_tuple(net::use_awaitable);

// One client connection. Lives as long as its session coroutine (and any timer handler)
// holds it; touched only on the event-loop thread.
struct Conn {
  Conn(tcp::socket socket, net::io_context& io) : stream(std::move(socket)), timer(io) {}
  // What it is doing, for the connection limit: reading a request (or idle between two),
  // being served (a worker or the async lane has its request), or receiving an answer.
  enum class Phase { kReading, kServed, kSending };
  beast::tcp_stream stream;
  net::steady_timer timer;  // the head and body deadlines (a cancel, not a close: 408)
  std::uint64_t timer_generation = 0;
  std::string client;
  bool timed_out = false;
  bool evicted = false;
  // Counted against max_connections (Impl::open_count) and its address's share, from its
  // accept until its session ends or it is evicted.
  bool counted = false;
  Phase phase = Phase::kServed;
  // Its place in Impl::reading or Impl::sending, by its phase (none while served).
  std::list<Conn*>::iterator queued_at;
  std::map<std::string, int>::iterator client_count;
};

struct HttpServer::Impl {
  struct Lane {
    Lane(int workers, std::size_t queue)
        : pool(static_cast<std::size_t>(std::max(workers, 1))),
          limit(static_cast<std::size_t>(std::max(workers, 1)) + queue) {}
    net::thread_pool pool;
    std::size_t pending = 0;  // being served or queued; the event loop's
    std::size_t limit;
  };
  struct Exchange {
    http::Request req;
    http::Response res;
  };

  Impl(HttpServer& server, const Options& o)
      : self(server),
        options(o),
        clock(o.clock != nullptr ? *o.clock : Clock::system()),
        heavy(o.heavy_workers, o.heavy_queue),
        light(o.light_workers, o.light_queue) {}

  HttpServer& self;
  const Options& options;
  Clock& clock;
  net::io_context io{1};
  tcp::acceptor acceptor{io};
  Lane heavy;
  Lane light;
  std::thread loop;
  // The async lane (serve_async()): an event loop per thread, requests dealt round-robin.
  // After `io`, so that it is destroyed first: a session of `io` that awaits an async
  // request is owned by that request's completion until then.
  struct AsyncLane {
    std::vector<std::unique_ptr<net::io_context>> loops;
    std::vector<std::thread> threads;
    std::size_t next = 0;     // the event loop's
    std::size_t pending = 0;  // in flight; the event loop's
    // CPU-heavy jobs of the handlers (HttpServer::cpu_executor()).
    std::unique_ptr<net::thread_pool> cpu;
  } async;
  std::atomic<bool> stopping{false};
  // Every open connection counts against max_connections (open_count) and its address's
  // share (by_client). The ones that may be cut to make room are in `reading` (reading a
  // request, or idle between two) and `sending` (receiving an answer), each in the order
  // they began: the first of an address has been at it longest. A connection being served
  // is in neither: the workers and queues bound those, and its answer is on its way.
  std::size_t open_count = 0;
  std::map<std::string, int> by_client;
  std::list<Conn*> reading;
  std::list<Conn*> sending;
  // Connections with a request of a route that is not light being served or answered: at
  // most max_connections less the light routes' reserve (heavy_room()).
  std::size_t heavy_in_flight = 0;
  // The light lane's places each address holds (at most light_share()).
  std::map<std::string, int> light_by_client;
  std::list<std::weak_ptr<Conn>> open;  // every connection, for stop()
  std::size_t open_after_pruning = 0;

  awaitable<void> accept_loop();
  // Closes the spare descriptor, accepts one waiting client with it, answers 503 and closes
  // it, then opens the spare again.
  void refuse_with_spare() noexcept;
  // Sends the fixed "no room" 503 on `fd` without waiting (what the kernel takes), and counts
  // it; the caller closes `fd`.
  void refuse_now(int fd) noexcept;
  int spare_fd = -1;  // /dev/null, kept to be given up when descriptors run out
  awaitable<void> session(std::shared_ptr<Conn> c);
  // Reads one request into `ex`; false when the connection is done with (refused, gone).
  awaitable<bool> read_request(const std::shared_ptr<Conn>& c, beast::flat_buffer& buffer,
                               Exchange& ex, bool& keep_alive);
  // Answers `status` with a short text and closes the connection.
  awaitable<void> refuse(Conn& c, int status, std::string_view text, int retry_after_s = 0);
  // The refusal for a request that could not be read (400, 408, 413, 431, 503; -1: none).
  awaitable<void> refuse_unread(Conn& c, const reading::HeadCheck& why);
  awaitable<bool> answer(Conn& c, Exchange& ex, bool keep_alive, bool head);
  void serve(Exchange& ex) noexcept;
  // serve() as a coroutine, for co_spawn onto a worker pool (it holds `ex` meanwhile).
  awaitable<void> serve_on_worker(std::shared_ptr<Exchange> ex) {
    serve(*ex);
    co_return;
  }
  // The AsyncHandler on an async event loop (it holds `ex` meanwhile).
  awaitable<void> serve_async(std::shared_ptr<Exchange> ex);
  // Serves `ex` on the lane it belongs to; false when it was refused (503, connection
  // closed).
  awaitable<bool> dispatch(Conn& c, const std::shared_ptr<Exchange>& ex);
  void start_async_lane();
  void stop_async_lane() noexcept;

  void arm(const std::shared_ptr<Conn>& c, std::chrono::milliseconds d);
  void disarm(Conn& c);
  // Counts a new connection; false when it found no room (then it is not counted).
  bool admit(Conn& c);
  // Stops counting `c` (idempotent).
  void leave(Conn& c) noexcept;
  void set_phase(Conn& c, Conn::Phase phase);
  // The request is read (or given up): no deadline on it, and it is being served.
  void done_reading(Conn& c) {
    disarm(c);
    set_phase(c, Conn::Phase::kServed);
  }
  // Cuts one connection so that `newcomer` fits: within its own address when `own_address`,
  // else from the address holding the most; false when none may be cut.
  bool make_room(const Conn& newcomer, bool own_address);
  void evict(Conn& victim);
  // How many connections requests of the routes that are not light may hold at once.
  [[nodiscard]] std::size_t heavy_room() const;
  // How many of the light lane's places one address may hold.
  [[nodiscard]] std::size_t light_share() const {
    return std::max<std::size_t>(2, light.limit / 4);
  }
};

}  // namespace holdfast::panel
