#pragma once
// `h3pipe plan` with a mix of users and priorities (issue #39 item 5; docs/planner.md, "A mix of
// users and priorities"): the jobs come from batches (the JSON lines `h3pipe run` takes, with
// `user` and `priority` per line) or from a generated mix, each part submitted at its own time;
// the simulator takes every queue in the claim order the live claims use (dispatch::pick), and
// the plan reports the p50 and p95 job latency (decode end - submission) per user and per
// priority beside the makespan.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/core/result.h"
#include "common/schedule/simulate.h"

namespace h3pipe::schedule {

// Where a plan's jobs come from when they are not `--jobs N` of one class and one user.
struct JobSource {
  // --batch FILE[@SECONDS] (repeatable): a batch as `h3pipe run` reads it, submitted SECONDS
  // (default 0) after the first submission.
  std::vector<std::string> batches;
  // --mix USER:N[:PRIORITY][@SECONDS],... : N jobs of the plan's class for USER, priority
  // PRIORITY (default 0), submitted at SECONDS (default 0).
  std::string mix;
  std::string user;        // --user: the user of batch lines without one (as `h3pipe run --user`)
  long long priority = 0;  // --priority: of batch lines without one (as `h3pipe run --priority`)
  bool empty() const { return batches.empty() && mix.empty(); }
};

struct MixPart {
  std::string user;
  std::uint32_t jobs = 0;
  long long priority = 0;
  double at_s = 0;
};
// "alice:30,bob:4@1,boss:2:10@0.5"; an error names the entry and what was expected.
Result<std::vector<MixPart>> parse_mix(const std::string& text);

// The jobs of `src` on `cluster`, in submission order (stable: batch order, then line order);
// ids are "USER-0001"... for a mix, the batch's job ids for a batch.  `job_class`: the mix's
// class (empty: the config's first).
Result<std::vector<SimJob>> jobs_from(const JobSource& src, const config::Cluster& cluster,
                                      const std::string& job_class);

// Job latency figures: p50 and p95 by nearest rank (the ceil(p x n)-th smallest), so each is one
// of the measured latencies.
struct LatencyStats {
  std::size_t jobs = 0;
  double p50_s = 0, p95_s = 0, mean_s = 0, max_s = 0;
};
LatencyStats latency_stats(std::vector<double> latencies_s);
double nearest_rank(const std::vector<double>& sorted, double p);

struct MixReport {
  LatencyStats all;
  std::map<std::string, LatencyStats> by_user;
  std::map<long long, LatencyStats> by_priority;
};
// From a simulation with SimOptions::record (job_records) of `jobs`.
MixReport mix_report(const SimResult& sim, const std::vector<SimJob>& jobs);
nlohmann::json mix_to_json(const MixReport& m);
void print_mix_text(const MixReport& m, std::ostream& out);

}  // namespace h3pipe::schedule
