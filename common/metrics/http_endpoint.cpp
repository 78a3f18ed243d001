#include "common/metrics/http_endpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <vector>

#include "common/metrics/http_request.h"

namespace h3pipe::metrics {
namespace {

using Clock = std::chrono::steady_clock;

enum class Phase { kReading, kWriting, kDraining };

struct Conn {
  int fd = -1;
  Phase phase = Phase::kReading;
  std::string in;
  std::string out;
  std::size_t out_at = 0;
  bool started = true;       // bytes of the current request are due (the first one from accept)
  bool peer_eof = false;     // the client half-closed
  bool close_after = false;  // the reply being written is the last
  int served = 0;
  Clock::time_point deadline;
  Clock::time_point since;  // when it began waiting for its current request (eviction order)
};

std::string render(int status, const HttpReply& r, bool head, bool keep_alive) {
  std::string s = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n",
                              status, http::reason_phrase(status), r.content_type, r.body.size());
  if (status == 405) s += "Allow: GET, HEAD\r\n";
  s += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  if (!head) s += r.body;
  return s;
}

}  // namespace

struct HttpEndpoint::Loop {
  HttpEndpoint& ep;
  std::list<Conn> conns;

  void run() {
    std::vector<pollfd> pfds;
    std::vector<Conn*> order;
    for (;;) {
      pfds.clear();
      order.clear();
      pfds.push_back({ep.wake_[0], POLLIN, 0});
      pfds.push_back({ep.listen_fd_, POLLIN, 0});
      auto next = Clock::time_point::max();
      for (auto& c : conns) {
        pfds.push_back(
            {c.fd, static_cast<short>(c.phase == Phase::kWriting ? POLLOUT : POLLIN), 0});
        order.push_back(&c);
        next = std::min(next, c.deadline);
      }
      int timeout = -1;
      if (next != Clock::time_point::max()) {
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
        timeout = static_cast<int>(std::clamp<long long>(ms + 1, 0, 60000));
      }
      const int n = ::poll(pfds.data(), pfds.size(), timeout);
      if (n < 0 && errno != EINTR) break;
      if (pfds[0].revents) break;  // stop
      for (std::size_t i = 0; i < order.size(); ++i)
        if (pfds[i + 2].revents) service(*order[i], pfds[i + 2].revents);
      if (pfds[1].revents & POLLIN) accept_new();
      expire();
      conns.remove_if([](const Conn& c) { return c.fd < 0; });
    }
    for (auto& c : conns) close_conn(c);
  }

  static void close_conn(Conn& c) {
    if (c.fd >= 0) ::close(c.fd);
    c.fd = -1;
  }

