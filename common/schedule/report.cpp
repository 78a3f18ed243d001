// `h3pipe report`: the measured run against its plan (receipts.h).
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "common/schedule/gpu_table.h"
#include "common/schedule/job_timing.h"
#include "common/schedule/plan.h"
#include "common/schedule/receipts.h"

namespace h3pipe::schedule {
namespace {

struct PoolMeasure {
  std::string kind, host;
  std::size_t tasks = 0;
  double busy_s = 0;
  std::map<std::string, std::pair<double, std::size_t>> by_class;  // sum, n
};

Status write_svg(const std::string& path, const GanttChart& chart) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << render_svg(chart);
  f.close();
  if (!f) return make_error(errc::report::kSvg, "{}: write failed", path);
  return Status::Ok();
}

// Everything `report` prints, filled step by step by the functions below.
struct Report {
  config::Cluster cluster;
  bool have_config = false;
  std::string config_name;
  std::optional<config::DispatchPolicy> policy;  // --policy, else the config's
  std::vector<std::string> warnings;
  std::vector<MeasuredStage> stages;
  // Measured.
  double t0 = 0, t1 = 0, makespan = 0, thr = 0, rate = 0;
  std::size_t jobs = 0;
  std::map<std::string, std::pair<double, std::string>> first_start;  // job -> (start, class)
  std::map<std::string, PoolMeasure> pools;
  // Where the time went (job_timing.h).
  std::vector<JobTiming> timings;
  std::vector<PoolDuty> duty;
  double steady = 0, planned_steady = -1, rtf_mean = 0, rtf_max = 0;
  // Planned: the same jobs on the config.
  std::optional<SimResult> planned;
  double error = 0, worst_start_s = 0;
  std::string worst_start_at;
  std::size_t unmatched = 0;

  config::DispatchPolicy dispatch() const { return policy ? *policy : cluster.dispatch; }
  double planned_mean(const std::string& pool, const std::string& cls) const {
    const auto* p = cluster.find_pool(pool);
    if (!p) return -1;
    const auto* prof = p->profile_for(cls);
    return prof ? prof->expected() * cluster.time_scale : -1;
  }
};

// The config to plan with: --config FILE, or one the caller loaded.
Status load_config(const ReportArgs& a, Report& r) {
  r.have_config = !a.config.empty() || a.cluster;
  r.config_name = !a.config.empty() ? a.config : a.config_name;
  if (!a.config.empty()) {
    auto c = config::load_file(a.config);
    if (!c.ok()) return c.error();
    r.cluster = std::move(c.value());
  } else if (a.cluster) {
    r.cluster = *a.cluster;
  }
  return Status::Ok();
}

// Makespan, throughput and completion rate; each pool's tasks and busy time per class.
void measure(Report& r) {
  r.t0 = r.stages.front().start_s;
  r.t1 = r.stages.front().end_s;
  std::map<std::string, double> done;  // job -> decode end
  for (const auto& s : r.stages) {
    r.t0 = std::min(r.t0, s.start_s);
    r.t1 = std::max(r.t1, s.end_s);
    if (s.stage == "decode") done[s.job_id] = std::max(done[s.job_id], s.end_s);
    auto it = r.first_start.find(s.job_id);
    if (it == r.first_start.end() || s.start_s < it->second.first)
      r.first_start[s.job_id] = {s.start_s, s.job_class};
    auto& p = r.pools[s.pool];
    p.kind = s.stage;
    p.host = s.host;
    ++p.tasks;
    p.busy_s += s.end_s - s.start_s;
    auto& c = p.by_class[s.job_class];
    c.first += s.end_s - s.start_s;
    ++c.second;
  }
  r.makespan = r.t1 - r.t0;
  r.jobs = done.size();
  std::vector<double> ends;
  for (const auto& [_, e] : done) ends.push_back(e);
  std::sort(ends.begin(), ends.end());
  r.thr = r.makespan > 0 ? static_cast<double>(r.jobs) / r.makespan * 3600 : 0;
  r.rate = ends.size() > 1 && ends.back() > ends.front()
               ? static_cast<double>(ends.size() - 1) / (ends.back() - ends.front()) * 3600
               : 0;
}

// The plan of the same jobs (same classes, in order of first start).
Status plan_same_jobs(Report& r) {
  if (!r.have_config) return Status::Ok();
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [job, fs] : r.first_start) order.push_back(fs);
  std::sort(order.begin(), order.end());
  std::vector<SimJob> sj;
  for (std::size_t i = 0; i < order.size(); ++i)
    sj.push_back({fmt::format("job-{:04d}", i + 1), order[i].second, 0});
  SimOptions o;
  o.record = true;
  o.policy = r.dispatch();
  auto sim = simulate(r.cluster, sj, o);
  if (!sim.ok())
    return Error{sim.error().code, fmt::format("planning the same jobs on {}: {}", r.config_name,
                                               sim.error().message)};
  r.planned = std::move(sim.value());
  return Status::Ok();
}

