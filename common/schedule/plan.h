#pragma once
// `h3pipe plan`: simulate a topology, optionally compare candidates (docs/planner.md).
//
// The CLI parses flags into PlanArgs and calls run_plan; everything else lives here so that the
// command is testable without a process.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/core/result.h"
#include "common/schedule/plan_mix.h"
#include "common/schedule/simulate.h"

namespace h3pipe::schedule {

struct PlanArgs {
  std::string config;      // --config FILE (optional when --compare is given)
  std::uint32_t jobs = 6;  // --jobs N
  std::string job_class;   // --class NAME; default: the config's first class
  bool json = false;       // --json: one JSON object on `out`
  std::string svg;         // --svg FILE: Gantt of the plan (of the recommendation with --compare)
  std::vector<std::string> compare;  // --compare A.json,B.json,...
  double threshold = 0.15;  // --threshold: minimum gain to take a candidate with more hardware
  std::string metric = "end_to_end";  // --metric end_to_end|steady: what "gain" compares
  std::string policy;       // --policy completion_time|first_free; default: the config's dispatch
  bool stochastic = false;  // --stochastic: draw normal profiles instead of their means
  std::uint64_t seed = 1;   // --seed
  // --batch FILE[@S] / --mix / --user / --priority: a mix of users and priorities (plan_mix.h)
  // instead of --jobs N; the plan then reports job latency per user and per priority.
  JobSource source;
};

// Exit codes: 0 done; 1 a config or plan error (message on `err`); 2 bad arguments.
int run_plan(const PlanArgs& args, std::ostream& out, std::ostream& err);

// The pieces run_plan is made of, for tests and for `report`.
struct PlanResult {
  std::string config_path;
  std::string name;
  std::string job_class;
  std::string policy;    // completion_time | first_free, as applied
  std::size_t gpus = 0;  // distinct (host, device) pairs over all pools: the hardware count
  SimResult sim;
  double steady_throughput_per_hour = 0;
  std::optional<MixReport> mix;  // with a JobSource: latency per user and per priority
};

Result<PlanResult> plan_cluster(const config::Cluster& cluster, std::string job_class,
                                std::uint32_t jobs, const SimOptions& options);
// These jobs (a mix: submission times, users, priorities) instead of `jobs` of one class.
Result<PlanResult> plan_cluster(const config::Cluster& cluster, const std::vector<SimJob>& jobs,
                                const SimOptions& options);
Result<PlanResult> plan_file(const std::string& path, const std::string& job_class,
                             std::uint32_t jobs, const std::string& policy, bool stochastic,
                             std::uint64_t seed, const JobSource& source = {});

struct Comparison {
  struct Row {
    PlanResult plan;
    double gain_over_first = 0;    // metric / first's metric - 1
    double gain_over_current = 0;  // over the pick when this candidate was considered
    std::string decision;          // baseline | taken | declined
  };
  std::vector<Row> rows;        // in order of hardware added (stable for equal counts)
  std::size_t recommended = 0;  // index into rows
};

// Walks the candidates in order of hardware added and takes one only if it gains >= threshold
// over the current pick (the first is the baseline and the initial pick).
Comparison compare_plans(std::vector<PlanResult> plans, double threshold,
                         const std::string& metric);

std::size_t count_gpus(const config::Cluster& cluster);
nlohmann::json plan_to_json(const PlanResult& p);

}  // namespace h3pipe::schedule
