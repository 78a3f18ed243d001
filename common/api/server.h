#pragma once
// h3pipe-api's HTTP front door (issue #37, first slice; docs/api.md): the OpenAI-shaped
// /v1/videos and /v1/models over cpp-httplib behind an accept gate (gate.h: a stalled client
// costs a slot, never a thread).  Stateless: tokens, videos, idempotency keys and the jobs
// themselves live in Redis, so replicas may stand side by side.
#include <prometheus/registry.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/api/rate_limit.h"
#include "common/config/config.h"
#include "common/queue/redis.h"

namespace h3pipe::api {

struct ServerOptions {
  std::string bind = "127.0.0.1";
  int port = 8088;                           // 0: any free port (ServerHandle::port)
  std::size_t max_body_bytes = 1024 * 1024;  // 413 beyond
  int threads = 16;
  // Requests per second per token by role, shared by replicas through Redis (rate_limit.h);
  // a token's own limit (`h3pipe token limit`) wins.  429 with Retry-After beyond.
  RateLimits rate_limits;
  // POST /v1/videos as multipart/form-data with an input_reference file may be this large
  // (413 beyond); every other request keeps max_body_bytes.
  std::size_t max_upload_bytes = 32 * 1024 * 1024;
  // This host's name in the config (`--host`): peers serve it the videos decoded on their disks
  // (peers.h), and it announces its URL in Redis (h3pipe:api:hosts).  Empty: neither.
  std::string host;
  std::string advertise_url;  // the URL announced; empty: from bind and port (peers.h)
  // The console's bundle (#38: index.html, app.js, app.css), served under /ui/; empty or
  // without index.html: /ui/ answers 404 saying so.
  std::string ui_dir;
  // The service's own certificate (tls_front.h): both set, the port speaks only TLS.
  std::string tls_cert, tls_key;
};

// Opens Redis connections for request handlers (a pool of them, each reconnecting after an I/O
// error); a connect that fails makes the request a 503.
using RedisFactory = std::function<Result<std::unique_ptr<queue::Redis>>()>;

class Server final {
 public:
  Server(config::Cluster cluster, RedisFactory redis, ServerOptions o);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  // Binds (port 0: a free one); the port bound, or an error naming the address.
  Result<int> bind();
  // The metrics of its routes (api_metrics.h), for the Prometheus port main() opens.
  std::shared_ptr<prometheus::Registry> registry() const;
  // Serves until stop() (from another thread or a signal handler's thread).
  void listen();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace h3pipe::api