// Where the time went (job_timing.h): per job, per pool; the steady rate over the middle of the
// run, and the planner's long-queue figure for the run's most frequent class.
void time_jobs(Report& r) {
  const auto table = load_gpu_table();
  // Sample stages whose runtime counts no FLOPs (ComfyUI): the declared FLOPs per step of the
  // model their settings name, at the job's geometry (configs/gpus.json model_flops).
  if (table.ok())
    for (auto& st : r.stages)
      if (st.stage == "sample" && st.gflop <= 0)
        st.gflop = table->declared_gflop(st.settings, st.width, st.height, st.frames, st.steps);
  r.timings = job_timings(r.stages);
  r.duty = pool_duty(r.stages);
  // MFU's denominator: the pool's GPUs' peak from configs/gpus.json (gpu_model x its GPUs),
  // else the runtime's reported one (the builtin model on CPU: its measured sgemm peak).
  if (table.ok())
    for (auto& d : r.duty)
      if (const auto* p = r.cluster.find_pool(d.pool); p && !p->gpu_model.empty())
        if (const double peak = table->peak_gflops(p->gpu_model, p->gpus.size()); peak > 0) {
          d.peak_gflops = peak;
          d.mfu = d.gflop_per_s > 0 ? d.gflop_per_s / d.peak_gflops : -1;
        }
  std::vector<double> completions;
  std::map<std::string, std::size_t> class_count;
  for (const auto& jt : r.timings) completions.push_back(jt.done_s), ++class_count[jt.job_class];
  r.steady = steady_rate_per_hour(completions);
  if (r.planned && !class_count.empty()) {
    auto top = std::max_element(class_count.begin(), class_count.end(),
                                [](const auto& x, const auto& y) { return x.second < y.second; });
    SimOptions o;
    o.policy = r.dispatch();
    if (auto st = steady_throughput_per_hour(r.cluster, top->first, o); st.ok())
      r.planned_steady = *st;
  }
  double rtf_sum = 0;
  for (const auto& jt : r.timings)
    rtf_sum += jt.real_time_factor, r.rtf_max = std::max(r.rtf_max, jt.real_time_factor);
  r.rtf_mean = r.timings.empty() ? 0 : rtf_sum / static_cast<double>(r.timings.size());
}

// Every stage start against the plan's: the worst difference, in seconds and as a share of the
// planned makespan.  Starts are compared pool by pool, in turn (the n-th task a pool started,
// live and planned): which of two latents that arrive together a decoder takes first is a tie
// of the plan, not a difference of schedule.  A pool that ran more tasks than the plan gave it
// counts as assignment differences.
void compare_starts(Report& r) {
  if (!r.planned) return;
  r.error = r.makespan > 0 ? (r.planned->makespan_s - r.makespan) / r.makespan : 0;
  std::map<std::pair<std::string, std::string>, std::vector<double>> plan_starts,
      run_starts;  // (stage, pool)
  for (const auto& pr : r.planned->job_records) {
    if (pr.encode_start_s >= 0)
      plan_starts[{"encode", pr.encode_pool}].push_back(pr.encode_start_s);
    plan_starts[{"sample", pr.sample_pool}].push_back(pr.sample_start_s);
    plan_starts[{"decode", pr.decode_pool}].push_back(pr.decode_start_s);
  }
  for (const auto& st : r.stages)
    if (st.stage != "transfer") run_starts[{st.stage, st.pool}].push_back(st.start_s - r.t0);
  for (auto& [key, run] : run_starts) {
    auto& plan = plan_starts[key];
    std::sort(run.begin(), run.end());
    std::sort(plan.begin(), plan.end());
    for (std::size_t i = 0; i < run.size(); ++i) {
      if (i >= plan.size()) {
        ++r.unmatched;
        continue;
      }
      const double d = std::abs(run[i] - plan[i]);
      if (d > r.worst_start_s)
        r.worst_start_s = d,
        r.worst_start_at = fmt::format("{} on {}, turn {}", key.first, key.second, i + 1);
    }
  }
}

