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
// Each request is served on a connection of its own (Connection: close), so an idle keep-alive
// client holds no thread either; the reply is written with write_timeout per write.
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
  std::size_t max_buffered_bytes = 256ull * 1024 * 1024;
  std::size_t max_pending = 512;
  std::size_t max_ready = 256;
  int threads = 16;
};

// Serves one request whose bytes so far are `head` on the non-blocking socket `fd` (the gate
// closes fd afterwards, unless the serve called Gate::keep_connection()).
using GateServe = std::function<void(int fd, const std::string& head)>;

class Gate final {
 public:
  explicit Gate(GateLimits limits) : limits_(limits) {}
  ~Gate();
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  // Binds host:port (0: a free one); the port bound.
  Result<int> bind(const std::string& host, int port);
  // Runs the loop and the pool until stop(); returns when every pool thread has finished.
  void run(const GateServe& serve);
  void stop();
  // Called by a GateServe on its own thread: the connection now belongs to the caller (an SSE
  // subscriber handed to the event hub, events_hub.h), and the gate neither shuts it down nor
  // closes it when the serve returns.
  static void keep_connection();

 private:
  GateLimits limits_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
};

}  // namespace h3pipe::api
