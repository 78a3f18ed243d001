#include "common/metrics/metrics.h"

namespace h3pipe::metrics {

namespace {
prometheus::Histogram::BucketBoundaries seconds_buckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640};
}
}  // namespace

WorkerProbe::WorkerProbe(prometheus::Registry& reg, const std::string& stage, const std::string& pool,
                         const std::string& host)
    : tasks_(prometheus::BuildCounter().Name("h3pipe_stage_tasks_total")
                 .Help("Stage tasks finished, by outcome (ok, skipped, retry, dead_letter, cancelled, refused: the job state machine dropped a stale or cancelled job's task)").Register(reg)),
      reclaims_(prometheus::BuildCounter().Name("h3pipe_stage_reclaims_total")
                    .Help("Tasks this worker took over, by reason (expired_lease, own_pending)").Register(reg)),
      ok_(tasks_.Add({{"stage", stage}, {"pool", pool}, {"host", host}, {"outcome", "ok"}})),
      skipped_(tasks_.Add({{"stage", stage}, {"pool", pool}, {"host", host}, {"outcome", "skipped"}})),
      retry_(tasks_.Add({{"stage", stage}, {"pool", pool}, {"host", host}, {"outcome", "retry"}})),
      dead_(tasks_.Add({{"stage", stage}, {"pool", pool}, {"host", host}, {"outcome", "dead_letter"}})),
      cancelled_(tasks_.Add({{"stage", stage}, {"pool", pool}, {"host", host}, {"outcome", "cancelled"}})),
      refused_(tasks_.Add({{"stage", stage}, {"pool", pool}, {"host", host}, {"outcome", "refused"}})),
      lease_lost_(prometheus::BuildCounter().Name("h3pipe_stage_leases_lost_total")
                      .Help("Lease renewals refused because another worker owned the task").Register(reg)
                      .Add({{"stage", stage}, {"pool", pool}, {"host", host}})),
      bubble_(prometheus::BuildCounter().Name("h3pipe_pool_bubble_seconds_total")
                  .Help("Seconds this pool sat idle while work waited in its stage queue").Register(reg)
                  .Add({{"stage", stage}, {"pool", pool}, {"host", host}})),
      bytes_(prometheus::BuildCounter().Name("h3pipe_stage_output_bytes_total")
                 .Help("Bytes of stage outputs written").Register(reg)
                 .Add({{"stage", stage}, {"pool", pool}, {"host", host}})),
      seconds_(prometheus::BuildHistogram().Name("h3pipe_stage_seconds")
                   .Help("Wall seconds of one stage execution (runtime + artifact write)").Register(reg)
                   .Add({{"stage", stage}, {"pool", pool}, {"host", host}}, seconds_buckets())),
      wait_(prometheus::BuildHistogram().Name("h3pipe_stage_queue_wait_seconds")
                .Help("Seconds a task waited in its stage queue before it was claimed").Register(reg)
                .Add({{"stage", stage}, {"pool", pool}, {"host", host}}, seconds_buckets())),
      busy_(prometheus::BuildGauge().Name("h3pipe_pool_busy")
                .Help("1 while the pool is executing a task").Register(reg)
                .Add({{"stage", stage}, {"pool", pool}, {"host", host}})),
      depth_(prometheus::BuildGauge().Name("h3pipe_stage_queue_depth")
                 .Help("Tasks in the stage stream (pending + undelivered) seen by this pool").Register(reg)
                 .Add({{"stage", stage}, {"pool", pool}, {"host", host}})),
      up_(prometheus::BuildGauge().Name("h3pipe_service_up")
              .Help("1 while the service runs").Register(reg)
              .Add({{"stage", stage}, {"pool", pool}, {"host", host}})),
      labels_{{"stage", stage}, {"pool", pool}, {"host", host}} {
  up_.Set(1);
  reclaims_.Add({{"stage", stage}, {"pool", pool}, {"host", host}, {"reason", "expired_lease"}});
  reclaims_.Add({{"stage", stage}, {"pool", pool}, {"host", host}, {"reason", "own_pending"}});
}

void WorkerProbe::task_done(double s, double w) { ok_.Increment(); seconds_.Observe(s); wait_.Observe(w); }
void WorkerProbe::task_skipped() { skipped_.Increment(); }
void WorkerProbe::task_retry() { retry_.Increment(); }
void WorkerProbe::task_dead_lettered() { dead_.Increment(); }
void WorkerProbe::task_cancelled() { cancelled_.Increment(); }
void WorkerProbe::task_refused() { refused_.Increment(); }
void WorkerProbe::reclaimed(const std::string& reason) {
  auto l = labels_;
  l["reason"] = reason;
  reclaims_.Add(l).Increment();
}
void WorkerProbe::lease_lost() { lease_lost_.Increment(); }
void WorkerProbe::set_busy(bool b) { busy_.Set(b ? 1 : 0); }
void WorkerProbe::add_bubble(double s) { bubble_.Increment(s); }
void WorkerProbe::set_queue_depth(double d) { depth_.Set(d); }
void WorkerProbe::add_bytes(double b) { bytes_.Increment(b); }
double WorkerProbe::count(const std::string& outcome) const {
  if (outcome == "ok") return ok_.Value();
  if (outcome == "skipped") return skipped_.Value();
  if (outcome == "retry") return retry_.Value();
  if (outcome == "dead_letter") return dead_.Value();
  if (outcome == "cancelled") return cancelled_.Value();
  if (outcome == "refused") return refused_.Value();
  return 0;
}

}  // namespace h3pipe::metrics
