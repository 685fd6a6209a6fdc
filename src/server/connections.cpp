#include "server/connections.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fmt/format.h>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "server/openai_request.h"

namespace npullm::server {

namespace {

thread_local Conn* tl_conn = nullptr;  // the connection this HTTP thread serves

// The HTTP threads (new_connection_pool).
class Pool final : public httplib::TaskQueue {
 public:
  Pool(size_t n, ConnTable& t) : table_(t) {
    for (size_t i = 0; i < n; ++i) threads_.emplace_back([this] { loop(); });
  }
  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard lk(m_);
      jobs_.push_back(std::move(fn));
      table_.queued++;
    }
    cv_.notify_one();
  }
  void shutdown() override {
    {
      std::lock_guard lk(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock lk(m_);
        cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stopping, and nothing left to serve
        fn = std::move(jobs_.front());
        jobs_.pop_front();
        table_.queued--;
      }
      fn();
    }
  }
  ConnTable& table_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  bool stop_ = false;
};

// Waits up to `ms` for `events` on `sock`: > 0 ready (or hung up), 0 not yet, < 0 error.
int wait_socket(socket_t sock, short events, int ms) {
  pollfd p{sock, events, 0};
  int r;
  do r = ::poll(&p, 1, ms);
  while (r < 0 && errno == EINTR);
  return r;
}

// Why a connection still waiting for (part of) its request must go now: "" if it may wait on.
const char* too_slow(const Conn& c, const ServerOptions& o, ConnTable& t) {
  if (c.busy) return "";
  const auto age = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - c.since).count();
  if (age > int64_t{o.read_timeout_s} * 1000) return "slow";
  if (t.queued > 0 && age > o.busy_read_ms) return "crowded";
  return "";
}

// A socket stream as httplib's own (buffered reads, timed writes), whose reads give up when the
// request is too slow to arrive (see above).
class ConnStream final : public httplib::Stream {
 public:
  ConnStream(Conn& c, const ServerOptions& o, ConnTable& t) : c_(c), o_(o), t_(t) {}

  bool is_readable() const override { return off_ < len_ || const_cast<ConnStream*>(this)->wait_readable(); }
  bool is_writable() const override {
    if (wait_socket(c_.sock, POLLOUT, o_.write_timeout_s * 1000) <= 0) return false;
    char b;  // alive: no EOF or error pending (as httplib's is_socket_alive)
    if (wait_socket(c_.sock, POLLIN, 0) == 0) return true;
    return ::recv(c_.sock, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    if (off_ >= len_) {
      if (!wait_readable()) return -1;
      off_ = len_ = 0;
      ssize_t n;
      do n = ::recv(c_.sock, buf_, sizeof buf_, 0);
      while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      len_ = static_cast<size_t>(n);
    }
    const size_t k = std::min(size, len_ - off_);
    std::memcpy(ptr, buf_ + off_, k);
    off_ += k;
    return static_cast<ssize_t>(k);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do n = ::send(c_.sock, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { address(::getpeername, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(::getsockname, ip, port); }
  socket_t socket() const override { return c_.sock; }

  // Waits for bytes, in 50 ms steps: false when none came within read_timeout_s of silence, or
  // the request as a whole is too slow (too_slow); the connection is then closed (gave_up).
  bool wait_readable() {
    const auto silent_until = Clock::now() + std::chrono::seconds(o_.read_timeout_s);
    for (;;) {
      const char* why = too_slow(c_, o_, t_);
      if (!*why && !c_.busy && Clock::now() > silent_until) why = "slow";
      if (*why) {
        (why[0] == 's' ? t_.cut_slow : t_.cut_crowded)++;
        gave_up_ = true;
        return false;
      }
      const int r = wait_socket(c_.sock, POLLIN, 50);
      if (r != 0) return r > 0;
      if (c_.busy && Clock::now() > silent_until) return false;
    }
  }
  bool gave_up() const { return gave_up_; }

 private:
  template <typename F>
  void address(F get, std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    ip.clear();
    port = 0;
    if (get(c_.sock, reinterpret_cast<sockaddr*>(&a), &len) != 0) return;
    char host[64] = {};
    if (a.ss_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
      ::inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
      port = ntohs(v4->sin_port);
    } else if (a.ss_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
      ::inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
      port = ntohs(v6->sin6_port);
    }
    ip = host;
  }

  Conn& c_;
  const ServerOptions& o_;
  ConnTable& t_;
  char buf_[4096];
  size_t off_ = 0, len_ = 0;
  bool gave_up_ = false;
};

// httplib's server, each connection served through a ConnStream (and refused past the maximum):
// the keep-alive loop of httplib's own process_and_close_socket, with guarded waits.
}  // namespace

httplib::TaskQueue* new_connection_pool(size_t threads, ConnTable& t) { return new Pool(threads, t); }

void GuardedServer::widen_backlog() { ::listen(svr_sock_, SOMAXCONN); }

bool GuardedServer::process_and_close_socket(socket_t sock) {
  if (table_.open + table_.queued >= opt_.max_connections) {
    table_.refused++;
    const std::string body = ApiError{503, "too many open connections; retry later", "server_error", "", "server_overloaded"}.body().dump();
    const std::string msg = fmt::format(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\n"
        "Content-Length: {}\r\n\r\n{}", body.size(), body);
    [[maybe_unused]] const ssize_t n = ::send(sock, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return false;
  }
  table_.open++;
  Conn c;
  c.sock = sock;
  tl_conn = &c;
  bool ret = false;
  for (int left = std::max(1, opt_.keep_alive_max); left > 0 && svr_sock_ != INVALID_SOCKET; --left) {
    c.since = Clock::now();
    c.busy = false;
    if (!await_request(c)) break;
    ConnStream strm(c, opt_, table_);
    bool closed = false;
    const bool last = left == 1 || closing;  // said in the response ("Connection: close")
    ret = process_request(strm, last, closed, nullptr);
    if (!ret || closed || last || strm.gave_up()) break;  // a request too slow to arrive ends its connection
  }
  tl_conn = nullptr;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  table_.open--;
  return ret;
}

bool GuardedServer::await_request(Conn& c) {
  const auto until = c.since + std::chrono::seconds(opt_.keep_alive_timeout_s);
  for (;;) {
    const int r = wait_socket(c.sock, POLLIN, 50);
    if (r != 0) return r > 0;
    if (Clock::now() > until || svr_sock_ == INVALID_SOCKET) return false;
    if (table_.queued > 0 && Clock::now() - c.since > std::chrono::milliseconds(opt_.busy_read_ms)) {
      table_.cut_crowded++;
      return false;
    }
  }
}

void conn_busy() {
  if (tl_conn) tl_conn->busy = true;
}

bool peer_gone() {
  if (!tl_conn) return false;
  char b;
  const ssize_t n = ::recv(tl_conn->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace npullm::server
