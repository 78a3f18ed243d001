#include "common/api/gate.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "common/core/error_codes.h"

namespace h3pipe::api {
namespace {
using Clock = std::chrono::steady_clock;

void reply_and_close(int fd, const char* status, const char* extra = "") {
  const std::string msg = fmt::format(
      "HTTP/1.1 {}\r\nContent-Type: text/plain\r\nContent-Length: 0\r\n{}Connection: close\r\n\r\n",
      status, extra);
  (void)::send(fd, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
}

std::string lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// Whether buf starts a multipart POST on the upload route (with an upload limit above the body's).
bool is_upload(const std::string& buf, const GateLimits& l) {
  if (l.max_upload_bytes <= l.max_body_bytes || buf.rfind(l.upload_request_line, 0) != 0)
    return false;
  const auto end = buf.find("\r\n\r\n");
  const std::string head = lower(buf.substr(0, end == std::string::npos ? buf.size() : end));
  const auto ct = head.find("\r\ncontent-type:");
  if (ct == std::string::npos) return false;
  const auto eol = head.find("\r\n", ct + 2);
  return head.substr(ct, eol - ct).find("multipart/form-data") != std::string::npos;
}

// The body a request may carry here: the upload limit for an upload, unless it streams (then the
// gate reads no more of it than of any body before handing it over).
std::size_t body_limit(const std::string& buf, const GateLimits& l) {
  return !l.stream_uploads && is_upload(buf, l) ? l.max_upload_bytes : l.max_body_bytes;
}

// Whether buf holds a whole request (or more than the bounds let it wait for).
bool complete(const std::string& buf, const GateLimits& l) {
  const auto end = buf.find("\r\n\r\n");
  if (end == std::string::npos) return buf.size() > l.max_head_bytes;
  const std::size_t body_at = end + 4;
  if (body_at > l.max_head_bytes) return true;
  const std::string head = lower(buf.substr(0, end + 2));
  const auto field = [&](const char* name) -> std::optional<std::string> {
    const std::string key = std::string("\r\n") + name + ":";
    const auto at = head.find(key);
    if (at == std::string::npos) return std::nullopt;
    auto v = head.substr(at + key.size(), head.find("\r\n", at + key.size()) - at - key.size());
    v.erase(0, v.find_first_not_of(" \t"));
    return v;
  };
  if (l.stream_uploads && is_upload(buf, l)) return true;  // its body streams in the pool
  const std::size_t body = buf.size() - body_at;
  const std::size_t max_body = body_limit(buf, l);
  if (auto te = field("transfer-encoding"); te && te->find("chunked") != std::string::npos)
    return body > max_body || (body >= 5 && buf.compare(buf.size() - 5, 5, "0\r\n\r\n") == 0);
  if (auto cl = field("content-length")) {
    char* e = nullptr;
    const unsigned long long n = std::strtoull(cl->c_str(), &e, 10);
    if (e == cl->c_str() || n > max_body) return true;  // httplib answers 400/413
    return body >= n;
  }
  return true;
}

// Where the "Expect: 100-continue" line (with its CRLF) is in buf, once the head is whole.
std::optional<std::pair<std::size_t, std::size_t>> expect_continue(const std::string& buf) {
  const auto end = buf.find("\r\n\r\n");
  if (end == std::string::npos) return std::nullopt;
  const std::string head = lower(buf.substr(0, end + 2));
  const auto at = head.find("\r\nexpect:");
  if (at == std::string::npos) return std::nullopt;
  const auto eol = head.find("\r\n", at + 2);
  if (head.find("100-continue", at) >= eol) return std::nullopt;
  return std::pair{at + 2, eol + 2};
}

// Set by keep_connection() during a serve on this pool thread.
thread_local bool kept = false;
// may_keep_alive() for the serve on this pool thread; keep_alive()'s bytes of the next request.
thread_local bool keep_allowed = false;
thread_local std::optional<std::string> kept_alive;

struct Pending {
  int fd;
  Clock::time_point deadline;
  std::string buf;
  std::size_t served = 0;  // requests answered on this connection before
  bool idle = false;       // kept alive, no byte of its next request yet: closed without a reply
};

// A waiting connection given up (timed out, evicted): 408, or closed without a reply when it is
// a kept-alive one that sent nothing more (a client then simply opens a new one).
void close_waiting(const Pending& p) {
  if (p.idle) {
    ::close(p.fd);
    return;
  }
  reply_and_close(p.fd, "408 Request Timeout");
}
// What the loop and the pool threads share: complete requests for the pool, kept-alive
// connections back to the loop.
struct Queues {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Pending> ready;
  std::vector<Pending> returned;
  bool done = false;
  std::atomic<int> lingering{0};  // pool threads waiting on a kept-alive connection (linger)
};

// A kept-alive connection stays with its pool thread up to limits.linger (when fewer than
// limits.max_lingering threads linger already): when its next request arrives whole in that time,
// the same thread serves it, without the hand-over to the loop and back (two thread wake-ups and
// a pipe write per request, the tail of `scripts/bench.sh api` on a busy 2-core machine).  Bytes
// of a request not whole by then (or over max_body_bytes: the loop bounds what waits), a closed
// connection, or none at all: back to the loop with what was read, as before.
bool linger(Pending& p, const GateLimits& limits, std::atomic<int>& lingering,
            const std::atomic<bool>& stopping) {
  if (!p.buf.empty() && complete(p.buf, limits)) return true;
  if (limits.linger.count() <= 0 || lingering.fetch_add(1) >= limits.max_lingering) {
    if (limits.linger.count() > 0) lingering.fetch_sub(1);
    return false;
  }
  const auto until = Clock::now() + limits.linger;
  bool whole = false;
  for (bool open = true; open && !whole && !stopping;) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (ms <= 0) break;
    pollfd pf{p.fd, POLLIN, 0};
    // In slices of at most 100 ms, so a stop() is not held up by a long linger.
    const int r = ::poll(&pf, 1, static_cast<int>(std::min<long long>(ms, 100)));
    if (r == 0 || (r < 0 && errno == EINTR)) continue;
    if (r < 0) break;
    char chunk[16384];
    ssize_t n;
    while ((n = ::recv(p.fd, chunk, sizeof chunk, 0)) > 0) {
      p.buf.append(chunk, static_cast<std::size_t>(n));
      if (p.buf.size() > limits.max_head_bytes + limits.max_body_bytes) break;
    }
    open = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
    // A client waiting for "100 Continue" gets it from the loop.
    if (!open || expect_continue(p.buf)) break;
    whole = complete(p.buf, limits);
  }
  lingering.fetch_sub(1);
  return whole && !stopping;
}

// A pool thread: serves ready requests until done; a connection kept alive lingers (above), then
// goes back to the loop (woken through wake_fd); any other is closed unless its serve took it.
void serve_ready(Queues& q, const GateServe& serve, const GateLimits& limits,
                 const std::atomic<bool>& stopping, int wake_fd) {
  for (;;) {
    Pending p;
    {
      std::unique_lock lk(q.mu);
      q.cv.wait(lk, [&] { return q.done || !q.ready.empty(); });
      if (q.ready.empty()) return;
      p = std::move(q.ready.front());
      q.ready.pop_front();
    }
    for (bool again = true; again;) {
      kept = false;
      kept_alive.reset();
      keep_allowed = !stopping && p.served + 1 < limits.max_requests_per_connection;
      serve(p.fd, p.buf);
      again = false;
      if (kept) break;  // handed over: its new owner closes it
      if (kept_alive && !stopping) {
        const auto answered = Clock::now();
        p.buf = std::move(*kept_alive);
        p.served += 1;
        if (linger(p, limits, q.lingering, stopping)) {
          again = true;
          continue;
        }
        {
          const bool idle = p.buf.empty();
          std::lock_guard lk(q.mu);
          q.returned.push_back(
              {p.fd, answered + limits.keep_alive_timeout, std::move(p.buf), p.served, idle});
        }
        (void)!::write(wake_fd, "r", 1);
        break;
      }
      ::shutdown(p.fd, SHUT_WR);
      ::close(p.fd);
    }
  }
}

// Kept-alive connections back from the pool: the next request waits in `waiting` like a new one
// (or goes to `handed` at once when the client had sent it already).
void take_returned(Queues& q, std::list<Pending>& waiting, std::vector<Pending>& handed,
                   const GateLimits& limits, Clock::time_point now) {
  std::vector<Pending> back;
  {
    std::lock_guard lk(q.mu);
    back.swap(q.returned);
  }
  for (auto& p : back) {
    if (!p.buf.empty() && complete(p.buf, limits)) {
      handed.push_back(std::move(p));
      continue;
    }
    if (!p.buf.empty()) p.deadline = now + limits.request_timeout;
    if (waiting.size() >= limits.max_pending) {
      close_waiting(waiting.front());
      waiting.pop_front();
    }
    waiting.push_back(std::move(p));
  }
}

// What became of a waiting connection that had bytes to read.
enum class Read {
  kWaiting,  // its request is not whole yet
  kWhole,    // whole (or past the bounds, or the client closed its side): for the pool
  kOver,     // too many bytes held at once: 503, the upload is retried later
  kGone,     // closed or failed before sending anything more: closed
};

// The poll loop's connections waiting for their request, oldest first, and the listening socket.
class Loop {
 public:
  Loop(const GateLimits& limits, int listen_fd, int wake_fd)
      : limits_(limits), listen_fd_(listen_fd), wake_fd_(wake_fd) {}

