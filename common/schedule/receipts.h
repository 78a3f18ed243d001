#pragma once
// Closing the loop between plan and run: `h3pipe profile learn` fits per pool + class profiles
// from measured receipts, `h3pipe report` draws the measured Gantt and compares it with the plan.
//
// Receipts are JSON objects in the proto3 JSON form of h3pipe.pb.Receipt (common/proto): both
// the lowerCamelCase names the mapping prints by default and the original snake_case names are
// accepted; int64 fields may be JSON strings (the mapping's form) or numbers; a stage is
// "STAGE_SAMPLE" or its number.  The caller (the CLI) reads them from the output folder.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/core/result.h"
#include "common/schedule/gantt_svg.h"

namespace h3pipe::schedule {

// One stage of one job, as measured.
struct MeasuredStage {
  std::string job_id, job_class;
  std::string stage;  // encode | sample | transfer | decode
  std::string pool;   // pool name; for transfers "from->to" when the pool field is empty
  std::string host;
  double start_s = 0, end_s = 0;  // unix seconds
  // Where the time went (StageRecord's fields; 0 in receipts older than issue #24).
  double queue_wait_s = 0, run_s = 0, mux_s = 0, wire_s = 0, verify_s = 0, gpu_wait_s = 0;
  // The job's: the video's length (frames / fps of its spec) and its receipt's end to end.
  double video_s = 0, end_to_end_s = 0;
  double gflop = 0;        // the runtime's reported model GFLOP for the stage (builtin), 0 if none
  double peak_gflops = 0;  // the runtime's reported device peak (builtin on CPU: sgemm), 0 if none
  std::uint32_t width = 0, height = 0, frames = 0, steps = 0;  // the job's spec
  std::string settings;  // the stage's settings_json (runtime settings as the receipt has them)
  std::string device;
};

// Parses receipts; `cluster` (optional) resolves job classes from sizes.  Receipts that cannot be
// read are skipped with a warning naming their index and field.
std::vector<MeasuredStage> parse_receipts(const std::vector<nlohmann::json>& receipts,
                                          const config::Cluster* cluster,
                                          std::vector<std::string>& warnings);

struct LearnedProfile {
  std::size_t n = 0;
  double mean = 0, sd = 0;  // sample standard deviation (n-1); 0 for n = 1
  double min = 0, max = 0;
  double p50 = 0, p95 = 0;  // by nearest rank (plan_mix.h), as the planner reports latencies
};
// pool -> class -> profile, for encode/sample/decode stages (transfers are reported apart).
using LearnedProfiles = std::map<std::string, std::map<std::string, LearnedProfile>>;
LearnedProfiles learn_profiles(const std::vector<MeasuredStage>& stages,
                               std::size_t min_samples = 1);

struct ProfileLearnArgs {
  std::vector<nlohmann::json> receipts;
  std::string config;  // --config FILE: classes from sizes; with -o, the file to update
  std::string output;  // -o FILE: write the config with the learned profiles (kind normal)
  // With -o and no config: the text to update instead (the CLI gives the embedded default's when
  // no stack runs another config), named in messages by config_name.
  std::string config_text, config_name = "the embedded default config";
  std::size_t min_samples = 3;  // --min-samples: fewer measurements leave a profile as it was
  bool json = false;
};
// Prints the learned profiles (table or JSON).  Exit codes: 0 done; 1 bad config or no usable
// receipt; 2 bad arguments.
int run_profile_learn(const ProfileLearnArgs& args, std::ostream& out, std::ostream& err);

// The measured run as a Gantt chart (rows: pools and transfer links seen in the receipts).
GanttChart gantt_from_receipts(const std::vector<MeasuredStage>& stages, std::string title);

struct ReportArgs {
  std::vector<nlohmann::json> receipts;
  std::string config;  // --config FILE: plan the same jobs and compare (optional)
  // Without `config`: a config already loaded to plan with (the CLI gives the embedded default's
  // when the stack running here was started with it), named in the output by config_name.
  const config::Cluster* cluster = nullptr;
  std::string config_name = "the embedded default config";
  std::string svg;       // --svg FILE: the measured Gantt
  std::string plan_svg;  // --plan-svg FILE: the planned Gantt
  std::string policy;    // as plan --policy
  bool json = false;
};
// The charts `report --svg` and `--plan-svg` draw, for GET /v1/runs/{id}/gantt (docs/api.md):
// the measured one from the receipts, and, with a config (args.config or args.cluster), the plan
// of the same jobs, its bars named by the run's job ids (job-0001 is the job that started first).
// Reads args.receipts, config, cluster, config_name; writes nothing.  Errors: report.none when no
// receipt has a usable stage; a config file that cannot be loaded.  A plan that fails leaves
// `planned` empty, with why in `warnings`.
struct ReportCharts {
  std::size_t jobs = 0;  // jobs whose decode is in the receipts
  GanttChart measured;
  std::optional<GanttChart> planned;
  std::vector<std::string> warnings;  // receipts left out, a plan that failed
};
Result<ReportCharts> report_charts(const ReportArgs& args);

// Measured makespan, throughput, per-pool busy time and stage means; with --config also the
// plan for the same jobs and the prediction error (plan - actual) / actual.  Exit codes as above.
int run_report(const ReportArgs& args, std::ostream& out, std::ostream& err);

}  // namespace h3pipe::schedule
