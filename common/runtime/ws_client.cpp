#include "common/runtime/ws_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/core/error_codes.h"

namespace h3pipe::runtime::ws {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kMaxHandshakeBytes = 16 * 1024;

std::string base64(const unsigned char* p, int n) {
  std::string out(static_cast<std::size_t>(4 * ((n + 2) / 3)), '\0');
  const int w = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), p, n);
  out.resize(static_cast<std::size_t>(w));
  return out;
}

// Sec-WebSocket-Accept for a key: base64(SHA-1(key + GUID)).
std::string accept_for(const std::string& key) {
  const std::string s = key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(s.data(), s.size(), md, &n, EVP_sha1(), nullptr);
  return base64(md, static_cast<int>(n));
}

int left_ms(Clock::time_point deadline) {
  const auto l =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return l < 0 ? 0 : static_cast<int>(l);
}

// Writes everything before the deadline (the socket is non-blocking).
Status write_all(int fd, const std::string& data, Clock::time_point deadline) {
  std::size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, left_ms(deadline)) <= 0)
        return make_error(errc::http::kTimeout, "websocket: write timed out");
      continue;
    }
    return make_error(errc::http::kIo, "websocket: write: {}", std::strerror(errno));
  }
  return {};
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

Result<std::unique_ptr<Client>> Client::connect(const std::string& http_base,
                                                const std::string& path, int timeout_ms) {
  const std::string scheme = "http://";
  if (http_base.rfind(scheme, 0) != 0)
    return make_error(errc::http::kUrl, "websocket: only http:// servers are followed (got {})",
                      http_base);
  std::string rest = http_base.substr(scheme.size());
  const auto slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  std::string prefix = slash == std::string::npos ? "" : rest.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  std::string host = hostport, port = "80";
  if (!hostport.empty() && hostport[0] == '[') {
    const auto close = hostport.find(']');
    if (close == std::string::npos)
      return make_error(errc::http::kIo, "websocket: bad host in {}", http_base);
    host = hostport.substr(1, close - 1);
    if (close + 1 < hostport.size() && hostport[close + 1] == ':')
      port = hostport.substr(close + 2);
  } else if (const auto colon = hostport.rfind(':'); colon != std::string::npos) {
    host = hostport.substr(0, colon);
    port = hostport.substr(colon + 1);
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return make_error(errc::http::kConnect, "websocket: cannot resolve {}: {}", host,
                      gai_strerror(rc));
  int fd = -1;
  std::string why = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
    if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof err;
      if (::poll(&p, 1, left_ms(deadline)) == 1 &&
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
        break;
      why = err ? std::strerror(err) : "timed out";
    } else {
      why = std::strerror(errno);
    }
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  if (fd < 0) return make_error(errc::http::kConnect, "websocket: {}: {}", hostport, why);
  std::unique_ptr<Client> c(new Client(fd));
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

  unsigned char nonce[16];
  RAND_bytes(nonce, sizeof nonce);
  const std::string key = base64(nonce, sizeof nonce);
  const std::string req = "GET " + prefix + path + " HTTP/1.1\r\nHost: " + hostport +
                          "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                          "Sec-WebSocket-Key: " +
                          key + "\r\nSec-WebSocket-Version: 13\r\n\r\n";
  H3_TRY(write_all(fd, req, deadline));
  // The handshake answer: headers up to the blank line; what follows is frames.
  std::string head;
  for (;;) {
    const auto end = head.find("\r\n\r\n");
    if (end != std::string::npos) {
      c->buf_ = head.substr(end + 4);
      head.resize(end + 2);
      break;
    }
    if (head.size() > kMaxHandshakeBytes)
      return make_error(errc::http::kIo, "websocket: handshake answer over {} bytes",
                        kMaxHandshakeBytes);
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, left_ms(deadline)) <= 0)
      return make_error(errc::http::kTimeout, "websocket: no handshake answer from {}", hostport);
    char chunk[4096];
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n == 0) return make_error(errc::http::kIo, "websocket: {} closed the handshake", hostport);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return make_error(errc::http::kIo, "websocket: read: {}", std::strerror(errno));
    }
    head.append(chunk, static_cast<std::size_t>(n));
  }
  const auto eol = head.find("\r\n");
  const std::string status = head.substr(0, eol);
  if (status.find(" 101") == std::string::npos)
    return make_error(errc::http::kIo, "websocket: {}{} refused the upgrade: {}", hostport, path,
                      status);
  const std::string want = accept_for(key);
  bool accepted = false;
  for (std::size_t at = eol + 2; at < head.size();) {
    const auto e = head.find("\r\n", at);
    const std::string line = head.substr(at, e - at);
    at = e + 2;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (lower(line.substr(0, colon)) != "sec-websocket-accept") continue;
    std::string v = line.substr(colon + 1);
    while (!v.empty() && v.front() == ' ') v.erase(0, 1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\r')) v.pop_back();
    accepted = v == want;
  }
  if (!accepted)
    return make_error(errc::http::kIo,
                      "websocket: {} answered without the right "
                      "Sec-WebSocket-Accept",
                      hostport);
  return c;
}

Client::~Client() {
  if (fd_ >= 0) {
    (void)send_frame(0x8, std::string("\x03\xe8", 2));  // close, 1000
    ::close(fd_);
  }
}

