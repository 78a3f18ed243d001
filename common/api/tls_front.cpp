#include "common/api/tls_front.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <list>
#include <vector>

#include "common/api/gate.h"
#include "common/core/error_codes.h"
#include "common/supervisor/api_tls.h"

namespace h3pipe::api {
namespace {
using Clock = std::chrono::steady_clock;
constexpr std::size_t kBuffer = 64 * 1024;  // bytes held each way per connection

std::string ssl_errors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += out.empty() ? buf : std::string("; ") + buf;
  }
  return out.empty() ? "no detail" : out;
}

// One client: its TLS socket and, once the handshake is done, its Unix connection to the gate.
struct Conn {
  int tcp = -1;
  SSL* ssl = nullptr;
  int up = -1;  // to the gate
  Clock::time_point deadline;
  std::string to_gate, to_client;
  bool client_eof = false, gate_eof = false, up_shut = false;
  short tcp_events = POLLIN, up_events = 0;
  ~Conn() {
    if (ssl) SSL_free(ssl);
    if (tcp >= 0) ::close(tcp);
    if (up >= 0) ::close(up);
  }
};

int connect_unix(const std::string& path) {
  // Non-blocking: a gate whose backlog is full refuses (EAGAIN) instead of stalling the loop.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Moves what it can both ways; false when the connection is finished (to be closed).
bool pump(Conn& c, const std::string& backend) {
  if (c.up < 0) {  // the handshake
    const int r = SSL_do_handshake(c.ssl);
    if (r != 1) {
      const int e = SSL_get_error(c.ssl, r);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        c.tcp_events = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        return true;
      }
      ERR_clear_error();
      return false;  // not TLS (plain HTTP), or a failed handshake
    }
    c.up = connect_unix(backend);
    if (c.up < 0) return false;
  }
  bool ssl_wants_write = false;
  // Client -> gate.
  while (!c.client_eof && c.to_gate.size() < kBuffer) {
    char buf[16384];
    const int n = SSL_read(c.ssl, buf, sizeof buf);
    if (n > 0) {
      c.to_gate.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    const int e = SSL_get_error(c.ssl, n);
    if (e == SSL_ERROR_WANT_READ) break;
    if (e == SSL_ERROR_WANT_WRITE) {
      ssl_wants_write = true;
      break;
    }
    ERR_clear_error();
    if (e != SSL_ERROR_ZERO_RETURN && e != SSL_ERROR_SYSCALL) return false;
    c.client_eof = true;  // close_notify, or the TCP connection closed
  }
  while (!c.to_gate.empty()) {
    const ssize_t n = ::send(c.up, c.to_gate.data(), c.to_gate.size(), MSG_NOSIGNAL);
    if (n > 0) {
      c.to_gate.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
    return false;  // the gate closed the connection
  }
  if (c.client_eof && c.to_gate.empty() && !c.up_shut) {
    ::shutdown(c.up, SHUT_WR);  // the gate sees the request end as the client sent it
    c.up_shut = true;
  }
  // Gate -> client.
  while (!c.gate_eof && c.to_client.size() < kBuffer) {
    char buf[16384];
    const ssize_t n = ::recv(c.up, buf, sizeof buf, 0);
    if (n > 0) {
      c.to_client.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
    c.gate_eof = true;
  }
  while (!c.to_client.empty()) {
    const int n = SSL_write(c.ssl, c.to_client.data(), static_cast<int>(c.to_client.size()));
    if (n > 0) {
      c.to_client.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    const int e = SSL_get_error(c.ssl, n);
    if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
      ssl_wants_write = ssl_wants_write || e == SSL_ERROR_WANT_WRITE;
      break;
    }
    ERR_clear_error();
    return false;  // the client is gone
  }
  if (c.gate_eof && c.to_client.empty()) {
    SSL_shutdown(c.ssl);  // close_notify, best effort
    return false;
  }
  if (c.client_eof && c.gate_eof) return false;
  c.tcp_events = static_cast<short>(((!c.client_eof && c.to_gate.size() < kBuffer) ? POLLIN : 0) |
                                    ((!c.to_client.empty() || ssl_wants_write) ? POLLOUT : 0));
  c.up_events = static_cast<short>(((!c.gate_eof && c.to_client.size() < kBuffer) ? POLLIN : 0) |
                                   (!c.to_gate.empty() ? POLLOUT : 0));
  return true;
}

}  // namespace

struct TlsFront::Impl {
  TlsOptions o;
  SSL_CTX* ctx = nullptr;
  int listen_fd = -1;
  int wake[2] = {-1, -1};
  std::atomic<bool> stopping{false};
  std::string dir;  // the backend socket's private directory
  ~Impl() {
    if (ctx) SSL_CTX_free(ctx);
    for (int fd : {listen_fd, wake[0], wake[1]})
      if (fd >= 0) ::close(fd);
    if (!dir.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  }
};

Result<std::unique_ptr<TlsFront>> TlsFront::create(const TlsOptions& o) {
  H3_TRY(supervisor::check_private_key_file(o.key_label, o.key_file));
  std::unique_ptr<TlsFront> f(new TlsFront());
  f->impl_ = std::make_unique<Impl>();
  Impl& m = *f->impl_;
  m.o = o;
  m.ctx = SSL_CTX_new(TLS_server_method());
  if (!m.ctx) return make_error(errc::cli::kFlag, "TLS: cannot make a context ({})", ssl_errors());
  SSL_CTX_set_min_proto_version(m.ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(m.ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
  // A client that closes without close_notify (most do after their last reply) simply ends.
  SSL_CTX_set_options(m.ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
  if (SSL_CTX_use_certificate_chain_file(m.ctx, o.cert_file.c_str()) != 1)
    return make_error(errc::cli::kFlag, "{} {}: expected a PEM certificate ({})", o.cert_label,
                      o.cert_file, ssl_errors());
  if (SSL_CTX_use_PrivateKey_file(m.ctx, o.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
    return make_error(errc::cli::kFlag, "{} {}: expected a PEM private key ({})", o.key_label,
                      o.key_file, ssl_errors());
  if (SSL_CTX_check_private_key(m.ctx) != 1)
    return make_error(errc::cli::kFlag, "{} {}: not the key of {} {} ({})", o.key_label, o.key_file,
                      o.cert_label, o.cert_file, ssl_errors());
  return f;
}

TlsFront::~TlsFront() = default;

Result<int> TlsFront::bind(const std::string& host, int port) {
  Impl& m = *impl_;
  char tmpl[] = "/tmp/h3pipe-api-tls.XXXXXX";  // mkdtemp: mode 0700
  if (!::mkdtemp(tmpl))
    return make_error(errc::io::kWrite, "TLS: cannot make a private directory in /tmp ({})",
                      std::strerror(errno));
  m.dir = tmpl;
  backend_ = m.dir + "/gate.sock";
  auto l = listen_tcp(host, port);
  if (!l.ok()) return l.error();
  m.listen_fd = l->fd;
  if (::pipe2(m.wake, O_NONBLOCK | O_CLOEXEC) != 0)
    return make_error(errc::cli::kFlag, "cannot listen on {}:{} (pipe: {})", host, port,
                      std::strerror(errno));
  return l->port;
}

void TlsFront::stop() {
  impl_->stopping = true;
  if (impl_->wake[1] >= 0) (void)!::write(impl_->wake[1], "x", 1);
}

void TlsFront::run() {
  Impl& m = *impl_;
  std::list<Conn> conns;  // oldest first
  std::vector<pollfd> fds;
  std::vector<std::list<Conn>::iterator> at;
  Clock::time_point accept_paused_until{};
  while (!m.stopping) {
    auto now = Clock::now();
    const bool paused = accept_paused_until > now;
    fds.assign({{m.wake[0], POLLIN, 0}, {paused ? -1 : m.listen_fd, POLLIN, 0}});
    at.clear();
    int timeout = paused ? 10 : -1;
    for (auto it = conns.begin(); it != conns.end(); ++it) {
      fds.push_back({it->tcp, it->tcp_events, 0});
      fds.push_back({it->up, it->up < 0 ? short(0) : it->up_events, 0});
      at.push_back(it);
      if (it->up < 0) {  // in its handshake: until its deadline
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(it->deadline - now);
        const int ms = static_cast<int>(std::max<long long>(left.count() + 1, 0));
        timeout = timeout < 0 ? ms : std::min(timeout, ms);
      }
    }
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) break;
    now = Clock::now();
    for (std::size_t i = 0; i < at.size(); ++i) {
      auto it = at[i];
      const bool ready = fds[2 + 2 * i].revents || fds[3 + 2 * i].revents;
      if ((ready && !pump(*it, backend_)) || (it->up < 0 && it->deadline <= now)) conns.erase(it);
    }
    if (fds[1].revents) {
      for (;;) {
        const int fd = ::accept4(m.listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          // Out of descriptors: accepting pauses a moment instead of spinning.
          if (errno == EMFILE || errno == ENFILE)
            accept_paused_until = now + std::chrono::milliseconds(10);
          break;
        }
        if (conns.size() >= m.o.max_connections) {  // the oldest handshake makes room
          auto old =
              std::find_if(conns.begin(), conns.end(), [](const Conn& c) { return c.up < 0; });
          if (old == conns.end()) {
            ::close(fd);
            continue;
          }
          conns.erase(old);
        }
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        Conn& c = conns.emplace_back();
        c.tcp = fd;
        c.ssl = SSL_new(m.ctx);
        c.deadline = now + m.o.handshake_timeout;
        if (!c.ssl || SSL_set_fd(c.ssl, fd) != 1) {
          conns.pop_back();
          continue;
        }
        SSL_set_accept_state(c.ssl);
        if (!pump(c, backend_)) conns.pop_back();
      }
    }
  }
  conns.clear();
}

}  // namespace h3pipe::api
