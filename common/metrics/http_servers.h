#pragma once
// The HTTP ports every service opens: the Prometheus scrape endpoint and the liveness/readiness
// probe.  Both are cpp-httplib servers (Debian's libcpp-httplib): any path, method, header or body
// gets a status, never a crash (issue #14: prometheus-cpp 1.0.1's civetweb exposer segfaulted on
// any path but /metrics).  Requests are bounded: 8 KiB of body, a 2 s read timeout, a few
// keep-alive requests per connection, two worker threads per server.
//
// Threading: start() spawns the listener thread; the destructor stops and joins it.  set_ready()
// may be called from any thread.
#include <prometheus/registry.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "common/core/result.h"

namespace h3pipe::metrics {

class HttpEndpoint;  // the listener shared by both servers (http_servers.cpp)

// GET /metrics -> the registry in Prometheus' text format; every other path 404.
class MetricsServer final {
 public:
  static Result<std::unique_ptr<MetricsServer>> start(const std::string& bind, int port,
                                                      std::shared_ptr<prometheus::Registry> registry);
  ~MetricsServer();
  int port() const;

 private:
  MetricsServer() = default;
  std::unique_ptr<HttpEndpoint> http_;
};

// GET /healthz -> 200 while the process runs; GET /readyz -> 200 when ready, 503 otherwise
// ("not ready", or "failed: REASON" once the service knows it can never become ready, e.g. its
// runtime cannot load: `h3pipe start` then stops at once with that reason); every other path
// 404.  HEAD works as GET without the body.
class HealthServer final {
 public:
  static Result<std::unique_ptr<HealthServer>> start(const std::string& bind, int port);
  ~HealthServer();
  int port() const;
  void set_ready(bool r) { state_->ready.store(r); }
  bool ready() const { return state_->ready.load(); }
  void set_failed(std::string reason);

 private:
  struct State {
    std::atomic<bool> ready{false};
    std::mutex mu;
    std::string failed;  // guarded by mu
  };
  HealthServer() = default;
  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::unique_ptr<HttpEndpoint> http_;
};

}  // namespace h3pipe::metrics