  // Issue #35 D5: a connection draining after its final reply holds no slot (its reply is
  // delivered; only the drain's own bound applies, and the oldest drains close first when there
  // are as many drains as slots), and a connection writing a reply its client does not take is
  // evicted like one waiting for its request, oldest first.  So stalled clients that send a
  // request and never read or close cannot fill the slots and lock /metrics and /readyz out.
  void accept_new() {
    for (int i = 0; i < 64; ++i) {
      const int fd = ::accept4(ep.listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      std::size_t live = 0, draining = 0;
      for (const auto& c : conns) {
        if (c.fd < 0) continue;
        (c.phase == Phase::kDraining ? draining : live)++;
      }
      if (draining >= ep.limits_.max_connections) close_oldest_drain();
      if (live >= ep.limits_.max_connections && !evict_one()) {
        const std::string busy =
            render(503, {503, "text/plain", "too many connections\n"}, false, false);
        (void)::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        ::close(fd);
        continue;
      }
      Conn c;
      c.fd = fd;
      c.since = Clock::now();
      c.deadline = c.since + ep.limits_.request_timeout;
      conns.push_back(std::move(c));
      // Read it now: a client that sent its request with the connection (a probe) is answered
      // before later connections of this burst could make it the oldest.
      service(conns.back(), POLLIN);
    }
  }

  // Under pressure: closes the connection that has waited longest for its request or for its
  // reply to be taken (a best-effort 408 to one that has not been answered yet).
  bool evict_one() {
    Conn* oldest = nullptr;
    for (auto& c : conns)
      if (c.fd >= 0 && c.phase != Phase::kDraining && (!oldest || c.since < oldest->since))
        oldest = &c;
    if (!oldest) return false;
    if (oldest->phase == Phase::kReading) {
      const std::string r = render(408, {408, "text/plain", "request timeout\n"}, false, false);
      (void)::send(oldest->fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    close_conn(*oldest);
    return true;
  }

  // The drain that began first ends now (its reply was sent; what the client still sends is
  // read and dropped first, so the close is not a reset if nothing more came).
  void close_oldest_drain() {
    Conn* oldest = nullptr;
    for (auto& c : conns)
      if (c.fd >= 0 && c.phase == Phase::kDraining && (!oldest || c.deadline < oldest->deadline))
        oldest = &c;
    if (!oldest) return;
    char buf[4096];
    while (::recv(oldest->fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
    }
    close_conn(*oldest);
  }

  void expire() {
    const auto now = Clock::now();
    for (auto& c : conns) {
      if (c.fd < 0 || now < c.deadline) continue;
      if (c.phase == Phase::kReading && c.started)
        reply(c, 408, {408, "text/plain", "request timeout\n"}, false, true);
      else
        close_conn(c);  // idle keep-alive, a reply nobody takes, a drain that is over
    }
  }

  void service(Conn& c, short revents) {
    if (c.phase == Phase::kWriting) {
      if (revents & (POLLERR | POLLNVAL)) return close_conn(c);
      return write_some(c);
    }
    char buf[16 * 1024];
    for (int i = 0; i < 4; ++i) {
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        if (c.phase == Phase::kDraining) continue;  // discarded
        if (!c.started) {
          c.started = true;
          c.deadline = Clock::now() + ep.limits_.request_timeout;
        }
        c.in.append(buf, static_cast<std::size_t>(n));
        // More than a request may hold is refused by the parser; never buffer beyond that.
        if (c.in.size() > ep.limits_.max_header_bytes + ep.limits_.max_body_bytes + sizeof buf)
          break;
        continue;
      }
      if (n == 0) {
        if (c.phase == Phase::kDraining) return close_conn(c);
        c.peer_eof = true;
        break;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return close_conn(c);
    }
    if (c.phase == Phase::kReading) handle_input(c);
  }

  // Answers the next complete request in c.in, if any.
  void handle_input(Conn& c) {
    const auto p =
        http::parse_request(c.in, ep.limits_.max_header_bytes, ep.limits_.max_body_bytes);
    if (p.what == http::Parsed::kBad)
      return reply(c, p.status, {p.status, "text/plain", p.why + "\n"}, false, true);
    if (p.what == http::Parsed::kIncomplete) {
      if (!c.peer_eof) return;
      if (http::only_blank_lines(c.in)) return close_conn(c);
      return reply(c, 400, {400, "text/plain", "incomplete request\n"}, false, true);
    }
    const auto& rq = p.request;
    c.in.erase(0, rq.consumed);
    const bool head = rq.method == "HEAD";
    HttpReply r{404, "text/plain", "not found\n"};
    auto it = ep.routes_.find(rq.path);
    if (it != ep.routes_.end()) {
      if (rq.method == "GET" || head) {
        try {
          r = it->second();
        } catch (...) {
          r = {500, "text/plain", "internal error\n"};
        }
      } else {
        r = {405, "text/plain", "method not allowed\n"};
      }
    }
    const bool last = !rq.keep_alive || c.served + 1 >= ep.limits_.keep_alive_max;
    reply(c, r.status, r, head, last);
  }

  void reply(Conn& c, int status, const HttpReply& r, bool head, bool last) {
    c.out = render(status, r, head, !last);
    c.out_at = 0;
    c.close_after = last;
    c.phase = Phase::kWriting;
    c.deadline = Clock::now() + ep.limits_.write_timeout;
    write_some(c);
  }

  void write_some(Conn& c) {
    while (c.out_at < c.out.size()) {
      const ssize_t n =
          ::send(c.fd, c.out.data() + c.out_at, c.out.size() - c.out_at, MSG_NOSIGNAL);
      if (n > 0) {
        c.out_at += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // POLLOUT later
      return close_conn(c);
    }
    c.out.clear();
    if (c.close_after) {
      // Half-close and drain: closing with unread input would reset the connection and could
      // destroy the reply before the client reads it.
      ::shutdown(c.fd, SHUT_WR);
      c.phase = Phase::kDraining;
      c.deadline = Clock::now() + ep.limits_.drain;
      return;
    }
    ++c.served;
    c.phase = Phase::kReading;
    c.started = false;
    c.since = Clock::now();
    c.deadline = c.since + ep.limits_.keep_alive_idle;
    if (!c.in.empty() || c.peer_eof) {
      // A pipelined request may already be here.
      if (!http::only_blank_lines(c.in)) {
        c.started = true;
        c.deadline = Clock::now() + ep.limits_.request_timeout;
      }
      handle_input(c);
    }
  }
};

HttpEndpoint::HttpEndpoint(HttpLimits limits) : limits_(limits) {}

HttpEndpoint::~HttpEndpoint() {
  if (wake_[1] >= 0) {
    const char x = 1;
    (void)::write(wake_[1], &x, 1);
  }
  if (thread_.joinable()) thread_.join();
  for (int fd : {listen_fd_, wake_[0], wake_[1]})
    if (fd >= 0) ::close(fd);
}

Status HttpEndpoint::listen(const ErrorCode& in_use, const std::string& what,
                            const std::string& bind, int port) {
  const auto refused = [&] {
    return make_error(in_use, "cannot serve {} on {}:{}: the address is in use or not local", what,
                      bind, port);
  };
  if (bind.empty() || port < 0 || port > 65535) return refused();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (::getaddrinfo(bind.c_str(), std::to_string(port).c_str(), &hints, &res) != 0)
    return refused();
  for (addrinfo* a = res; a && listen_fd_ < 0; a = a->ai_next) {
    const int fd =
        ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      listen_fd_ = fd;
    } else {
      ::close(fd);
    }
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0) return refused();
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                   : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (::pipe2(wake_, O_NONBLOCK | O_CLOEXEC) != 0)
    return make_error(in_use, "cannot serve {}: pipe: {}", what, std::strerror(errno));
  thread_ = std::thread([this] { Loop{*this, {}}.run(); });
  return {};
}

}  // namespace h3pipe::metrics
