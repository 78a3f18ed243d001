#include "common/metrics/metrics.h"

namespace h3pipe::metrics {

namespace {
prometheus::Histogram::BucketBoundaries seconds_buckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640};
}
}  // namespace

WorkerProbe::WorkerProbe(prometheus::Registry& reg, const std::string& stage,
                         const std::string& pool, const std::string& host)
    : tasks_(
          prometheus::BuildCounter()
              .Name("h3pipe_stage_tasks_total")
              .Help("Stage tasks finished, by outcome (ok, skipped, retry, dead_letter, cancelled, "
                    "refused: the job state machine dropped a stale or cancelled job's task)")
              .Register(reg)),
      reclaims_(prometheus::BuildCounter()
                    .Name("h3pipe_stage_reclaims_total")
                    .Help("Tasks this worker took over, by reason (expired_lease, own_pending)")
                    .Register(reg)),
      ok_(tasks_.Add({{"stage", stage}, {"pool", pool}, {"host", host}, {"outcome", "ok"}})),
      skipped_(
          tasks_.Add({{"stage", stage}, {"pool", pool}, {"host", host}, {"outcome", "skipped"}})),
      retry_(tasks_.Add({{"stage", stage}, {"pool", pool}, {"host", host}, {"outcome", "retry"}})),
      dead_(tasks_.Add(
          {{"stage", stage}, {"pool", pool}, {"host", host}, {"outcome", "dead_letter"}})),
      cancelled_(
          tasks_.Add({{"stage", stage}, {"pool", pool}, {"host", host}, {"outcome", "cancelled"}})),
      refused_(
          tasks_.Add({{"stage", stage}, {"pool", pool}, {"host", host}, {"outcome", "refused"}})),
      lease_lost_(prometheus::BuildCounter()
                      .Name("h3pipe_stage_leases_lost_total")
                      .Help("Lease renewals refused because another worker owned the task")
                      .Register(reg)
                      .Add({{"stage", stage}, {"pool", pool}, {"host", host}})),
      bubble_(prometheus::BuildCounter()
                  .Name("h3pipe_pool_bubble_seconds_total")
                  .Help("Seconds this pool sat idle while work waited in its stage queue")
                  .Register(reg)
                  .Add({{"stage", stage}, {"pool", pool}, {"host", host}})),
      bytes_(prometheus::BuildCounter()
                 .Name("h3pipe_stage_output_bytes_total")
                 .Help("Bytes of stage outputs written")
                 .Register(reg)
                 .Add({{"stage", stage}, {"pool", pool}, {"host", host}})),
      seconds_(prometheus::BuildHistogram()
                   .Name("h3pipe_stage_seconds")
                   .Help("Wall seconds of one stage execution (runtime + artifact write)")
                   .Register(reg)
                   .Add({{"stage", stage}, {"pool", pool}, {"host", host}}, seconds_buckets())),
      wait_(prometheus::BuildHistogram()
                .Name("h3pipe_stage_queue_wait_seconds")
                .Help("Seconds a task waited in its stage queue before it was claimed")
                .Register(reg)
                .Add({{"stage", stage}, {"pool", pool}, {"host", host}}, seconds_buckets())),
      busy_(prometheus::BuildGauge()
                .Name("h3pipe_pool_busy")
                .Help("1 while the pool is executing a task")
                .Register(reg)
                .Add({{"stage", stage}, {"pool", pool}, {"host", host}})),
      depth_(prometheus::BuildGauge()
                 .Name("h3pipe_stage_queue_depth")
                 .Help("Tasks in the stage stream (pending + undelivered) seen by this pool")
                 .Register(reg)
                 .Add({{"stage", stage}, {"pool", pool}, {"host", host}})),
      up_(prometheus::BuildGauge()
              .Name("h3pipe_service_up")
              .Help("1 while the service runs")
              .Register(reg)
              .Add({{"stage", stage}, {"pool", pool}, {"host", host}})),
      ran_(prometheus::BuildCounter()
               .Name("h3pipe_pool_task_seconds_total")
               .Help("Wall seconds this pool ran a task (the numerator of h3pipe_pool_duty_cycle)")
               .Register(reg)
               .Add({{"stage", stage}, {"pool", pool}, {"host", host}})),
      idle_(prometheus::BuildCounter()
                .Name("h3pipe_pool_idle_seconds_total")
                .Help("Wall seconds this pool did not run a task since its first claim, by cause "
                      "(no_job, dispatch, gpu_group, transfer_credit, overhead)")
                .Register(reg)),
      duty_(prometheus::BuildGauge()
                .Name("h3pipe_pool_duty_cycle")
                .Help("Share of wall time since the pool's first claim that it ran a task")
                .Register(reg)
                .Add({{"stage", stage}, {"pool", pool}, {"host", host}})),
      mfu_(prometheus::BuildGauge()
               .Name("h3pipe_pool_mfu")
               .Help("Model FLOP utilisation of the pool's last sample task: model FLOP/s (the "
                     "runtime's count; ComfyUI: configs/gpus.json model_flops) over the pool's "
                     "GPUs' peak (configs/gpus.json by NVML name or gpu_model; CPU: measured sgemm "
                     "peak)")
               .Register(reg)
               .Add({{"stage", stage}, {"pool", pool}, {"host", host}})),
      e2e_(prometheus::BuildHistogram()
               .Name("h3pipe_job_end_to_end_seconds")
               .Help("Seconds from a job's submission to its video (by the decode pool that "
                     "finished it)")
               .Register(reg)
               .Add({{"stage", stage}, {"pool", pool}, {"host", host}}, seconds_buckets())),
      rtf_(prometheus::BuildHistogram()
               .Name("h3pipe_job_real_time_factor")
               .Help("A finished job's end-to-end seconds per second of its video")
               .Register(reg)
               .Add({{"stage", stage}, {"pool", pool}, {"host", host}},
                    prometheus::Histogram::BucketBoundaries{0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 50,
                                                            100, 200, 500})),
      labels_{{"stage", stage}, {"pool", pool}, {"host", host}} {
  up_.Set(1);
  for (const char* cause : kIdleCauses) {
    auto l = labels_;
    l["cause"] = cause;
    idle_.Add(l);
  }
  reclaims_.Add({{"stage", stage}, {"pool", pool}, {"host", host}, {"reason", "expired_lease"}});
  reclaims_.Add({{"stage", stage}, {"pool", pool}, {"host", host}, {"reason", "own_pending"}});
}

