#pragma once
// Metrics plumbing: an exposer bound to the configured interface (port 0 = a free port, read
// back), and a tiny liveness/readiness HTTP endpoint.  Registries are passed in, never global
// (CONVENTIONS.md rule 8); probes (below and in each component) own their metric families.
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "common/core/result.h"

namespace h3pipe::metrics {

class MetricsServer final {
 public:
  static Result<std::unique_ptr<MetricsServer>> start(const std::string& bind, int port,
                                                      std::shared_ptr<prometheus::Registry> registry);
  int port() const { return port_; }

 private:
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

// GET /healthz -> 200 while the process runs; GET /readyz -> 200 when ready, 503 otherwise.
class HealthServer final {
 public:
  static Result<std::unique_ptr<HealthServer>> start(const std::string& bind, int port);
  ~HealthServer();
  int port() const { return port_; }
  void set_ready(bool r) { ready_ = r; }
  bool ready() const { return ready_; }

 private:
  void loop();
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> ready_{false}, stop_{false};
  std::thread thread_;
};

// The stage worker's metrics.  Labels are bounded: stage, pool, host, outcome, reason.
class WorkerProbe final {
 public:
  WorkerProbe(prometheus::Registry& reg, const std::string& stage, const std::string& pool,
              const std::string& host);
  void task_done(double seconds, double queue_wait_s);
  void task_skipped();          // output already present (idempotent re-delivery)
  void task_retry();
  void task_dead_lettered();
  void reclaimed(const std::string& reason);  // "expired_lease" | "own_pending"
  void lease_lost();
  void set_busy(bool busy);
  void add_bubble(double seconds);            // idle while work waited (pipeline bubble)
  void set_queue_depth(double d);
  void add_bytes(double bytes);
  double count(const std::string& outcome) const;

 private:
  prometheus::Family<prometheus::Counter>& tasks_;
  prometheus::Family<prometheus::Counter>& reclaims_;
  prometheus::Counter &ok_, &skipped_, &retry_, &dead_, &lease_lost_, &bubble_, &bytes_;
  prometheus::Histogram &seconds_, &wait_;
  prometheus::Gauge &busy_, &depth_, &up_;
  std::map<std::string, std::string> labels_;
};

}  // namespace h3pipe::metrics
