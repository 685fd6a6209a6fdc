// Connections: how the server reads requests off its sockets, so that slow or silent clients lose
// their connection, not the server its threads.
//
// cpp-httplib gives each connection a pool thread for its whole life and bounds only the wait for
// each recv(): a client trickling a byte at a time, or announcing more body than it sends, could
// hold a thread for ever, and enough of them (or of idle connections) would starve everyone. So
// the server serves each connection itself (GuardedServer, with httplib's own request processing)
// through a stream whose reads give up once the request has taken read_timeout_s to arrive since
// it was first awaited, or busy_read_ms while other connections wait for a thread. Once a request
// is read and its handler runs, generation is bounded by max_tokens and the scheduler, and writing
// by write_timeout_s (a client that takes nothing for that long is dropped).
//
// Threading: ConnTable's counters are read by any thread (the /slots view); a Conn belongs to the
// HTTP thread serving it, which is the only one that calls conn_busy() and peer_gone() for it.
#pragma once
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>

#include "server/http_server.h"

namespace npullm::server {

using Clock = std::chrono::steady_clock;

struct Conn {
  socket_t sock = -1;
  Clock::time_point since;  // when its current request began to be awaited
  bool busy = false;        // its request was read and a handler runs (set by the handler's thread)
};

struct ConnTable {
  std::atomic<int64_t> open{0};    // connections being served
  std::atomic<int64_t> queued{0};  // accepted, waiting for a thread
  std::atomic<int64_t> cut_slow{0}, cut_crowded{0}, refused{0};
};

// The HTTP threads: a fixed pool like httplib's own, counting in `t` the connections that wait for
// one. The caller (httplib, through Server::new_task_queue) owns it.
httplib::TaskQueue* new_connection_pool(size_t threads, ConnTable& t);

// httplib's server, each connection served through a guarded stream (and refused with a 503 past
// max_connections): the keep-alive loop of httplib's own process_and_close_socket, with guarded
// waits. `t` and `o` must outlive it.
class GuardedServer final : public httplib::Server {
 public:
  GuardedServer(ConnTable& t, const ServerOptions& o) : table_(t), opt_(o) {}

  // httplib listens with a backlog of 5: a burst of connections would wait in SYN retries (1 s,
  // 3 s, ...) before any thread sees them. listen() again on the bound socket sets a larger one.
  void widen_backlog();

  // Set while draining: every response closes its connection ("Connection: close"), so that a
  // client behind a load balancer comes back on a new connection, to another replica.
  std::atomic<bool> closing{false};

 private:
  bool process_and_close_socket(socket_t sock) override;
  // The wait for a (next) request on a kept-alive connection: keep_alive_timeout_s, cut short
  // while other connections wait for a thread.
  bool await_request(Conn& c);

  ConnTable& table_;
  const ServerOptions& opt_;
};

// Marks this thread's connection busy: its request was read and a handler runs.
void conn_busy();

// The client of this thread's connection has closed (or reset) it.
bool peer_gone();

}  // namespace npullm::server
