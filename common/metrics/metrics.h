#pragma once
// Metrics plumbing: the metric and health HTTP servers (http_servers.h) and the probes.  Registries are passed in, never global
// (CONVENTIONS.md rule 8); probes (below and in each component) own their metric families.
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "common/core/result.h"
#include "common/metrics/http_servers.h"

namespace h3pipe::metrics {

// The stage worker's metrics.  Labels are bounded: stage, pool, host, outcome, reason.
class WorkerProbe final {
 public:
  WorkerProbe(prometheus::Registry& reg, const std::string& stage, const std::string& pool,
              const std::string& host);
  void task_done(double seconds, double queue_wait_s);
  void task_skipped();          // output already present (idempotent re-delivery)
  void task_retry();
  void task_dead_lettered();
  void task_cancelled();        // the run was cancelled: the job is cancelled
  void task_refused();          // the job state machine refused the task (stale, done, cancelled job)
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
  prometheus::Counter &ok_, &skipped_, &retry_, &dead_, &cancelled_, &refused_, &lease_lost_, &bubble_, &bytes_;
  prometheus::Histogram &seconds_, &wait_;
  prometheus::Gauge &busy_, &depth_, &up_;
  std::map<std::string, std::string> labels_;
};

}  // namespace h3pipe::metrics
