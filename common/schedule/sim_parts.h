#pragma once
// Small parts of the planner's simulator (internal to common/schedule): a stage's simulated
// duration from its profile, and one lane's statistics accumulated without keeping its segments
// (SimResult's LaneStats, simulate.h).
#include <algorithm>
#include <cstddef>
#include <random>

#include "common/schedule/simulate.h"

namespace h3pipe::schedule {

// A stage's simulated seconds: fixed; normal's mean, or a draw with `stochastic` (clamped at 0);
// cycle's values in turn (`cycle_pos`, per pool and class); times `scale`.
inline double draw_seconds(const config::Profile& pr, bool stochastic, std::mt19937_64& rng,
                           std::size_t& cycle_pos, double scale) {
  double d = 0;
  switch (pr.kind) {
    case config::Profile::Kind::kFixed:
      d = pr.seconds;
      break;
    case config::Profile::Kind::kNormal:
      d = stochastic && pr.sd > 0 ? std::normal_distribution<double>(pr.mean, pr.sd)(rng) : pr.mean;
      break;
    case config::Profile::Kind::kCycle:
      d = pr.cycle.empty() ? 0 : pr.cycle[cycle_pos++ % pr.cycle.size()];
      break;
  }
  return std::max(0.0, d) * scale;
}

struct LaneAcc {
  double busy = 0, first_start = -1, last_end = 0, bubble = 0, wait_sum = 0, wait_max = 0;
  std::size_t tasks = 0, bubbles = 0;

  void add(double start, double end, double ready) {
    if (tasks > 0 && start > last_end + 1e-9) ++bubbles, bubble += start - last_end;
    if (tasks == 0) first_start = start;
    ++tasks;
    busy += end - start;
    last_end = std::max(last_end, end);
    wait_sum += start - ready;
    wait_max = std::max(wait_max, start - ready);
  }

  LaneStats stats(double makespan_s) const {
    LaneStats s;
    s.busy_s = busy;
    s.utilization = makespan_s > 0 ? busy / makespan_s : 0;
    s.tasks = tasks;
    s.bubbles = bubbles;
    s.bubble_s = bubble;
    s.lead_idle_s = tasks ? first_start : makespan_s;
    s.tail_idle_s = tasks ? std::max(0.0, makespan_s - last_end) : 0;
    s.queue_wait_mean_s = tasks ? wait_sum / static_cast<double>(tasks) : 0;
    s.queue_wait_max_s = wait_max;
    return s;
  }
};

}  // namespace h3pipe::schedule