// The two charts: what --svg and --plan-svg write, and report_charts returns.
GanttChart measured_chart(const Report& r) {
  auto chart = gantt_from_receipts(r.stages, fmt::format("measured: {} jobs", r.jobs));
  chart.notes.push_back(
      fmt::format("makespan {:.2f} s, {:.2f} jobs/h end to end", r.makespan, r.thr));
  return chart;
}
GanttChart planned_chart(const Report& r) {
  return gantt_from_sim(*r.planned, fmt::format("plan: {} - {} jobs", r.cluster.name, r.jobs));
}

// --svg and --plan-svg.
Status write_charts(const ReportArgs& a, const Report& r) {
  if (!a.svg.empty()) H3_TRY(write_svg(a.svg, measured_chart(r)));
  if (!a.plan_svg.empty() && r.planned) H3_TRY(write_svg(a.plan_svg, planned_chart(r)));
  return Status::Ok();
}

nlohmann::json report_json(const ReportArgs& a, const Report& r) {
  nlohmann::json j;
  j["jobs"] = r.jobs;
  j["receipts"] = a.receipts.size();
  j["measured"] = {{"makespan_s", r.makespan},
                   {"throughput_per_hour", r.thr},
                   {"completion_rate_per_hour", r.rate},
                   {"steady_rate_per_hour", r.steady},
                   {"real_time_factor_mean", r.rtf_mean},
                   {"real_time_factor_max", r.rtf_max}};
  if (r.planned) {
    j["planned"] = {{"config", r.config_name},
                    {"makespan_s", r.planned->makespan_s},
                    {"throughput_per_hour", r.planned->throughput_per_hour},
                    {"completion_rate_per_hour", r.planned->completion_rate_per_hour()},
                    {"steady_rate_per_hour", r.planned_steady}};
    j["prediction_error"] = r.error;
    j["worst_start_delta_s"] = r.worst_start_s;
    j["worst_start_error"] =
        r.planned->makespan_s > 0 ? r.worst_start_s / r.planned->makespan_s : 0;
    j["worst_start_at"] = r.worst_start_at;
    j["assignment_differences"] = r.unmatched;
  }
  j["pools"] = nlohmann::json::array();
  for (const auto& [name, p] : r.pools) {
    nlohmann::json pj = {
        {"name", name},       {"kind", p.kind},
        {"host", p.host},     {"tasks", p.tasks},
        {"busy_s", p.busy_s}, {"utilization", r.makespan > 0 ? p.busy_s / r.makespan : 0}};
    for (const auto& [cls, c] : p.by_class) {
      pj["classes"][cls] = {{"measured_mean_s", c.first / static_cast<double>(c.second)},
                            {"n", c.second}};
      if (r.planned) pj["classes"][cls]["planned_mean_s"] = r.planned_mean(name, cls);
    }
    j["pools"].push_back(pj);
  }
  auto tj = timing_json(r.timings, r.duty, r.planned ? &*r.planned : nullptr);
  j["job_timing"] = std::move(tj["jobs"]);
  for (auto& pj : j["pools"])
    if (tj["pools"].contains(pj["name"].get<std::string>()))
      for (auto& [k, v] : tj["pools"][pj["name"].get<std::string>()].items())
        if (!pj.contains(k)) pj[k] = v;
  j["warnings"] = r.warnings;
  return j;
}

