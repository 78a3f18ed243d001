#pragma once
// Metrics plumbing: the metric and health HTTP servers (http_servers.h) and the probes.  Registries
// are passed in, never global (docs/design.md, convention 8); probes (below and in each component)
// own their metric families.
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
  void task_skipped();  // output already present (idempotent re-delivery)
  void task_retry();
  void task_dead_lettered();
  void task_cancelled();  // the run was cancelled: the job is cancelled
  void task_refused();    // the job state machine refused the task (stale, done, cancelled job)
  void reclaimed(const std::string& reason);  // "expired_lease" | "own_pending"
  void lease_lost();
  void set_busy(bool busy);
  void add_bubble(double seconds);  // idle while work waited (pipeline bubble)
  void set_queue_depth(double d);
  void add_bytes(double bytes);
  double count(const std::string& outcome) const;
  // Duty cycle (issue #24): wall time from the pool's first claim on, split into seconds it ran
  // a task and idle seconds by cause: "no_job" (nothing in its queue), "dispatch" (work there,
  // the policy gave it to another pool), "gpu_group" (its GPU group held by the group's other
  // stage), "transfer_credit" (inside a task, handing the latent to the transfer sender),
  // "overhead" (claim and bookkeeping between tasks).  h3pipe_pool_duty_cycle = ran / wall.
  void task_ran(double seconds);
  void idle(double seconds, const std::string& cause);
  double duty_cycle() const;
  // Model FLOP utilisation of the last sample task: achieved FLOP/s / the device's peak.
  void set_mfu(double mfu);
  // A job finished (the decoder, as it writes the receipt): its end-to-end seconds and its
  // real-time factor (end to end / video length).
  void job_done(double end_to_end_s, double real_time_factor);
  static constexpr const char* kIdleCauses[] = {"no_job", "dispatch", "gpu_group",
                                                "transfer_credit", "overhead"};

 private:
  prometheus::Family<prometheus::Counter>& tasks_;
  prometheus::Family<prometheus::Counter>& reclaims_;
  prometheus::Counter &ok_, &skipped_, &retry_, &dead_, &cancelled_, &refused_, &lease_lost_,
      &bubble_, &bytes_;
  prometheus::Histogram &seconds_, &wait_;
  prometheus::Gauge &busy_, &depth_, &up_;
  prometheus::Counter& ran_;
  prometheus::Family<prometheus::Counter>& idle_;
  prometheus::Gauge &duty_, &mfu_;
  prometheus::Histogram &e2e_, &rtf_;
  std::map<std::string, std::string> labels_;
  std::atomic<double> ran_s_{0}, wall_s_{0};
};

}  // namespace h3pipe::metrics
