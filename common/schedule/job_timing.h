#pragma once
// Where every second of a run went (issue #24; docs/report.md): per job, the time in each stage
// split into waiting (queue), running, transfer (wire, verify) and mux, its end-to-end time and
// real-time factor; per pool, the duty cycle (the share of its wall time it ran a task) and the
// bubbles between its tasks by cause; per run, the makespan and the steady rate.  Pure functions
// of the measured stages (receipts.h), so a test can check them against known stage times.
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "common/schedule/receipts.h"

namespace h3pipe::schedule {

struct StageSplit {
  std::string stage, pool, host;
  double wait_s = 0;  // in its queue (transfer: at the sender, before the offer, and the hand-off)
  double run_s = 0;   // the runtime's compute (transfer: 0)
  double mux_s = 0;   // decode: writing the MP4
  double wire_s = 0;  // transfer: offer -> last byte
  double verify_s = 0;  // transfer: hash, file check, fsync, rename
  double other_s = 0;   // the stage's own bookkeeping (input verify, commit, state move)
  double total_s = 0;   // end - start (transfer: enqueue -> decode enqueued)
};

struct JobTiming {
  std::string job_id, job_class;
  double submit_s = 0, done_s = 0;  // unix seconds: the first stage's enqueue, the decode's end
  std::vector<StageSplit> stages;   // pipeline order
  double wait_s = 0, run_s = 0, transfer_s = 0, mux_s = 0;  // sums over the stages
  double end_to_end_s = 0;                                  // done_s - submit_s
  double video_s = 0;                                       // frames / fps
  double real_time_factor = 0;  // end_to_end_s / video_s (0 when video_s is unknown)
};

// Jobs in order of submission; a job without a decode stage is left out (not done).
std::vector<JobTiming> job_timings(const std::vector<MeasuredStage>& stages);

struct PoolDuty {
  std::string pool, stage, host;
  std::size_t tasks = 0;
  double span_s = 0;      // its first task's start -> its last task's end
  double busy_s = 0;      // sum of its tasks' end - start
  double duty_cycle = 0;  // busy_s / span_s (1 for a single task)
  // Gaps between consecutive tasks, by cause: "no_job" (the next task was not enqueued yet),
  // "gpu_group" (the pool waited for its GPU group's lease), "overhead" (claim and hand-over).
  std::map<std::string, double> bubble_s;
  std::size_t bubbles = 0;
  double gflop_per_s = 0;  // sample pools of a runtime that reports GFLOP: model GFLOP / run_s
  // The device's peak GFLOP/s: configs/gpus.json's for the pool's gpu_model (the report sets
  // it), else what the runtime reported (builtin on CPU: its measured sgemm peak); 0 unknown.
  double peak_gflops = 0;
  double mfu = -1;  // gflop_per_s / peak_gflops; -1 unknown
  std::string device;
};
std::vector<PoolDuty> pool_duty(const std::vector<MeasuredStage>& stages);

// Completions per hour over the middle of the run: between the completions at 20 % and 80 %
// of the run's jobs (the fill and the drain left out); with fewer than 5 jobs, between the
// first and the last completion; 0 with fewer than two.
double steady_rate_per_hour(std::vector<double> completion_s);

struct SimResult;
// The per-job and per-pool sections of `h3pipe report` (JSON and text), with the planner's
// figure beside each where a plan of the same jobs is given (planned jobs in submission order).
nlohmann::json timing_json(const std::vector<JobTiming>& jobs, const std::vector<PoolDuty>& pools,
                           const SimResult* planned);
void print_timing(std::ostream& out, const std::vector<JobTiming>& jobs,
                  const std::vector<PoolDuty>& pools, const SimResult* planned);

}  // namespace h3pipe::schedule
