#pragma once
// The HTTP ports every service opens: the Prometheus scrape endpoint and the liveness/readiness
// probe.  Both run on metrics::HttpEndpoint (http_endpoint.h), a poll() loop that answers any path,
// method, header or body with a status, never a crash (issue #14), and that slow, stalled,
// half-closing or junk-sending clients cannot starve (issue #22): a request must arrive whole
// within 5 s (else 408), junk gets 400 at once, headers and body are capped at 8 KiB each, at most
// 64 connections per port (the oldest still waiting, for its request or for its reply to be
// taken, is evicted for a new one; a drain after the last reply holds no slot).
//
// Threading: start() spawns the listener thread; the destructor stops and joins it.  set_ready()
// may be called from any thread.
#include <prometheus/registry.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/core/result.h"

namespace h3pipe::metrics {

class HttpEndpoint;  // the listener shared by both servers (http_endpoint.h)

// GET /metrics -> the registry in Prometheus' text format; every other path 404.
class MetricsServer final {
 public:
  static Result<std::unique_ptr<MetricsServer>> start(
      const std::string& bind, int port, std::shared_ptr<prometheus::Registry> registry);
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
  // A degraded state of one part of the service (`source`: "worker", "ingest"), "" when it is
  // left: while any is set /readyz answers 503 "degraded: REASON[; REASON]" (issue #22).
  void set_degraded(const std::string& source, std::string reason);

 private:
  struct State {
    std::atomic<bool> ready{false};
    std::mutex mu;
    std::string failed;                           // guarded by mu
    std::map<std::string, std::string> degraded;  // source -> reason; guarded by mu
  };
  HealthServer() = default;
  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::unique_ptr<HttpEndpoint> http_;
};

}  // namespace h3pipe::metrics