void WorkerProbe::task_done(double s, double w) {
  ok_.Increment();
  seconds_.Observe(s);
  wait_.Observe(w);
}
void WorkerProbe::task_skipped() {
  skipped_.Increment();
}
void WorkerProbe::task_retry() {
  retry_.Increment();
}
void WorkerProbe::task_dead_lettered() {
  dead_.Increment();
}
void WorkerProbe::task_cancelled() {
  cancelled_.Increment();
}
void WorkerProbe::task_refused() {
  refused_.Increment();
}
void WorkerProbe::reclaimed(const std::string& reason) {
  auto l = labels_;
  l["reason"] = reason;
  reclaims_.Add(l).Increment();
}
void WorkerProbe::lease_lost() {
  lease_lost_.Increment();
}
void WorkerProbe::set_busy(bool b) {
  busy_.Set(b ? 1 : 0);
}
void WorkerProbe::add_bubble(double s) {
  bubble_.Increment(s);
}
void WorkerProbe::set_queue_depth(double d) {
  depth_.Set(d);
}
void WorkerProbe::add_bytes(double b) {
  bytes_.Increment(b);
}
void WorkerProbe::task_ran(double s) {
  if (s <= 0) return;
  ran_.Increment(s);
  ran_s_.store(ran_s_.load() + s);
  wall_s_.store(wall_s_.load() + s);
  duty_.Set(duty_cycle());
}
void WorkerProbe::idle(double s, const std::string& cause) {
  if (s <= 0) return;
  auto l = labels_;
  l["cause"] = cause;
  idle_.Add(l).Increment(s);
  wall_s_.store(wall_s_.load() + s);
  duty_.Set(duty_cycle());
}
double WorkerProbe::duty_cycle() const {
  const double w = wall_s_.load();
  return w > 0 ? ran_s_.load() / w : 0;
}
void WorkerProbe::set_mfu(double m) {
  mfu_.Set(m);
}
void WorkerProbe::job_done(double e2e, double rtf) {
  e2e_.Observe(e2e);
  if (rtf > 0) rtf_.Observe(rtf);
}
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
