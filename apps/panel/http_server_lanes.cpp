// Where HttpServer serves a request once it is read (http_server.hpp): a light lane and a
// heavy lane of worker threads, each with a bounded queue, and the async lane of
// coroutines (ADR 0029).

#include <pthread.h>

#include <algorithm>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>

#include "http_server_impl.hpp"

namespace holdfast::panel {

awaitable<bool> HttpServer::Impl::dispatch(Conn& c, const std::shared_ptr<Exchange>& ex) {
  const bool light_route = is_light(ex->req.method, ex->req.path);
  const bool is_async = !light_route && !async.loops.empty() && self.async_routes_(ex->req);
  Lane* lane = is_async ? nullptr : light_route ? &light : &heavy;
  const bool full =
      is_async ? async.pending >= options.max_async_requests : lane->pending >= lane->limit;
  // One address holds at most a share of the light lane: a flood of /healthz from one
  // client is shed before it takes the places of everyone else's.
  const auto light_places =
      light_route ? light_by_client.try_emplace(c.client, 0).first : light_by_client.end();
  const bool over_share =
      light_route && static_cast<std::size_t>(light_places->second) >= light_share();
  if (full || over_share) {
    if (light_route && light_places->second == 0) light_by_client.erase(light_places);
    ++self.counters_.shed_503;
    co_await refuse(c, 503, "the panel is busy; try again in a second\n", 1);
    co_return false;
  }
  if (light_route) ++light_places->second;
  ++self.counters_.served;
  if (is_async) {
    ++self.counters_.served_async;
    ++async.pending;
    net::io_context& loop = *async.loops[async.next++ % async.loops.size()];
    co_await net::co_spawn(loop, serve_async(ex), net::use_awaitable);
    --async.pending;
  } else {
    ++lane->pending;
    co_await net::co_spawn(lane->pool, serve_on_worker(ex), net::use_awaitable);
    --lane->pending;
    if (light_route && --light_places->second == 0) light_by_client.erase(light_places);
  }
  co_return true;
}

awaitable<void> HttpServer::Impl::serve_async(std::shared_ptr<Exchange> ex) {
  bool failed = false;
  try {
    co_await self.async_handler_(ex->req, ex->res);
  } catch (...) {
    failed = true;
  }
  if (failed) {
    ex->res = http::Response{};
    ex->res.status = 500;
    ex->res.set_content("internal error\n", "text/plain; charset=utf-8");
  }
}

void HttpServer::Impl::start_async_lane() {
  if (options.async_workers <= 0 || !self.async_handler_ || !self.async_routes_) return;
  for (int i = 0; i < options.async_workers; ++i) {
    async.loops.push_back(std::make_unique<net::io_context>(1));
  }
  async.cpu = std::make_unique<net::thread_pool>(
      static_cast<std::size_t>(std::max(options.async_cpu_workers, 1)));
  if (self.lane_hooks_.started) self.lane_hooks_.started(async.loops.front()->get_executor());
  for (auto& loop : async.loops) {
    async.threads.emplace_back([io = loop.get()] {
      pthread_setname_np(pthread_self(), "hf-lane");  // seen in top -H and /proc
      // Kept running when idle; an exception out of a handler (none is expected: the
      // handler's are caught above) does not end the loop.
      auto work = net::make_work_guard(*io);
      for (;;) {
        try {
          io->run();
          return;
        } catch (...) {
        }
      }
    });
  }
}

void HttpServer::Impl::stop_async_lane() noexcept {
  for (auto& loop : async.loops)
    loop->stop();
  for (std::thread& t : async.threads) {
    if (t.joinable()) t.join();
  }
  // The CPU jobs next, while the event loops still exist: a job's completion is the
  // coroutine that awaits it, and dropping it lets go of work counted on its event loop.
  if (async.cpu) {
    async.cpu->stop();
    async.cpu->join();
    async.cpu.reset();
  }
  // The loops go in HttpServer::stop(), after LaneHooks::stopped.
}

boost::asio::any_io_executor HttpServer::cpu_executor() const {
  return impl_->async.cpu->get_executor();
}

void HttpServer::Impl::serve(Exchange& ex) noexcept {
  try {
    self.handler_(ex.req, ex.res);
  } catch (...) {
    ex.res = http::Response{};
    ex.res.status = 500;
    ex.res.set_content("internal error\n", "text/plain; charset=utf-8");
  }
}

}  // namespace holdfast::panel