Status Client::send_frame(int opcode, const std::string& payload) {
  std::string f;
  f.push_back(static_cast<char>(0x80 | opcode));
  const std::size_t n = payload.size();
  if (n < 126) {
    f.push_back(static_cast<char>(0x80 | n));
  } else if (n < 65536) {
    f.push_back(static_cast<char>(0x80 | 126));
    f.push_back(static_cast<char>(n >> 8));
    f.push_back(static_cast<char>(n & 0xff));
  } else {
    f.push_back(static_cast<char>(0x80 | 127));
    for (int i = 7; i >= 0; --i) f.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  }
  unsigned char mask[4];
  RAND_bytes(mask, 4);
  f.append(reinterpret_cast<const char*>(mask), 4);
  for (std::size_t i = 0; i < n; ++i) f.push_back(static_cast<char>(payload[i] ^ mask[i % 4]));
  return write_all(fd_, f, Clock::now() + std::chrono::seconds(2));
}

Status Client::parse(std::vector<Message>& out, std::size_t max) {
  std::size_t at = 0;
  while (out.size() < max) {
    if (skip_ > 0) {
      const std::size_t n = std::min<std::uint64_t>(skip_, buf_.size() - at);
      at += n;
      skip_ -= n;
      if (skip_ > 0) break;
      continue;
    }
    if (buf_.size() - at < 2) break;
    const auto* p = reinterpret_cast<const unsigned char*>(buf_.data() + at);
    const bool fin = p[0] & 0x80;
    const int opcode = p[0] & 0x0f;
    if (p[1] & 0x80) return make_error(errc::http::kIo, "websocket: a masked server frame");
    std::uint64_t len = p[1] & 0x7f;
    std::size_t hdr = 2;
    if (len == 126) {
      if (buf_.size() - at < 4) break;
      len = (std::uint64_t{p[2]} << 8) | p[3];
      hdr = 4;
    } else if (len == 127) {
      if (buf_.size() - at < 10) break;
      len = 0;
      for (int i = 0; i < 8; ++i) len = (len << 8) | p[2 + i];
      hdr = 10;
    }
    if (opcode == 0x2 || (opcode == 0x0 && in_binary_)) {
      if (opcode == 0x2) {
        binary_.clear();
        skipping_ = false;
      }
      // Over the bound (this frame, or the message so far): discarded as it arrives.
      if (skipping_ || binary_.size() > max_binary_ || len > max_binary_ - binary_.size()) {
        if (fin) ++skipped_binary_;
        skipping_ = !fin;
        in_binary_ = !fin;
        std::string().swap(binary_);
        at += hdr;
        skip_ = len;
        continue;
      }
      if (buf_.size() - at < hdr + len) break;  // kept: wait for the whole frame
      binary_.append(buf_, at + hdr, static_cast<std::size_t>(len));
      at += hdr + static_cast<std::size_t>(len);
      in_binary_ = !fin;
      if (fin) out.push_back({true, std::exchange(binary_, {})});
      continue;
    }
    if (len > kMaxMessageBytes || message_.size() + len > kMaxMessageBytes)
      return make_error(errc::http::kIo, "websocket: a message over {} bytes", kMaxMessageBytes);
    if (buf_.size() - at < hdr + len) break;
    const std::string payload = buf_.substr(at + hdr, static_cast<std::size_t>(len));
    at += hdr + static_cast<std::size_t>(len);
    switch (opcode) {
      case 0x1:
      case 0x0:
        if (opcode == 0x1) message_.clear();
        if (opcode == 0x0 && !in_text_)
          return make_error(errc::http::kIo, "websocket: a continuation of nothing");
        message_ += payload;
        in_text_ = !fin;
        if (fin) out.push_back({false, std::exchange(message_, {})});
        break;
      case 0x8:
        return make_error(errc::http::kIo, "websocket: the server closed the connection");
      case 0x9:
        H3_TRY(send_frame(0xA, payload));
        break;
      default:  // pong, reserved
        break;
    }
  }
  buf_.erase(0, at);
  return {};
}

Result<std::vector<Message>> Client::poll(int timeout_ms, std::size_t max) {
  std::vector<Message> out;
  if (fd_ < 0) return make_error(errc::http::kIo, "websocket: not connected");
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (auto s = parse(out, max); !s.ok()) {
      ::close(fd_);
      fd_ = -1;
      return s.error();
    }
    if (!out.empty() || out.size() >= max) return out;
    pollfd p{fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, left_ms(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return out;
    char chunk[16384];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      ::close(fd_);
      fd_ = -1;
      return make_error(errc::http::kIo, "websocket: connection closed");
    }
    if (n > 0) {
      // Bounded: at most one message plus a frame header waits unparsed (a binary one over
      // max_binary_ is skipped; max_binary_ <= kMaxMessageBytes).
      if (buf_.size() + static_cast<std::size_t>(n) > kMaxMessageBytes + 16 + sizeof chunk) {
        ::close(fd_);
        fd_ = -1;
        return make_error(errc::http::kIo, "websocket: receive buffer over its bound");
      }
      buf_.append(chunk, static_cast<std::size_t>(n));
    }
  }
}

}  // namespace h3pipe::runtime::ws
