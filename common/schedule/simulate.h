#pragma once
// The planner's discrete-event simulation of a cluster (docs/planner.md).
//
// Model, per job: encode -> sample -> transfer -> decode.
//  - encode: on an encode pool; skipped (0 s) when no encode pool can run the job's class.
//  - sample: on a sample pool.  The conditioning is assumed to be reachable from every sampler
//    (it is small; its transfer is not modelled).
//  - transfer: when the sampler's host is not the chosen decode host, over the link between the
//    two hosts (config links, either direction; one transfer at a time per direction, FIFO):
//    latent_bytes*8/(gbps*1e9) + latency_ms/1000.  Same host: 0 s, no transfer.
//  - decode: on a decode pool of the chosen host; the host's decode queue is FIFO by sample
//    completion among latents that have arrived.
//  - Pools joined by shares_gpus_with (transitively) form one GPU group that runs one task at a
//    time (one lease): an encoder on a sampler's GPUs holds them while it encodes, then offloads,
//    and the job it encoded is sampled there next.  When a group frees up it samples such a job
//    first, then looks at its pools' stages downstream first (decode, sample, encode), so work
//    already started is finished before new work is admitted, as a serial workflow does.
//  - Who claims what is decided by the same calls the live workers make (dispatch.h):
//    should_claim for every stage, route_latent (decode_route.h) when a latent is finished.
//    Dispatch uses expected() of each profile; the simulated durations are expected() too, or
//    random draws of kNormal profiles (clamped at 0) with SimOptions::stochastic.  kCycle profiles
//    use their values in turn per pool and class.  Every duration is multiplied by
//    Cluster::time_scale.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/core/result.h"
#include "common/dispatch/board_model.h"
#include "common/dispatch/dispatch.h"

namespace h3pipe::schedule {

// The planner runs the live workers' policy (common/dispatch) on the same input model.
using dispatch::parse_policy;
using dispatch::Policy;
using dispatch::policy_name;

// A decision the simulator made and what it made it from (tests/dispatch feed the same to the
// live pool board and compare).  Claim: the idle pool `pool` (index into Cluster::pools) asked
// whether to take the head task of its stage's queue, of class `job_class`.  Route: the decode
// host chosen for a latent finished on `from_host`.
struct ClaimTrace {
  double t = 0;
  std::size_t pool = 0;
  std::string job_class;
  dispatch::Observation seen;  // seen.decode_load unset: `load` is what it returned
  dispatch::DecodeLoad load;
  bool claimed = false;
};
struct RouteTrace {
  double t = 0;
  std::string from_host, job_class, host;
  std::uint64_t latent_bytes = 0;
  dispatch::DecodeLoad load;
};

struct SimJob {
  std::string id;
  std::string job_class;
  double submit_s = 0;
  // The claim order's inputs (docs/design.md, "The claim order"): every queue is taken in that
  // order (dispatch::pick), as the live claims take a stream.
  long long priority = 0;
  std::string user{};
};

struct SimOptions {
  Policy policy = Policy::kCompletionTime;
  bool stochastic = false;
  std::uint64_t seed = 1;
  bool record = true;  // keep every segment (Gantt) and job record; off for long steady runs
  std::function<void(const ClaimTrace&)> on_claim;  // optional: every claim decision
  std::function<void(const RouteTrace&)> on_route;  // optional: every decode-host choice
};

enum class LaneKind { kEncode, kSample, kTransfer, kDecode };
const char* lane_kind_name(LaneKind k);

// One resource row of the Gantt chart: a pool, or one direction of a link.
struct Lane {
  std::string name;  // pool name, or "from->to" for a link
  LaneKind kind = LaneKind::kSample;
  std::string host;   // the pool's host; the link's source host
  std::string group;  // the GPU group (first pool's name) a pool belongs to; empty for links
};

struct Segment {
  std::size_t lane = 0;
  std::size_t job = 0;  // index into SimResult::jobs / the input jobs
  double start_s = 0, end_s = 0;
};

struct JobRecord {
  std::string id, job_class;
  double submit_s = 0;
  double encode_start_s = -1, encode_end_s = -1;  // -1: no encode stage
  double sample_start_s = 0, sample_end_s = 0;
  double transfer_start_s = -1, transfer_end_s = -1;  // -1: same host
  double decode_start_s = 0, decode_end_s = 0;
  std::string encode_pool, sample_pool, decode_pool, decode_host;
};

struct LaneStats {
  double busy_s = 0;
  double utilization = 0;  // busy_s / makespan
  std::size_t tasks = 0;
  std::size_t bubbles = 0;       // idle gaps between two of the lane's tasks
  double bubble_s = 0;           // their total length
  double lead_idle_s = 0;        // before its first task (from time 0)
  double tail_idle_s = 0;        // after its last task (to the makespan)
  double queue_wait_mean_s = 0;  // from the task being ready for this stage to its start here
  double queue_wait_max_s = 0;
};

struct SimResult {
  std::size_t jobs = 0;
  double makespan_s = 0;           // last decode end (jobs are submitted from time 0)
  double throughput_per_hour = 0;  // end to end: jobs / makespan * 3600
  double first_completion_s = 0, last_completion_s = 0;
  std::vector<Lane> lanes;
  std::vector<LaneStats> stats;        // parallel to lanes
  std::vector<Segment> segments;       // only with SimOptions::record
  std::vector<JobRecord> job_records;  // only with SimOptions::record
  std::vector<std::string> warnings;

  // Completions per hour between the first and the last completion: (jobs-1)/(last-first)*3600.
  // 0 with fewer than two jobs.
  double completion_rate_per_hour() const;
};

// Simulates `jobs` on `cluster`.  Errors (code "plan.*"): a job's class that no sample or no
// decode pool can run, or that encode pools exist for but none can run; an empty job list.
Result<SimResult> simulate(const config::Cluster& cluster, const std::vector<SimJob>& jobs,
                           const SimOptions& options);

// `n` jobs of class `job_class`, ids "job-0001"...
std::vector<SimJob> make_jobs(std::size_t n, const std::string& job_class);

// Steady-state throughput: the completion rate of a long queue, (n-1)/(last-first completion)
// over n = max(jobs, kSteadyJobs) jobs.  The window opens at the first completion, so the fill is
// excluded; pools that finish in bursts bias it by about burst/n (docs/planner.md).
inline constexpr std::size_t kSteadyJobs = 500;
Result<double> steady_throughput_per_hour(const config::Cluster& cluster,
                                          const std::string& job_class, const SimOptions& options,
                                          std::size_t jobs = kSteadyJobs);

}  // namespace h3pipe::schedule
