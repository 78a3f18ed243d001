#include "common/runner/sd_notify.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "common/logging/log.h"

namespace h3pipe::runner {
namespace {

spdlog::logger& logger() {
  static const auto l = logging::get("notify");
  return *l;
}

// Closes the fd it holds.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

bool wait_fd(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return false;
  pollfd p{fd, events, 0};
  return ::poll(&p, 1, static_cast<int>(left.count())) == 1;
}

}  // namespace

Status sd_notify(std::string_view socket, std::string_view state) {
  if (socket.empty()) return {};
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket.size() >= sizeof addr.sun_path)
    return make_error(errc::io::kOpen, "NOTIFY_SOCKET={}: longer than {} bytes", socket,
                      sizeof addr.sun_path - 1);
  socklen_t len = 0;
  if (socket.front() == '@') {  // abstract namespace: a leading NUL, no terminating one
    addr.sun_path[0] = '\0';
    std::memcpy(addr.sun_path + 1, socket.data() + 1, socket.size() - 1);
    len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket.size());
  } else if (socket.front() == '/') {
    std::memcpy(addr.sun_path, socket.data(), socket.size());
    len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket.size() + 1);
  } else {
    return make_error(errc::io::kOpen,
                      "NOTIFY_SOCKET={}: expected an absolute path or an @abstract name", socket);
  }
  Fd fd{::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)};
  if (fd.fd < 0)
    return make_error(errc::io::kOpen, "NOTIFY_SOCKET={}: socket: {}", socket,
                      std::strerror(errno));
  const ssize_t n = ::sendto(fd.fd, state.data(), state.size(), MSG_NOSIGNAL,
                             reinterpret_cast<const sockaddr*>(&addr), len);
  if (n != static_cast<ssize_t>(state.size()))
    return make_error(errc::io::kWrite, "NOTIFY_SOCKET={}: sendto: {}", socket,
                      n < 0 ? std::strerror(errno) : "short write");
  return {};
}

Readyz probe_readyz(const std::string& host, int port, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string h = host;
  if (h.empty() || h == "0.0.0.0") h = "127.0.0.1";
  if (h == "::" || h == "[::]") h = "::1";
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICSERV;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* ai = nullptr;
  if (::getaddrinfo(h.c_str(), std::to_string(port).c_str(), &hints, &ai) != 0 || !ai) return {};
  Fd fd{::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)};
  const int rc = fd.fd < 0 ? -1 : ::connect(fd.fd, ai->ai_addr, ai->ai_addrlen);
  ::freeaddrinfo(ai);
  if (fd.fd < 0 || (rc != 0 && errno != EINPROGRESS)) return {};
  if (rc != 0) {
    if (!wait_fd(fd.fd, POLLOUT, deadline)) return {};
    int err = 0;
    socklen_t el = sizeof err;
    if (::getsockopt(fd.fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) return {};
  }
  const std::string req = "GET /readyz HTTP/1.0\r\nHost: " + h + "\r\nConnection: close\r\n\r\n";
  if (::send(fd.fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size()))
    return {};
  std::string reply;
  char buf[1024];
  while (reply.size() < 8192 && wait_fd(fd.fd, POLLIN, deadline)) {
    const ssize_t n = ::recv(fd.fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    reply.append(buf, static_cast<std::size_t>(n));
  }
  Readyz r;
  if (reply.rfind("HTTP/1.", 0) != 0 || reply.size() < 12) return r;
  r.status = std::atoi(reply.c_str() + 9);
  if (const auto body = reply.find("\r\n\r\n"); body != std::string::npos) {
    r.body = reply.substr(body + 4);
    r.body = r.body.substr(0, r.body.find('\n'));
  }
  return r;
}

ReadinessNotifier::ReadinessNotifier(std::string what, std::string detail, std::string health_host,
                                     int health_port, const std::atomic<bool>* stop)
    : what_(std::move(what)),
      detail_(std::move(detail)),
      host_(std::move(health_host)),
      port_(health_port),
      stop_(stop) {
  if (const char* s = std::getenv("NOTIFY_SOCKET"); s && *s) socket_ = s;
  if (socket_.empty()) return;
  (void)sd_notify(socket_, "STATUS=" + what_ + ": starting");
  thread_ = std::thread([this] { loop(); });
}

ReadinessNotifier::~ReadinessNotifier() {
  if (socket_.empty()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    done_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  (void)sd_notify(socket_, "STOPPING=1\nSTATUS=" + what_ + ": stopping");
}

void ReadinessNotifier::loop() {
  bool ready_sent = false;
  std::string last;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      // 100 ms until ready (systemd waits on it), then once a second for STATUS= changes.
      cv_.wait_for(lk, std::chrono::milliseconds(ready_sent ? 1000 : 100),
                   [this] { return done_; });
      if (done_ || (stop_ && stop_->load())) return;
    }
    const Readyz r = probe_readyz(host_, port_);
    const bool ready = r.status == 200;
    std::string status = what_ + ": ";
    if (ready)
      status += "ready" + (detail_.empty() ? "" : ", " + detail_);
    else
      status += r.body.empty() ? "not ready" : r.body;
    if (ready && !ready_sent) {
      if (auto s = sd_notify(socket_, "READY=1\nSTATUS=" + status); !s.ok())
        logger().warn("{}", s.error().message);
      else
        ready_sent = true;
      last = status;
    } else if (status != last) {
      if (auto s = sd_notify(socket_, "STATUS=" + status); !s.ok())
        logger().warn("{}", s.error().message);
      last = status;
    }
  }
}

}  // namespace h3pipe::runner
