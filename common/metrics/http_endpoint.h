#pragma once
// The small HTTP/1.x server behind MetricsServer and HealthServer (http_servers.h), internal to
// this module.  One thread per endpoint runs a poll() loop over non-blocking sockets, so a client
// costs a slot, never a thread: slow or stalled clients cannot starve the others (issue #22 item
// 6; cpp-httplib 0.11's two worker threads were held by two clients sending a byte a second).
//
// Bounds (HttpLimits): a request (line, headers, body) must arrive whole within request_timeout
// of its first byte or of the connection's start, else 408 and close; line + headers at most
// max_header_bytes (431, or 414 for the line alone), a body at most max_body_bytes (413); the
// reply must be taken within write_timeout; an idle keep-alive connection is closed after
// keep_alive_idle, and after keep_alive_max requests.  At most max_connections at once: a new
// connection beyond that evicts the oldest one still waiting for its request (it gets 408) or for
// its reply to be taken; a connection draining after its final reply holds no slot (at most
// max_connections drains, the oldest closed first); a new connection is read as soon as it is
// accepted.  So a flood of idle sockets, or of clients that send a request and never read or
// close, cannot lock a scraper out (issue #35 D5).  Bytes that cannot start a request (a TLS
// hello, binary junk) get 400 at once; a request followed by a half-close (shutdown(SHUT_WR)) is
// answered, then the connection closed.  After a final reply the server half-closes and drains
// what the client still sends for a moment, so the reply is not lost to a reset.
//
// Handlers run on the loop thread: keep them short (they are: a registry serialisation, a flag).
// Threading: start() spawns the thread; the destructor stops and joins it.
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "common/core/result.h"

namespace h3pipe::metrics {

struct HttpLimits {
  std::chrono::milliseconds request_timeout{5000};
  std::chrono::milliseconds write_timeout{5000};
  std::chrono::milliseconds keep_alive_idle{5000};
  std::chrono::milliseconds drain{1000};
  std::size_t max_header_bytes = 8 * 1024;
  std::size_t max_body_bytes = 8 * 1024;
  int keep_alive_max = 100;
  std::size_t max_connections = 64;
};

struct HttpReply {
  int status = 200;
  std::string content_type = "text/plain";
  std::string body;
};

// GET (and HEAD, answered as GET without the body) of one path; the query string is ignored.
using HttpHandler = std::function<HttpReply()>;

class HttpEndpoint final {
 public:
  explicit HttpEndpoint(HttpLimits limits = {});
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  // Before listen(): register the paths.  Unknown paths answer 404, other methods 405.
  void get(const std::string& path, HttpHandler h) { routes_[path] = std::move(h); }

  // Binds bind:port (0 = a free port, read back) and serves on a thread of its own.  `in_use`
  // is the error code when the address cannot be bound.
  Status listen(const ErrorCode& in_use, const std::string& what, const std::string& bind,
                int port);
  int port() const { return port_; }

  struct Loop;  // http_endpoint.cpp

 private:
  HttpLimits limits_;
  std::map<std::string, HttpHandler> routes_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  int port_ = -1;
  std::thread thread_;
};

}  // namespace h3pipe::metrics
