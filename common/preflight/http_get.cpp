#include "common/preflight/http_get.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace h3pipe::preflight {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kMaxBody = 1 << 20;

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

int remaining_ms(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms > 0 ? static_cast<int>(ms) : 0;
}

}  // namespace

Result<Url> parse_url(const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0)
    return make_error(errc::http::kUrl, "\"{}\": expected an http:// URL", url);
  Url u;
  std::string rest = url.substr(kScheme.size());
  auto slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) u.path = rest.substr(slash);
  auto colon = authority.rfind(':');
  if (!authority.empty() && authority.front() == '[') {  // [v6]:port
    auto close = authority.find(']');
    if (close == std::string::npos)
      return make_error(errc::http::kUrl, "\"{}\": bad IPv6 literal", url);
    u.host = authority.substr(1, close - 1);
    colon = authority.find(':', close);
  } else {
    u.host = authority.substr(0, colon);
  }
  if (colon != std::string::npos) {
    std::string p = authority.substr(colon + 1);
    if (p.empty() || p.find_first_not_of("0123456789") != std::string::npos || p.size() > 5)
      return make_error(errc::http::kUrl, "\"{}\": bad port", url);
    u.port = std::stoi(p);
    if (u.port < 1 || u.port > 65535) return make_error(errc::http::kUrl, "\"{}\": bad port", url);
  }
  if (u.host.empty()) return make_error(errc::http::kUrl, "\"{}\": no host", url);
  return u;
}

Result<HttpResponse> http_get(const std::string& url, std::chrono::milliseconds timeout) {
  auto u = parse_url(url);
  if (!u.ok()) return u.error();
  auto deadline = Clock::now() + timeout;

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port = std::to_string(u->port);
  if (int rc = ::getaddrinfo(u->host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return make_error(errc::http::kConnect, "{}: cannot resolve {}: {}", url, u->host,
                      ::gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, ::freeaddrinfo);

  Fd s;
  std::string why = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    Fd c;
    c.fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (c.fd < 0) continue;
    int rc = ::connect(c.fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{c.fd, POLLOUT, 0};
      if (::poll(&p, 1, remaining_ms(deadline)) <= 0) {
        why = "timed out connecting";
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc != 0) {
      why = std::strerror(errno);
      continue;
    }
    std::swap(s.fd, c.fd);
    break;
  }
  if (s.fd < 0) return make_error(errc::http::kConnect, "{}: {}", url, why);

  std::string req = "GET " + u->path + " HTTP/1.0\r\nHost: " + u->host +
                    "\r\nUser-Agent: h3pipe-preflight\r\n" +
                    "Accept: */*\r\nConnection: close\r\n\r\n";
  std::size_t sent = 0;
  while (sent < req.size()) {
    pollfd p{s.fd, POLLOUT, 0};
    if (::poll(&p, 1, remaining_ms(deadline)) <= 0)
      return make_error(errc::http::kIo, "{}: timed out sending", url);
    ssize_t n = ::send(s.fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR)
      return make_error(errc::http::kIo, "{}: {}", url, std::strerror(errno));
    if (n > 0) sent += static_cast<std::size_t>(n);
  }
  std::string raw;
  char buf[4096];
  for (;;) {
    pollfd p{s.fd, POLLIN, 0};
    int pr = ::poll(&p, 1, remaining_ms(deadline));
    if (pr <= 0) {
      if (raw.find("\r\n\r\n") != std::string::npos) break;  // headers in, server keeps it open
      return make_error(errc::http::kIo, "{}: no reply within {} ms", url, timeout.count());
    }
    ssize_t n = ::recv(s.fd, buf, sizeof buf, 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      if (errno == ECONNRESET && !raw.empty()) break;
      return make_error(errc::http::kIo, "{}: {}", url, std::strerror(errno));
    }
    raw.append(buf, static_cast<std::size_t>(n));
    if (raw.size() > kMaxBody) break;
  }
  // "HTTP/1.x NNN reason"
  if (raw.rfind("HTTP/", 0) != 0 || raw.size() < 12)
    return make_error(errc::http::kIo, "{}: not an HTTP reply", url);
  auto sp = raw.find(' ');
  HttpResponse r;
  r.status = std::atoi(raw.c_str() + sp + 1);
  if (r.status < 100 || r.status > 599)
    return make_error(errc::http::kIo, "{}: bad status line", url);
  auto hdr_end = raw.find("\r\n\r\n");
  if (hdr_end != std::string::npos) r.body = raw.substr(hdr_end + 4);
  return r;
}

}  // namespace h3pipe::preflight
