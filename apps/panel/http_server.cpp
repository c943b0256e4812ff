#include "http_server_impl.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <limits>
#include <list>
#include <map>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include "http_reading.hpp"

namespace holdfast::panel {
namespace {

namespace bhttp = boost::beast::http;

// Descriptors kept for the panel's databases, its logs and the workers.
constexpr long long kReservedDescriptors = 128;
// How long the accept loop rests after accept() ran out of descriptors or memory.
constexpr std::chrono::milliseconds kAcceptPause{100};
// How long a refusal waits for the client to take it, and then for the rest of what the
// client was sending (read and dropped, so that closing does not reset the connection
// before the client has read the refusal).
constexpr std::chrono::milliseconds kRefusalSend{1000};
constexpr std::chrono::milliseconds kRefusalDrain{500};

using reading::Parser;

}  // namespace

void HttpServer::Impl::arm(const std::shared_ptr<Conn>& c, std::chrono::milliseconds d) {
  const std::uint64_t generation = ++c->timer_generation;
  c->timed_out = false;
  c->timer.expires_after(d);
  c->timer.async_wait([weak = std::weak_ptr<Conn>(c), generation](beast::error_code ec) {
    const std::shared_ptr<Conn> conn = weak.lock();
    if (ec || !conn || conn->timer_generation != generation) return;
    conn->timed_out = true;
    conn->stream.cancel();
  });
}

void HttpServer::Impl::disarm(Conn& c) {
  ++c.timer_generation;
  c.timer.cancel();
}

bool HttpServer::Impl::admit(Conn& c) {
  c.counted = true;
  ++open_count;
  c.client_count = by_client.try_emplace(c.client, 0).first;
  ++c.client_count->second;
  bool room = true;
  if (c.client_count->second > std::max(options.max_connections_per_address, 1)) {
    room = make_room(c, /*own_address=*/true);
  } else if (open_count > static_cast<std::size_t>(self.max_connections_)) {
    room = make_room(c, /*own_address=*/false);
  }
  if (!room) leave(c);
  return room;
}

void HttpServer::Impl::leave(Conn& c) noexcept {
  if (!c.counted) return;
  set_phase(c, Conn::Phase::kServed);
  c.counted = false;
  --open_count;
  if (--c.client_count->second == 0) by_client.erase(c.client_count);
}

void HttpServer::Impl::set_phase(Conn& c, Conn::Phase phase) {
  if (c.phase == phase) return;
  // Only a counted connection is in a list: leave() takes it out (through here) before it
  // stops counting, and an evicted one is never put back, so that it is never cut twice. An
  // uncounted one's phase still changes, with no list to touch (its queued_at is stale).
  if (c.counted) {
    if (c.phase == Conn::Phase::kReading) reading.erase(c.queued_at);
    if (c.phase == Conn::Phase::kSending) sending.erase(c.queued_at);
  }
  c.phase = phase;
  if (!c.counted) return;
  if (phase == Conn::Phase::kReading) c.queued_at = reading.insert(reading.end(), &c);
  if (phase == Conn::Phase::kSending) c.queued_at = sending.insert(sending.end(), &c);
}

bool HttpServer::Impl::make_room(const Conn& newcomer, bool own_address) {
  auto address = newcomer.client_count;
  if (!own_address) {
    // The address holding the most gives one up, unless that would take the newcomer's
    // address past it: then only an idle connection of any address (the longest idle).
    const auto heaviest =
        std::max_element(by_client.begin(), by_client.end(),
                         [](const auto& a, const auto& b) { return a.second < b.second; });
    if (heaviest->second > address->second) address = heaviest;
  }
  Conn* victim = nullptr;
  // Its longest idle (or slowest-reading) connection; failing that, the answer it has been
  // receiving longest: a client reading through a tiny window holds its descriptor for the
  // whole send deadline.
  for (const std::list<Conn*>* queue : {&reading, &sending}) {
    for (Conn* c : *queue) {
      if (c != &newcomer && c->client_count == address) {
        victim = c;
        break;
      }
    }
    if (victim != nullptr) break;
  }
  if (victim == nullptr && !own_address) {
    for (Conn* c : reading) {
      if (c != &newcomer) {
        victim = c;
        break;
      }
    }
  }
  if (victim == nullptr) return false;
  evict(*victim);
  return true;
}

void HttpServer::Impl::evict(Conn& victim) {
  leave(victim);
  victim.evicted = true;
  victim.stream.cancel();
}

std::size_t HttpServer::Impl::heavy_room() const {
  const int reserve = std::max(1, self.max_connections_ / 8);
  return static_cast<std::size_t>(std::max(1, self.max_connections_ - reserve));
}

awaitable<void> HttpServer::Impl::accept_loop() {
  while (!stopping) {
    auto [ec, socket] = co_await acceptor.async_accept(kNothrow);
    if (stopping || ec == net::error::operation_aborted) co_return;
    if (ec) {
      // Out of descriptors or memory: answer the client at the head of the backlog through
      // the spare descriptor, so that it learns to come back instead of waiting, and rest
      // rather than spin on a backlog we cannot take.
      if (ec == net::error::no_descriptors || ec.value() == ENFILE) refuse_with_spare();
      net::steady_timer pause(io, kAcceptPause);
      co_await pause.async_wait(kNothrow);
      continue;
    }
    ++self.counters_.accepted;
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto c = std::make_shared<Conn>(std::move(socket), io);
    const tcp::endpoint peer = c->stream.socket().remote_endpoint(ignored);
    c->client = ignored ? std::string() : peer.address().to_string();
    // The closed ones are pruned once the list has doubled since the last pruning: each
    // accept costs O(1) on average, and the list stays under twice the open connections.
    if (open.size() >= 2 * open_after_pruning + 64) {
      open.remove_if([](const std::weak_ptr<Conn>& w) { return w.expired(); });
      open_after_pruning = open.size();
    }
    if (!admit(*c)) {
      // No connection may be cut for it: told at once, without waiting on the client.
      refuse_now(c->stream.socket().native_handle());
      c->stream.socket().close(ignored);
      continue;
    }
    open.push_back(c);
    net::co_spawn(io, session(std::move(c)), net::detached);
  }
}

void HttpServer::Impl::refuse_now(int fd) noexcept {
  ++self.counters_.shed_503;
  self.own_answers_.record(503, /*stale=*/false);
  static constexpr std::string_view kFull =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
      "Content-Length: 68\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
      "the panel has no room for another connection; try again in a second\n";
  // Best effort, without blocking the loop: a client that does not read loses the text.
  (void)!::send(fd, kFull.data(), kFull.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

void HttpServer::Impl::refuse_with_spare() noexcept {
  if (spare_fd < 0) return;
  ::close(spare_fd);
  const int fd =
      ::accept4(acceptor.native_handle(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) {
    ++self.counters_.accepted;
    refuse_now(fd);
    ::close(fd);
  }
  spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

awaitable<void> HttpServer::Impl::session(std::shared_ptr<Conn> c) {
  // Bounded: a head, chunk line or trailer section that does not fit is refused, whatever
  // the client sends (Options::max_read_buffer_bytes).
  beast::flat_buffer buffer(std::max(options.max_read_buffer_bytes, options.max_head_bytes));
  for (;;) {
    auto ex = std::make_shared<Exchange>();
    bool keep_alive = false;
    // (Each co_await's result is named before it is tested: g++ 12 mishandles a co_await
    // inside a condition.)
    const bool read = co_await read_request(c, buffer, *ex, keep_alive);
    if (!read) break;
    const bool head = ex->req.method == "HEAD";
    // The light routes keep a reserve of the connections: the others may hold the rest.
    const bool heavy = !is_light(ex->req.method, ex->req.path);
    if (heavy && heavy_in_flight >= heavy_room()) {
      ++self.counters_.shed_503;
      co_await refuse(*c, 503, "the panel is busy; try again in a second\n", 1);
      break;
    }
    if (heavy) ++heavy_in_flight;
    const bool served = co_await dispatch(*c, ex);
    bool sent = false;
    if (served) {
      const bool written = co_await answer(*c, *ex, keep_alive && !stopping, head);
      sent = written;
    }
    if (heavy) --heavy_in_flight;
    // An evicted connection goes now, its descriptor with it, even when its next request is
    // already in the buffer (a read from the buffer would not see the cancel).
    if (!sent || !keep_alive || stopping || c->evicted) break;
  }
  beast::error_code ignored;
  c->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  c->stream.socket().close(ignored);
  disarm(*c);
  leave(*c);
}

awaitable<bool> HttpServer::Impl::read_request(const std::shared_ptr<Conn>& c,
                                               beast::flat_buffer& buffer, Exchange& ex,
                                               bool& keep_alive) {
  Parser parser;
  reading::limit_parser(parser, options);
  reading::BodyGuard guard(parser, options);
  set_phase(*c, Conn::Phase::kReading);
  c->stream.expires_never();
  arm(c, options.head_deadline);
  // What to answer when a read fails: nothing (status -1) when the client went away, or was
  // idle between requests and is let go; else a status and why.
  const auto failure = [&](beast::error_code e) {
    done_reading(*c);
    const bool sent_some = parser.got_some() || buffer.size() > 0;
    reading::HeadCheck out;
    out.status = -1;
    if (c->evicted) {
      if (sent_some) out.status = 503;
    } else if (c->timed_out) {
      if (sent_some) out.status = 408;
    } else if (!(stopping || e == bhttp::error::end_of_stream || e == net::error::eof ||
                 e == net::error::connection_reset || e == net::error::operation_aborted ||
                 e == net::error::bad_descriptor || e == net::error::broken_pipe)) {
      out = reading::over_limit(e, parser.is_header_done(), guard, options);
      if (out.status == 0) out.status = 400;
    }
    return out;
  };
  const auto [head_error, head_bytes] =
      co_await bhttp::async_read_header(c->stream, buffer, parser, kNothrow);
  if (head_error) {
    const reading::HeadCheck why = failure(head_error);
    co_await refuse_unread(*c, why);
    co_return false;
  }
  ex.req.received = clock.now();
  const auto& head = parser.get();
  keep_alive = head.keep_alive();
  const reading::HeadCheck check = reading::check_head(parser, options);
  if (check.status != 0) {
    done_reading(*c);
    if (check.status == 413) {
      const reading::HeadCheck why =
          reading::over_limit(bhttp::error::body_limit, true, guard, options);
      co_await refuse_unread(*c, why);
    } else {
      ++self.counters_.refused_4xx;
      co_await refuse(*c, check.status, check.why);
    }
    co_return false;
  }
  guard.head_read(parser);
  const std::size_t limit = check.body_limit;
  parser.body_limit(limit);  // a chunked body too
  if (!parser.is_done()) {
    const auto expect = head[bhttp::field::expect];
    if (reading::iequals(std::string_view(expect.data(), expect.size()), "100-continue")) {
      bhttp::response<bhttp::empty_body> go_on{bhttp::status::continue_, 11};
      c->stream.expires_after(options.send_deadline);
      const auto [write_error, written] = co_await bhttp::async_write(c->stream, go_on, kNothrow);
      if (write_error) {
        done_reading(*c);
        co_return false;
      }
      c->stream.expires_never();
    }
    arm(c, options.body_deadline);
    const auto [body_error, body_bytes] =
        co_await bhttp::async_read(c->stream, buffer, parser, kNothrow);
    if (body_error) {
      const reading::HeadCheck why = failure(body_error);
      co_await refuse_unread(*c, why);
      co_return false;
    }
  }
  done_reading(*c);
  const reading::HeadCheck done = guard.check_done(parser);
  if (done.status != 0) {
    ++self.counters_.refused_4xx;
    co_await refuse(*c, done.status, done.why);
    co_return false;
  }
  reading::fill_request(parser.release(), check.form, c->client, ex.req);
  co_return true;
}

awaitable<void> HttpServer::Impl::refuse_unread(Conn& c, const reading::HeadCheck& why) {
  switch (why.status) {
    case -1:
      break;  // nothing to answer
    case 408:
      ++self.counters_.timed_out_408;
      co_await refuse(c, 408, "the request did not arrive in time\n");
      break;
    case 503:
      ++self.counters_.shed_503;
      co_await refuse(c, 503, "too many connections; try again in a second\n", 1);
      break;
    default:
      ++self.counters_.refused_4xx;
      const std::string text =
          why.why.empty() ? std::string("bad request: the request could not be read\n") : why.why;
      co_await refuse(c, why.status, text);
      break;
  }
}

awaitable<void> HttpServer::Impl::refuse(Conn& c, int status, std::string_view text,
                                         int retry_after_s) {
  self.own_answers_.record(status, /*stale=*/false);
  bhttp::response<bhttp::string_body> out;
  out.version(11);
  out.result(static_cast<unsigned>(status));
  out.set(bhttp::field::content_type, "text/plain; charset=utf-8");
  if (retry_after_s > 0) out.set(bhttp::field::retry_after, std::to_string(retry_after_s));
  for (const auto& [name, value] : options.default_headers)
    out.set(name, value);
  out.keep_alive(false);
  out.body().assign(text);
  out.prepare_payload();
  set_phase(c, Conn::Phase::kSending);
  c.stream.expires_after(kRefusalSend);
  auto [ec, n] = co_await bhttp::async_write(c.stream, out, kNothrow);
  if (ec) co_return;
  // Read and drop what the client still sends for a moment: closing with unread bytes
  // would reset the connection, and the client could lose the answer.
  beast::error_code ignored;
  c.stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  c.stream.expires_after(kRefusalDrain);
  char sink[4096];
  for (int i = 0; i < 64; ++i) {
    auto [e, got] = co_await c.stream.async_read_some(net::buffer(sink), kNothrow);
    if (e) break;
  }
}

awaitable<bool> HttpServer::Impl::answer(Conn& c, Exchange& ex, bool keep_alive, bool head) {
  http::Response& res = ex.res;
  bhttp::response<bhttp::string_body> out;
  // HTTP/1.1 whatever the client spoke (RFC 9110 6.2: the highest minor version the server
  // conforms to); a 1.0 client gets Connection: close, as it did not ask to keep it open.
  out.version(11);
  out.result(static_cast<unsigned>(res.status));
  for (const auto& [name, value] : res.headers)
    out.insert(name, value);
  for (const auto& [name, value] : options.default_headers) {
    if (!res.has_header(name)) out.set(name, value);
  }
  out.keep_alive(keep_alive);
  out.body() = std::move(res.body);
  out.prepare_payload();
  if (head) out.body().clear();  // HEAD: the length of the GET's answer, no body
  set_phase(c, Conn::Phase::kSending);
  c.stream.expires_after(options.send_deadline);
  auto [ec, n] = co_await bhttp::async_write(c.stream, out, kNothrow);
  c.stream.expires_never();
  if (ec) {
    ++self.counters_.answers_cut;
    co_return false;
  }
  co_return true;
}

HttpServer::HttpServer(Options options, Handler handler)
    : options_(std::move(options)),
      handler_(std::move(handler)),
      own_answers_(options_.clock != nullptr ? *options_.clock : Clock::system()) {}

void HttpServer::serve_async(AsyncRoutes routes, AsyncHandler handler, LaneHooks hooks) {
  async_routes_ = std::move(routes);
  async_handler_ = std::move(handler);
  lane_hooks_ = std::move(hooks);
}

HttpServer::~HttpServer() {
  stop();
}

namespace {

// Options::max_connections, lowered so that the connections, the workers' databases and the
// reserve fit under the soft open-file limit; at least 16 (or max_connections).
int fitted_connections(const HttpServer::Options& o) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return o.max_connections;
  }
  const long long taken = static_cast<long long>(o.heavy_workers + o.light_workers) +
                          static_cast<long long>(std::max(o.async_workers, 0)) +
                          static_cast<long long>(o.heavy_queue + o.light_queue) +
                          kReservedDescriptors;
  const long long room = static_cast<long long>(limit.rlim_cur) - taken;
  return static_cast<int>(std::min<long long>(o.max_connections, std::max(room, 16LL)));
}

}  // namespace

Status HttpServer::start() {
  if (impl_) return Status(Code::kFailedPrecondition, "HttpServer: already started");
  if (options_.max_connections < 1) {
    return Status(Code::kInvalidArgument, "HttpServer: max_connections must be at least 1");
  }
  const std::string where = options_.host + ":" + std::to_string(options_.port);
  auto impl = std::make_unique<Impl>(*this, options_);
  beast::error_code ec;
  net::ip::address address = net::ip::make_address(options_.host, ec);
  if (ec) {
    // A name ("localhost"): its first address.
    tcp::resolver resolver(impl->io);
    const auto found = resolver.resolve(options_.host, "", ec);
    if (ec || found.empty()) {
      return Status(Code::kInvalidArgument, "cannot listen on " + where +
                                                ": not an address or a name of one (" +
                                                (ec ? ec.message() : "no address") + ")");
    }
    address = found.begin()->endpoint().address();
  }
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(options_.port));
  tcp::acceptor& acceptor = impl->acceptor;
  if (acceptor.open(endpoint.protocol(), ec); !ec) {
    acceptor.set_option(net::socket_base::reuse_address(true), ec);
    if (acceptor.bind(endpoint, ec); !ec) acceptor.listen(512, ec);
  }
  if (ec) {
    return Status(ec == net::error::address_in_use ? Code::kUnavailable : Code::kInvalidArgument,
                  "cannot listen on " + where + ": " + ec.message());
  }
  port_ = acceptor.local_endpoint(ec).port();
  max_connections_ = fitted_connections(options_);
  impl->spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  impl_ = std::move(impl);
  impl_->start_async_lane();
  net::co_spawn(impl_->io, impl_->accept_loop(), net::detached);
  impl_->loop = std::thread([io = &impl_->io] {
    pthread_setname_np(pthread_self(), "hf-http");  // seen in top -H and /proc
    io->run();
  });
  return Status();
}

void HttpServer::stop() noexcept {
  if (!impl_) return;
  Impl& impl = *impl_;
  impl.stopping = true;
  // Close the door and every connection on the loop's thread, then end the loop (when the
  // loop has already ended, nothing runs the handler and the join returns at once).
  net::post(impl.io, [&impl] {
    beast::error_code ignored;
    impl.acceptor.close(ignored);
    for (const std::weak_ptr<Conn>& w : impl.open) {
      if (const std::shared_ptr<Conn> c = w.lock()) c->stream.socket().close(ignored);
    }
    impl.io.stop();
  });
  if (impl.loop.joinable()) impl.loop.join();
  impl.stop_async_lane();
  // Requests being served finish; those queued are dropped with their connections.
  for (Impl::Lane* lane : {&impl.heavy, &impl.light}) {
    lane->pool.stop();
    lane->pool.join();
  }
  if (!impl.async.loops.empty() && lane_hooks_.stopped) lane_hooks_.stopped();
  // The requests still in flight on the async lane end here, their places in any Shield
  // given back.
  impl.async.loops.clear();
  if (impl.spare_fd >= 0) ::close(impl.spare_fd);
  impl_.reset();
}

}  // namespace holdfast::panel
