#pragma once
// The accept gate in front of h3pipe-api's cpp-httplib handlers (issue #35 item 5, #37).
// cpp-httplib 0.11 gives each accepted connection a pool thread that then waits up to its read
// timeout for the request, so 16 clients that connect and send nothing (or a byte a second)
// starved every other client.  The gate owns the listening socket and runs one poll() loop over
// non-blocking connections, the way common/metrics/http_endpoint.h serves the metrics port: a
// connection waiting for its request costs a slot, never a thread.  A connection goes to a pool
// thread only when its whole request (head, and a body of Content-Length bytes or ending in the
// last chunk) has arrived, or when it has sent more than the bounds allow (then httplib answers
// 413/431/400 from what it has); it must arrive within request_timeout of the accept, else 408
// and close.  At most max_pending connections wait: one more evicts the oldest waiting (408).
// At most max_ready complete requests wait for a pool thread: more get 503 with Retry-After.
// Keep-alive: a serve that answered its whole request and may keep the connection
// (may_keep_alive(), keep_alive()) hands it back to the loop with any bytes of the next request
// read already, where it waits like a new one (a slot, no thread) up to keep_alive_timeout and is
// then closed without a reply; at most max_requests_per_connection requests per connection.  A
// busy one skips that round trip: its pool thread lingers for the next request (linger).  The
// reply is written with write_timeout per write; sockets are TCP_NODELAY (a reply's head and body
// are two writes, which Nagle's algorithm would hold back behind the client's delayed ACK).
#include <atomic>
#include <chrono>
#include <functional>
#include <string>

#include "common/core/result.h"

namespace h3pipe::api {

struct GateLimits {
  std::chrono::milliseconds request_timeout{5000};
  std::chrono::milliseconds write_timeout{10000};
  std::size_t max_head_bytes = 16 * 1024;
  std::size_t max_body_bytes = 1024 * 1024;
  // A multipart/form-data request whose request line starts with upload_request_line (POST
  // /v1/videos with its input_reference) may carry this much body (0: no such exception); at
  // most max_buffered_bytes are held for all waiting connections together (beyond: 503).
  std::size_t max_upload_bytes = 0;
  std::string upload_request_line = "POST /v1/videos ";
  // Such an upload goes to a pool thread as soon as its head is whole, and its body is read
  // there as it arrives (streamed to disk: upload_stream.h) instead of being held here.
  bool stream_uploads = false;
  std::size_t max_buffered_bytes = 256ull * 1024 * 1024;
  std::size_t max_pending = 512;
  std::size_t max_ready = 256;
  int threads = 16;
  std::chrono::milliseconds keep_alive_timeout{5000};
  std::size_t max_requests_per_connection = 1000;  // 1: every connection closed after one
  // A pool thread that answered a kept-alive request waits this long for the connection's next
  // one and serves it itself (at most max_lingering threads at once; 0: straight back to the loop).
  std::chrono::milliseconds linger{50};
  int max_lingering = 4;
};

// Serves one request whose bytes so far are `head` on the non-blocking socket `fd` (the gate
// closes fd afterwards, unless the serve called Gate::keep_connection()).
using GateServe = std::function<void(int fd, const std::string& head)>;

// A non-blocking listening TCP socket on host:port (a numeric address; port 0: a free one), for
// the gate and the TLS front alike: its descriptor and the port it got.  Errors: cli.flag naming
// host:port and why.
struct TcpListener {
  int fd = -1;
  int port = 0;
};
Result<TcpListener> listen_tcp(const std::string& host, int port);

class Gate final {
 public:
  explicit Gate(GateLimits limits) : limits_(limits) {}
  ~Gate();
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  // Binds host:port (0: a free one); the port bound.
  Result<int> bind(const std::string& host, int port);
  // Listens on a Unix socket at `path` instead (the TLS front's backend, tls_front.h); 0.
  Result<int> bind_unix(const std::string& path);
  // Runs the loop and the pool until stop(); returns when every pool thread has finished.
  void run(const GateServe& serve);
  void stop();
  // Called by a GateServe on its own thread: the connection now belongs to the caller (an SSE
  // subscriber handed to the event hub, events_hub.h), and the gate neither shuts it down nor
  // closes it when the serve returns.
  static void keep_connection();
  // On a GateServe's thread: whether the connection may stay open after this request (not its
  // last allowed one, the gate not stopping); and, once the reply is written, hands it back to
  // the loop for the next request, whose first bytes (read already) are `rest`.
  static bool may_keep_alive();
  static void keep_alive(std::string rest);

 private:
  GateLimits limits_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
};

}  // namespace h3pipe::api
