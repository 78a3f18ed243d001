#include "common/api/gated_http.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>

#include "common/api/gate.h"

namespace h3pipe::api {
namespace {

// One request's connection, handed over by the Gate with the bytes it has read: reads come from
// those first, then (a streamed upload's body, or one over the bounds, which httplib skips) from
// the socket while the client pauses at most kReadPause; writes wait at most write_timeout each.
class GatedStream final : public httplib::Stream {
 public:
  static constexpr auto kReadPause = std::chrono::seconds(5);
  GatedStream(int fd, const std::string& head, std::chrono::milliseconds write_timeout)
      : fd_(fd),
        head_(head),
        write_timeout_(write_timeout),
        read_deadline_(std::chrono::steady_clock::now() + kReadPause) {}
  bool is_readable() const override {
    return !taken_ && (pos_ < head_.size() || wait(POLLIN, left()));
  }
  bool is_writable() const override { return taken_ || wait(POLLOUT, write_timeout_.count()); }
  // The connection went to a handler's new owner: what httplib writes from now on is dropped.
  int take() {
    (void)flush();  // (nothing is held before a handler takes it: the head comes after)
    taken_ = true;
    return fd_;
  }
  ssize_t read(char* ptr, size_t size) override {
    if (taken_) return -1;
    if (pos_ < head_.size()) {
      const size_t n = std::min(size, head_.size() - pos_);
      std::memcpy(ptr, head_.data() + pos_, n);
      pos_ += n;
      return static_cast<ssize_t>(n);
    }
    read_socket_ = true;
    if (!wait(POLLIN, left())) return -1;
    const ssize_t n = ::recv(fd_, ptr, size, 0);
    // A streamed upload (gate.h) reads on while the client keeps sending: the deadline is for a
    // pause, not for the whole body.
    if (n > 0) read_deadline_ = std::chrono::steady_clock::now() + kReadPause;
    return n;
  }
  // After a reply to a request whose body was read from the socket, or whose body was refused
  // before it arrived (`unread_body`: a Content-Length over the limit): the write side is shut
  // and what the client still sends is read and dropped (up to a second or 64 MiB), so a client
  // refused mid-upload reads its 413 instead of a reset.
  void linger(bool unread_body) const {
    if (taken_ || (!read_socket_ && !unread_body)) return;
    ::shutdown(fd_, SHUT_WR);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    char buf[16384];
    for (std::size_t dropped = 0; dropped < (64u << 20);) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          until - std::chrono::steady_clock::now())
                          .count();
      if (ms <= 0 || !wait(POLLIN, ms)) return;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return;
      dropped += static_cast<std::size_t>(n);
    }
  }
  // The bytes httplib read from the gate's, when it read none from the socket itself.
  std::optional<size_t> consumed() const {
    return read_socket_ ? std::nullopt : std::optional<size_t>(pos_);
  }
  bool taken() const { return taken_; }
  // httplib writes a reply's head, then its body: the head is held and goes out with the first
  // body write in one segment (two were two wake-ups of the client and an ACK), or at flush().
  // A write is tried at once; only one that would block waits, write_timeout at most.
  ssize_t write(const char* ptr, size_t size) override {
    if (taken_) return static_cast<ssize_t>(size);
    if (!wrote_) {
      // An interim "100 Continue" goes at once: the client sends the body only once it has it
      // (curl waits up to a second for it before a body over 1 MiB).
      constexpr std::string_view kInterim = "HTTP/1.1 100";
      if (size >= kInterim.size() && std::string_view(ptr, kInterim.size()) == kInterim)
        return send_all(ptr, size) ? static_cast<ssize_t>(size) : -1;
      wrote_ = true;
      held_.assign(ptr, size);
      return static_cast<ssize_t>(size);
    }
    if (!send_all(ptr, size)) return -1;
    return static_cast<ssize_t>(size);
  }
  // Sends what write() holds; false when the client is gone (or stalled past write_timeout).
  bool flush() { return taken_ || send_all(nullptr, 0); }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    name(::getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    name(::getsockname, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  void name(int (*get)(int, sockaddr*, socklen_t*), std::string& ip, int& port) const {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    char buf[INET6_ADDRSTRLEN] = "";
    port = 0;
    if (get(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return;
    if (ss.ss_family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
      port = ntohs(a->sin6_port);
    } else if (ss.ss_family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
      port = ntohs(a->sin_port);
    }
    ip = buf;
  }
  // held_ then [ptr, ptr + size) in as few sends as the socket takes.
  bool send_all(const char* ptr, size_t size) {
    size_t done = 0;  // of held_ and then of ptr, together
    const size_t total = held_.size() + size;
    while (done < total) {
      iovec iov[2];
      int n_iov = 0;
      if (done < held_.size()) iov[n_iov++] = {held_.data() + done, held_.size() - done};
      const size_t from = done > held_.size() ? done - held_.size() : 0;
      if (size > from) iov[n_iov++] = {const_cast<char*>(ptr) + from, size - from};
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(n_iov);
      const ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
          wait(POLLOUT, write_timeout_.count()))
        continue;
      held_.clear();
      return false;
    }
    held_.clear();
    return true;
  }
  long long left() const {
    return std::max<long long>(0, std::chrono::duration_cast<std::chrono::milliseconds>(
                                      read_deadline_ - std::chrono::steady_clock::now())
                                      .count());
  }
  bool wait(short ev, long long ms) const {
    pollfd p{fd_, ev, 0};
    int r;
    while ((r = ::poll(&p, 1, static_cast<int>(ms))) < 0 && errno == EINTR) {
    }
    return r > 0 && (p.revents & (ev | POLLHUP | POLLERR));
  }
  int fd_;
  bool taken_ = false;
  bool read_socket_ = false;
  bool wrote_ = false;  // the first write (the head) is in held_ until the next or flush()
  std::string held_;
  const std::string& head_;
  size_t pos_ = 0;
  std::chrono::milliseconds write_timeout_;
  std::chrono::steady_clock::time_point read_deadline_;
};

thread_local GatedStream* current = nullptr;

// Debian's cpp-httplib 0.11 compresses a reply with brotli at its default quality (11) whenever
// the request accepts br, as every browser's does: 0.53 s for the 148 KB JSON of a run of 1,000
// jobs on this machine, against 0.017 s with gzip.  httplib gets the head with br taken out of
// Accept-Encoding (gzip and deflate stay).
std::string without_brotli(const std::string& head) {
  const std::size_t end = head.find("\r\n\r\n");
  std::string out = head;
  for (std::size_t at = out.find("\r\n"); at != std::string::npos && at < end;
       at = out.find("\r\n", at + 2)) {
    static constexpr std::string_view kName = "accept-encoding:";
    if (out.size() - at - 2 < kName.size() ||
        !std::equal(
            kName.begin(), kName.end(), out.begin() + static_cast<long>(at) + 2,
            [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); }))
      continue;
    const std::size_t line_end = std::min(out.find("\r\n", at + 2), end);
    for (std::size_t b = out.find("br", at + 2 + kName.size()); b < line_end;
         b = out.find("br", b + 2))
      out.replace(b, 2, "  ");
  }
  return out;
}

// Where the first request in buf ends (its head and a Content-Length body); nullopt when that is
// not known (no whole head, a chunked body, a malformed length): the connection is not kept.
std::optional<size_t> request_end(const std::string& buf) {
  const size_t end = buf.find("\r\n\r\n");
  if (end == std::string::npos) return std::nullopt;
  size_t body = 0;
  for (size_t at = buf.find("\r\n"); at < end; at = buf.find("\r\n", at + 2)) {
    const size_t line_end = buf.find("\r\n", at + 2);
    std::string line = buf.substr(at + 2, line_end - at - 2);
    for (auto& c : line) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (line.rfind("transfer-encoding:", 0) == 0) return std::nullopt;
    if (line.rfind("content-length:", 0) == 0) {
      const std::string v = line.substr(15);
      const size_t digits = v.find_first_not_of(" \t");
      if (digits == std::string::npos || !std::isdigit(static_cast<unsigned char>(v[digits])))
        return std::nullopt;
      char* e = nullptr;
      body = std::strtoull(v.c_str() + digits, &e, 10);
      if (*e && *e != ' ' && *e != '\t') return std::nullopt;
    }
  }
  return end + 4 + body;
}

}  // namespace

void GatedHttp::serve(int fd, const std::string& raw_head,
                      std::chrono::milliseconds write_timeout) {
  const std::string head = without_brotli(raw_head);
  GatedStream strm(fd, head, write_timeout);
  current = &strm;
  // Keep-alive (gate.h) only for a request whose end is known; the reply then says so, and the
  // connection goes back to the gate only when httplib read exactly that request (a body it
  // skipped, a 413, would otherwise be parsed as the next request).
  const auto end = request_end(head);
  const bool may_keep = end && *end <= head.size() && Gate::may_keep_alive();
  bool closed = false;
  const bool served = process_request(strm, /*close_connection=*/!may_keep, closed, nullptr);
  const bool ok = strm.flush() && served;
  current = nullptr;
  if (ok && may_keep && !closed && !strm.taken() && strm.consumed() == end)
    Gate::keep_alive(head.substr(*end));
  else
    strm.linger(/*unread_body=*/!end || *end > head.size());
}

int GatedHttp::take_connection() {
  if (!current) return -1;
  Gate::keep_connection();
  return current->take();
}

}  // namespace h3pipe::api