  // Waits for the wake pipe, a new connection or a waiting one's bytes (at most until the first
  // waiting one's deadline); false when poll failed.
  bool poll() {
    const auto now = Clock::now();
    const bool paused = accept_paused_until_ > now;
    fds_.assign({{wake_fd_, POLLIN, 0}, {paused ? -1 : listen_fd_, POLLIN, 0}});
    at_.clear();
    int timeout = paused ? 10 : -1;
    for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
      fds_.push_back({it->fd, POLLIN, 0});
      at_.push_back(it);
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(it->deadline - now).count() + 1;
      timeout = timeout < 0 ? static_cast<int>(std::max<long long>(left, 0))
                            : std::min(timeout, static_cast<int>(std::max<long long>(left, 0)));
    }
    return ::poll(fds_.data(), fds_.size(), timeout) >= 0 || errno == EINTR;
  }

  bool woken() const { return fds_[0].revents != 0; }
  std::list<Pending>& waiting() { return waiting_; }

  // Reads what every polled waiting connection sent; a whole request goes to `handed`, one past
  // its deadline is given up (close_waiting).
  void read_waiting(std::vector<Pending>& handed, Clock::time_point now) {
    // Bytes held for every waiting connection: uploads may not make it exceed the bound.
    std::size_t buffered = 0;
    for (const auto& p : waiting_) buffered += p.buf.size();
    for (std::size_t i = 2; i < fds_.size(); ++i) {
      auto it = at_[i - 2];
      if (fds_[i].revents) {
        const Read r = read(*it, buffered, now);
        if (r == Read::kOver) {
          buffered -= std::min(buffered, it->buf.size());
          reply_and_close(it->fd, "503 Service Unavailable", "Retry-After: 1\r\n");
        } else if (r == Read::kGone) {
          ::close(it->fd);
        } else if (r == Read::kWhole) {
          handed.push_back(std::move(*it));
        }
        if (r != Read::kWaiting) {
          waiting_.erase(it);
          continue;
        }
        answer_expect_continue(*it);
      }
      if (it->deadline <= now) {
        close_waiting(*it);
        waiting_.erase(it);
      }
    }
  }