void print_text(const ReportArgs& a, const Report& r, std::ostream& out) {
  fmt::print(out,
             "measured: {} jobs, makespan {:.2f} s, {:.2f} jobs/h end to end, {:.2f} jobs/h "
             "between completions\n",
             r.jobs, r.makespan, r.thr, r.rate);
  if (r.planned) {
    fmt::print(
        out,
        "planned:  {} jobs, makespan {:.2f} s, {:.2f} jobs/h end to end ({}); error {:+.1f}%\n",
        r.planned->jobs, r.planned->makespan_s, r.planned->throughput_per_hour, r.config_name,
        r.error * 100);
    fmt::print(out,
               "per-job stage starts: worst {:.3f} s off the plan ({:.1f}% of its makespan, {})\n",
               r.worst_start_s,
               r.planned->makespan_s > 0 ? r.worst_start_s / r.planned->makespan_s * 100 : 0,
               r.worst_start_at.empty() ? "-" : r.worst_start_at);
  }
  fmt::print(out, "{:<24} {:<8} {:<10} {:>5} {:>9} {:>6} {:>12} {:>12}\n", "pool", "kind", "class",
             "tasks", "busy_s", "util", "measured_s", "planned_s");
  for (const auto& [name, p] : r.pools)
    for (const auto& [cls, c] : p.by_class) {
      const double pm = r.planned ? r.planned_mean(name, cls) : -1;
      fmt::print(out, "{:<24} {:<8} {:<10} {:>5} {:>9.2f} {:>5.1f}% {:>12.3f} {:>12}\n", name,
                 p.kind, cls, c.second, p.busy_s, r.makespan > 0 ? p.busy_s / r.makespan * 100 : 0,
                 c.first / static_cast<double>(c.second),
                 pm >= 0 ? fmt::format("{:.3f}", pm) : "-");
    }
  fmt::print(out,
             "steady rate (middle of the run): {:.2f} videos/h measured, {} planned (long queue); "
             "real-time factor mean {:.3f}, max {:.3f}\n",
             r.steady,
             r.planned_steady >= 0 ? fmt::format("{:.2f} videos/h", r.planned_steady) : "-",
             r.rtf_mean, r.rtf_max);
  print_timing(out, r.timings, r.duty, r.planned ? &*r.planned : nullptr);
  if (!a.svg.empty()) fmt::print(out, "measured gantt: {}\n", a.svg);
  if (!a.plan_svg.empty() && r.planned) fmt::print(out, "planned gantt: {}\n", a.plan_svg);
  for (const auto& w : r.warnings) fmt::print(out, "warning: {}\n", w);
}

}  // namespace

int run_report(const ReportArgs& a, std::ostream& out, std::ostream& err) {
  Report r;
  if (auto s = load_config(a, r); !s.ok()) {
    fmt::print(err, "report: {}\n", s.error().message);
    return 1;
  }
  if (!a.policy.empty() && !(r.policy = parse_policy(a.policy))) {
    fmt::print(err, "report: --policy \"{}\": expected completion_time or first_free\n", a.policy);
    return 2;
  }
  r.stages = parse_receipts(a.receipts, r.have_config ? &r.cluster : nullptr, r.warnings);
  if (r.stages.empty()) {
    fmt::print(err, "report: no usable stage in {} receipts\n", a.receipts.size());
    return 1;
  }
  measure(r);
  if (auto s = plan_same_jobs(r); !s.ok()) {
    fmt::print(err, "report: {}\n", s.error().message);
    return 1;
  }
  time_jobs(r);
  compare_starts(r);
  if (auto s = write_charts(a, r); !s.ok()) {
    fmt::print(err, "report: {}\n", s.error().message);
    return 1;
  }
  if (a.json)
    out << report_json(a, r).dump() << "\n";
  else
    print_text(a, r, out);
  return 0;
}

Result<ReportCharts> report_charts(const ReportArgs& a) {
  Report r;
  H3_TRY(load_config(a, r));
  r.stages = parse_receipts(a.receipts, r.have_config ? &r.cluster : nullptr, r.warnings);
  if (r.stages.empty())
    return make_error(errc::report::kNone, "no usable stage in {} receipts", a.receipts.size());
  measure(r);
  ReportCharts out;
  // A plan that fails (a class the config lacks) leaves the measured chart alone, with why.
  if (auto s = plan_same_jobs(r); !s.ok()) r.warnings.push_back(s.error().message);
  out.jobs = r.jobs;
  out.measured = measured_chart(r);
  if (r.planned) {
    out.planned = planned_chart(r);
    // plan_same_jobs names the planned jobs job-0001... in the order of their first start:
    // give each bar the run's own job id, and the colour its job has in the measured chart.
    std::vector<std::pair<double, std::string>> order;
    for (const auto& [job, fs] : r.first_start) order.emplace_back(fs.first, job);
    std::sort(order.begin(), order.end());
    std::map<std::string, std::size_t> colour;
    for (const auto& b : out.measured.bars) colour.emplace(b.job, b.job_index);
    for (auto& b : out.planned->bars)
      if (b.job_index < order.size()) {
        b.job = order[b.job_index].second;
        b.job_index = colour[b.job];
      }
  }
  out.warnings = std::move(r.warnings);
  return out;
}

}  // namespace h3pipe::schedule
