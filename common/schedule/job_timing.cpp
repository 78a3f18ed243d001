#include "common/schedule/job_timing.h"

#include <algorithm>
#include <cmath>

namespace h3pipe::schedule {
namespace {

int rank(const std::string& k) {
  return k == "encode" ? 0 : k == "sample" ? 1 : k == "transfer" ? 2 : 3;
}

StageSplit split(const MeasuredStage& m) {
  StageSplit s;
  s.stage = m.stage;
  s.pool = m.pool;
  s.host = m.host;
  s.total_s = std::max(0.0, m.end_s - m.start_s);
  if (m.stage == "transfer") {
    s.wire_s = std::min(m.wire_s, s.total_s);
    s.verify_s = std::min(m.verify_s, s.total_s - s.wire_s);
    s.wait_s = s.total_s - s.wire_s - s.verify_s;
    return s;
  }
  s.wait_s = m.queue_wait_s;
  s.mux_s = std::min(m.mux_s, s.total_s);
  // Receipts older than issue #24 have no run_s: all of the stage counts as running.
  s.run_s = m.run_s > 0 ? std::min(m.run_s, s.total_s - s.mux_s) : s.total_s - s.mux_s;
  s.other_s = s.total_s - s.run_s - s.mux_s;
  return s;
}

}  // namespace

std::vector<JobTiming> job_timings(const std::vector<MeasuredStage>& stages) {
  std::map<std::string, std::vector<const MeasuredStage*>> by_job;
  for (const auto& s : stages) by_job[s.job_id].push_back(&s);
  std::vector<JobTiming> out;
  for (auto& [job, v] : by_job) {
    std::stable_sort(v.begin(), v.end(), [](const MeasuredStage* a, const MeasuredStage* b) {
      return rank(a->stage) != rank(b->stage) ? rank(a->stage) < rank(b->stage)
                                              : a->start_s < b->start_s;
    });
    if (v.back()->stage != "decode") continue;
    JobTiming j;
    j.job_id = job;
    j.job_class = v.front()->job_class;
    j.video_s = v.front()->video_s;
    const MeasuredStage& first = *v.front();
    j.submit_s = first.start_s - (first.stage == "transfer" ? 0 : first.queue_wait_s);
    j.done_s = v.back()->end_s;
    for (const auto* m : v) {
      StageSplit s = split(*m);
      j.wait_s += s.stage == "transfer" ? 0 : s.wait_s;
      j.run_s += s.run_s + s.other_s;
      j.transfer_s += s.stage == "transfer" ? s.total_s : 0;
      j.mux_s += s.mux_s;
      j.stages.push_back(std::move(s));
    }
    j.end_to_end_s = std::max(0.0, j.done_s - j.submit_s);
    j.real_time_factor = j.video_s > 0 ? j.end_to_end_s / j.video_s : 0;
    out.push_back(std::move(j));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const JobTiming& a, const JobTiming& b) { return a.submit_s < b.submit_s; });
  return out;
}

std::vector<PoolDuty> pool_duty(const std::vector<MeasuredStage>& stages) {
  std::map<std::string, std::vector<const MeasuredStage*>> by_pool;
  for (const auto& s : stages)
    if (s.stage != "transfer") by_pool[s.pool].push_back(&s);
  std::vector<PoolDuty> out;
  for (auto& [pool, v] : by_pool) {
    std::sort(v.begin(), v.end(), [](const MeasuredStage* a, const MeasuredStage* b) {
      return a->start_s < b->start_s;
    });
    PoolDuty d;
    d.pool = pool;
    d.stage = v.front()->stage;
    d.host = v.front()->host;
    d.device = v.front()->device;
    d.tasks = v.size();
    double end = v.front()->end_s, gflop = 0, run = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const MeasuredStage& m = *v[i];
      d.busy_s += m.end_s - m.start_s;
      d.peak_gflops = std::max(d.peak_gflops, m.peak_gflops);
      if (m.gflop > 0) {
        gflop += m.gflop;
        run += m.run_s > 0 ? m.run_s : m.end_s - m.start_s;
      }
      if (i > 0 && m.start_s > end) {
        const double gap = m.start_s - end;
        const double enqueued = m.start_s - m.queue_wait_s;
        const double no_job = std::clamp(enqueued - end, 0.0, gap);
        const double gpu = std::min(m.gpu_wait_s, gap - no_job);
        d.bubble_s["no_job"] += no_job;
        d.bubble_s["gpu_group"] += gpu;
        d.bubble_s["overhead"] += gap - no_job - gpu;
        ++d.bubbles;
      }
      end = std::max(end, m.end_s);
    }
    for (const char* c : {"no_job", "gpu_group", "overhead"}) d.bubble_s.emplace(c, 0.0);
    d.span_s = end - v.front()->start_s;
    d.duty_cycle = d.span_s > 0 ? std::min(1.0, d.busy_s / d.span_s) : 1.0;
    d.gflop_per_s = run > 0 ? gflop / run : 0;
    if (d.gflop_per_s > 0 && d.peak_gflops > 0) d.mfu = d.gflop_per_s / d.peak_gflops;
    out.push_back(std::move(d));
  }
  return out;
}

double steady_rate_per_hour(std::vector<double> t) {
  if (t.size() < 2) return 0;
  std::sort(t.begin(), t.end());
  std::size_t a = 0, b = t.size() - 1;
  if (t.size() >= 5) {
    a = static_cast<std::size_t>(std::floor(0.2 * static_cast<double>(t.size() - 1)));
    b = static_cast<std::size_t>(std::ceil(0.8 * static_cast<double>(t.size() - 1)));
  }
  return t[b] > t[a] ? static_cast<double>(b - a) / (t[b] - t[a]) * 3600 : 0;
}

}  // namespace h3pipe::schedule