  // Accepts every new connection, to wait for its request.
  void accept_new(Clock::time_point now) {
    if (!fds_[1].revents) return;
    for (;;) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        // Out of descriptors: the oldest waiting connection makes room; with none waiting (all
        // held by requests being served), accepting pauses a moment instead of spinning.
        if (errno == EMFILE || errno == ENFILE) {
          if (!waiting_.empty()) {
            close_waiting(waiting_.front());
            waiting_.pop_front();
            continue;
          }
          accept_paused_until_ = now + std::chrono::milliseconds(10);
        }
        break;
      }
      if (waiting_.size() >= limits_.max_pending) {
        close_waiting(waiting_.front());
        waiting_.pop_front();
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      waiting_.push_back({fd, now + limits_.request_timeout, {}});
    }
  }

 private:
  // Reads what p's client sent until it would block (or past the bounds); `buffered` counts it.
  Read read(Pending& p, std::size_t& buffered, Clock::time_point now) {
    char chunk[16384];
    bool eof = false;
    for (;;) {
      const ssize_t n = ::recv(p.fd, chunk, sizeof chunk, 0);
      if (n > 0) {
        if (p.idle) {  // a kept-alive connection's next request: its own timeout
          p.idle = false;
          p.deadline = now + limits_.request_timeout;
        }
        p.buf.append(chunk, static_cast<std::size_t>(n));
        buffered += static_cast<std::size_t>(n);
        if (buffered > limits_.max_buffered_bytes && p.buf.size() > limits_.max_body_bytes)
          return Read::kOver;
        if (p.buf.size() > limits_.max_head_bytes + body_limit(p.buf, limits_)) break;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return Read::kGone;
      eof = n == 0;
      break;
    }
    if (eof && p.buf.empty()) return Read::kGone;
    return eof || complete(p.buf, limits_) ? Read::kWhole : Read::kWaiting;
  }

  // A client waiting for "100 Continue" before its body gets it from here (and httplib, which
  // sees no Expect line then, sends no second one).
  static void answer_expect_continue(Pending& p) {
    if (auto e = expect_continue(p.buf)) {
      static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      (void)::send(p.fd, kContinue, sizeof kContinue - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      p.buf.erase(e->first, e->second - e->first);
    }
  }

  const GateLimits& limits_;
  const int listen_fd_;
  const int wake_fd_;
  std::list<Pending> waiting_;  // oldest first
  Clock::time_point accept_paused_until_{};
  std::vector<pollfd> fds_;  // wake pipe, listening socket, then waiting_ in at_'s order
  std::vector<std::list<Pending>::iterator> at_;
};

// Whole requests to the pool threads: past max_ready waiting for a thread, 503 with Retry-After.
void hand_over(Queues& q, std::vector<Pending>& handed, const GateLimits& limits) {
  if (handed.empty()) return;
  std::lock_guard lk(q.mu);
  for (auto& p : handed) {
    if (q.ready.size() >= limits.max_ready) {
      reply_and_close(p.fd, "503 Service Unavailable", "Retry-After: 1\r\n");
      continue;
    }
    q.ready.push_back(std::move(p));
    // One thread per request: notify_all woke all 16 for each, and 15 went back to sleep (29
    // context switches per request of `scripts/bench.sh api`, perf stat).
    q.cv.notify_one();
  }
}

}  // namespace

Gate::~Gate() {
  for (int fd : {listen_fd_, wake_[0], wake_[1]})
    if (fd >= 0) ::close(fd);
}

Result<TcpListener> listen_tcp(const std::string& host, int port) {
  addrinfo hints{}, *ai = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &ai) != 0 || !ai)
    return make_error(errc::cli::kFlag, "cannot listen on {}:{} (not a numeric address)", host,
                      port);
  TcpListener l;
  l.fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  if (l.fd >= 0) ::setsockopt(l.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool bound =
      l.fd >= 0 && ::bind(l.fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(l.fd, 1024) == 0;
  ::freeaddrinfo(ai);
  if (!bound) {
    const int err = errno;
    if (l.fd >= 0) ::close(l.fd);
    return make_error(errc::cli::kFlag, "cannot listen on {}:{} (bind: {})", host, port,
                      std::strerror(err));
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(l.fd, reinterpret_cast<sockaddr*>(&ss), &len);
  l.port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                    : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return l;
}

Result<int> Gate::bind(const std::string& host, int port) {
  auto l = listen_tcp(host, port);
  if (!l.ok()) return l.error();
  listen_fd_ = l->fd;
  if (::pipe2(wake_, O_NONBLOCK | O_CLOEXEC) != 0)
    return make_error(errc::cli::kFlag, "cannot listen on {}:{} (pipe: {})", host, port,
                      std::strerror(errno));
  return l->port;
}

Result<int> Gate::bind_unix(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof a.sun_path)
    return make_error(errc::cli::kFlag, "cannot listen on \"{}\" (not a socket path)", path);
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(listen_fd_, 1024) != 0 || ::pipe2(wake_, O_NONBLOCK | O_CLOEXEC) != 0)
    return make_error(errc::cli::kFlag, "cannot listen on {} ({})", path, std::strerror(errno));
  return 0;
}

