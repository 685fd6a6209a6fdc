// HttpServer: binds, serves and stops; its parts are in the files http_server_impl.h lists.
#include "server/http_server.h"

#include <chrono>
#include <thread>

#include "common/error.h"
#include "server/http_server_impl.h"

namespace npullm::server {

HttpServer::HttpServer(ServerOptions opt) : impl_(std::make_unique<Impl>(std::move(opt))) {}
HttpServer::~HttpServer() = default;

void HttpServer::bind() {
  const ServerOptions& o = impl_->opt;
  if (o.port == 0) {
    impl_->bound_port = impl_->svr.bind_to_any_port(o.host);
    if (impl_->bound_port < 0) fail("cannot listen on {}: no free port", o.host);
  } else {
    if (!impl_->svr.bind_to_port(o.host, o.port)) fail("cannot listen on {}:{} (address in use, or not an address of this machine)", o.host, o.port);
    impl_->bound_port = o.port;
  }
  impl_->svr.widen_backlog();
}

int HttpServer::port() const { return impl_->bound_port; }

void HttpServer::run() {
  if (!impl_->svr.listen_after_bind()) fail("the HTTP server stopped with an error");
}

void HttpServer::stop() {
  // A stream the scheduler has just ended still has its last events to write: give them a moment
  // (bounded) before the listener closes, after which httplib writes no more of a chunked reply.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (impl_->open_streams > 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  impl_->svr.stop();
}

bool HttpServer::running() const { return impl_->svr.is_running(); }

void HttpServer::set_scheduler(genai::Scheduler& sched) {
  impl_->sched = &sched;
  Phase loading = Phase::Loading;
  impl_->phase.compare_exchange_strong(loading, Phase::Ready);  // not back out of a drain
}

void HttpServer::drain() {
  impl_->phase = Phase::Draining;
  impl_->svr.closing = true;
}

}  // namespace npullm::server