void Gate::keep_connection() {
  kept = true;
}

bool Gate::may_keep_alive() {
  return keep_allowed;
}

void Gate::keep_alive(std::string rest) {
  if (keep_allowed) kept_alive = std::move(rest);
}

void Gate::stop() {
  stopping_ = true;
  if (wake_[1] >= 0) (void)!::write(wake_[1], "x", 1);
}

void Gate::run(const GateServe& serve) {
  Queues q;
  std::vector<std::thread> pool;
  for (int i = 0; i < std::max(1, limits_.threads); ++i)
    pool.emplace_back([&] { serve_ready(q, serve, limits_, stopping_, wake_[1]); });
  Loop loop(limits_, listen_fd_, wake_[0]);
  while (loop.poll()) {
    const auto now = Clock::now();
    std::vector<Pending> handed;
    if (loop.woken()) {
      char drain[256];
      while (::read(wake_[0], drain, sizeof drain) > 0) {
      }
      if (stopping_) break;  // stop()
      take_returned(q, loop.waiting(), handed, limits_, now);
    }
    loop.read_waiting(handed, now);
    loop.accept_new(now);
    hand_over(q, handed, limits_);
  }
  // Stopped: every connection not being served is closed, and the pool finishes.
  for (auto& p : loop.waiting()) ::close(p.fd);
  {
    std::lock_guard lk(q.mu);
    q.done = true;
  }
  q.cv.notify_all();
  for (auto& t : pool) t.join();
  for (auto& p : q.ready) ::close(p.fd);
  for (auto& p : q.returned) ::close(p.fd);
}

}  // namespace h3pipe::api
