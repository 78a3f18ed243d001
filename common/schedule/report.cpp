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

}  // namespace

int run_report(const ReportArgs& a, std::ostream& out, std::ostream& err) {
  config::Cluster cluster;
  const bool have_config = !a.config.empty() || a.cluster;
  const std::string config_name = !a.config.empty() ? a.config : a.config_name;
  if (!a.config.empty()) {
    auto c = config::load_file(a.config);
    if (!c.ok()) {
      fmt::print(err, "report: {}\n", c.error().message);
      return 1;
    }
    cluster = std::move(c.value());
  } else if (a.cluster) {
    cluster = *a.cluster;
  }
  if (!a.policy.empty() && !parse_policy(a.policy)) {
    fmt::print(err, "report: --policy \"{}\": expected completion_time or first_free\n", a.policy);
    return 2;
  }
  std::vector<std::string> warnings;
  auto stages = parse_receipts(a.receipts, have_config ? &cluster : nullptr, warnings);
  if (stages.empty()) {
    fmt::print(err, "report: no usable stage in {} receipts\n", a.receipts.size());
    return 1;
  }

  // Measured figures.
  double t0 = stages.front().start_s, t1 = stages.front().end_s;
  std::map<std::string, double> done;                                 // job -> decode end
  std::map<std::string, std::pair<double, std::string>> first_start;  // job -> (start, class)
  std::map<std::string, PoolMeasure> pools;
  for (const auto& s : stages) {
    t0 = std::min(t0, s.start_s);
    t1 = std::max(t1, s.end_s);
    if (s.stage == "decode") done[s.job_id] = std::max(done[s.job_id], s.end_s);
    auto it = first_start.find(s.job_id);
    if (it == first_start.end() || s.start_s < it->second.first)
      first_start[s.job_id] = {s.start_s, s.job_class};
    auto& p = pools[s.pool];
    p.kind = s.stage;
    p.host = s.host;
    ++p.tasks;
    p.busy_s += s.end_s - s.start_s;
    auto& c = p.by_class[s.job_class];
    c.first += s.end_s - s.start_s;
    ++c.second;
  }
  const double makespan = t1 - t0;
  const std::size_t jobs = done.size();
  std::vector<double> ends;
  for (const auto& [_, e] : done) ends.push_back(e);
  std::sort(ends.begin(), ends.end());
  const double thr = makespan > 0 ? static_cast<double>(jobs) / makespan * 3600 : 0;
  const double rate =
      ends.size() > 1 && ends.back() > ends.front()
          ? static_cast<double>(ends.size() - 1) / (ends.back() - ends.front()) * 3600
          : 0;

  // The plan of the same jobs (same classes, in order of first start).
  std::optional<SimResult> planned;
  if (have_config) {
    std::vector<std::pair<double, std::string>> order;
    for (const auto& [job, fs] : first_start) order.push_back(fs);
    std::sort(order.begin(), order.end());
    std::vector<SimJob> sj;
    for (std::size_t i = 0; i < order.size(); ++i)
      sj.push_back({fmt::format("job-{:04d}", i + 1), order[i].second, 0});
    SimOptions o;
    o.record = true;
    o.policy = a.policy.empty() ? cluster.dispatch : *parse_policy(a.policy);
    auto r = simulate(cluster, sj, o);
    if (!r.ok()) {
      fmt::print(err, "report: planning the same jobs on {}: {}\n", config_name, r.error().message);
      return 1;
    }
    planned = std::move(r.value());
  }
  // Where the time went (job_timing.h): per job, per pool; the steady rate over the middle of
  // the run, and the planner's long-queue figure for the run's most frequent class.
  const auto table = load_gpu_table();
  // Sample stages whose runtime counts no FLOPs (ComfyUI): the declared FLOPs per step of the
  // model their settings name, at the job's geometry (configs/gpus.json model_flops).
  if (table.ok())
    for (auto& st : stages)
      if (st.stage == "sample" && st.gflop <= 0)
        st.gflop = table->declared_gflop(st.settings, st.width, st.height, st.frames, st.steps);
  const auto timings = job_timings(stages);
  auto duty = pool_duty(stages);
  // MFU's denominator: the pool's GPUs' peak from configs/gpus.json (gpu_model x its GPUs),
  // else the runtime's reported one (the builtin model on CPU: its measured sgemm peak).
  if (table.ok())
    for (auto& d : duty)
      if (const auto* p = cluster.find_pool(d.pool); p && !p->gpu_model.empty())
        if (const double peak = table->peak_gflops(p->gpu_model, p->gpus.size()); peak > 0) {
          d.peak_gflops = peak;
          d.mfu = d.gflop_per_s > 0 ? d.gflop_per_s / d.peak_gflops : -1;
        }
  std::vector<double> completions;
  std::map<std::string, std::size_t> class_count;
  for (const auto& jt : timings) completions.push_back(jt.done_s), ++class_count[jt.job_class];
  const double steady = steady_rate_per_hour(completions);
  double planned_steady = -1;
  if (planned && !class_count.empty()) {
    auto top = std::max_element(class_count.begin(), class_count.end(),
                                [](const auto& x, const auto& y) { return x.second < y.second; });
    SimOptions o;
    o.policy = a.policy.empty() ? cluster.dispatch : *parse_policy(a.policy);
    if (auto st = steady_throughput_per_hour(cluster, top->first, o); st.ok()) planned_steady = *st;
  }
  double rtf_sum = 0, rtf_max = 0;
  for (const auto& jt : timings)
    rtf_sum += jt.real_time_factor, rtf_max = std::max(rtf_max, jt.real_time_factor);
  const double rtf_mean = timings.empty() ? 0 : rtf_sum / static_cast<double>(timings.size());

  auto planned_mean = [&](const std::string& pool, const std::string& cls) -> double {
    const auto* p = cluster.find_pool(pool);
    if (!p) return -1;
    const auto* prof = p->profile_for(cls);
    return prof ? prof->expected() * cluster.time_scale : -1;
  };

  if (!a.svg.empty()) {
    auto chart = gantt_from_receipts(stages, fmt::format("measured: {} jobs", jobs));
    chart.notes.push_back(
        fmt::format("makespan {:.2f} s, {:.2f} jobs/h end to end", makespan, thr));
    if (auto s = write_svg(a.svg, chart); !s.ok()) {
      fmt::print(err, "report: {}\n", s.error().message);
      return 1;
    }
  }
  if (!a.plan_svg.empty() && planned) {
    if (auto s = write_svg(a.plan_svg, gantt_from_sim(*planned, fmt::format("plan: {} - {} jobs",
                                                                            cluster.name, jobs)));
        !s.ok()) {
      fmt::print(err, "report: {}\n", s.error().message);
      return 1;
    }
  }

  const double error = planned && makespan > 0 ? (planned->makespan_s - makespan) / makespan : 0;
  // Every stage start against the plan's: the worst difference, in seconds and as a share of the
  // planned makespan.  Starts are compared pool by pool, in turn (the n-th task a pool started,
  // live and planned): which of two latents that arrive together a decoder takes first is a tie
  // of the plan, not a difference of schedule.  A pool that ran more tasks than the plan gave it
  // counts as assignment differences.
  double worst_start_s = 0;
  std::string worst_start_at;
  std::size_t unmatched = 0;
  if (planned) {
    std::map<std::pair<std::string, std::string>, std::vector<double>> plan_starts,
        run_starts;  // (stage, pool)
    for (const auto& pr : planned->job_records) {
      if (pr.encode_start_s >= 0)
        plan_starts[{"encode", pr.encode_pool}].push_back(pr.encode_start_s);
      plan_starts[{"sample", pr.sample_pool}].push_back(pr.sample_start_s);
      plan_starts[{"decode", pr.decode_pool}].push_back(pr.decode_start_s);
    }
    for (const auto& st : stages)
      if (st.stage != "transfer") run_starts[{st.stage, st.pool}].push_back(st.start_s - t0);
    for (auto& [key, run] : run_starts) {
      auto& plan = plan_starts[key];
      std::sort(run.begin(), run.end());
      std::sort(plan.begin(), plan.end());
      for (std::size_t i = 0; i < run.size(); ++i) {
        if (i >= plan.size()) {
          ++unmatched;
          continue;
        }
        const double d = std::abs(run[i] - plan[i]);
        if (d > worst_start_s)
          worst_start_s = d,
          worst_start_at = fmt::format("{} on {}, turn {}", key.first, key.second, i + 1);
      }
    }
  }
  if (a.json) {
    nlohmann::json j;
    j["jobs"] = jobs;
    j["receipts"] = a.receipts.size();
    j["measured"] = {{"makespan_s", makespan},
                     {"throughput_per_hour", thr},
                     {"completion_rate_per_hour", rate},
                     {"steady_rate_per_hour", steady},
                     {"real_time_factor_mean", rtf_mean},
                     {"real_time_factor_max", rtf_max}};
    if (planned) {
      j["planned"] = {{"config", config_name},
                      {"makespan_s", planned->makespan_s},
                      {"throughput_per_hour", planned->throughput_per_hour},
                      {"completion_rate_per_hour", planned->completion_rate_per_hour()},
                      {"steady_rate_per_hour", planned_steady}};
      j["prediction_error"] = error;
      j["worst_start_delta_s"] = worst_start_s;
      j["worst_start_error"] = planned->makespan_s > 0 ? worst_start_s / planned->makespan_s : 0;
      j["worst_start_at"] = worst_start_at;
      j["assignment_differences"] = unmatched;
    }
    j["pools"] = nlohmann::json::array();
    for (const auto& [name, p] : pools) {
      nlohmann::json pj = {
          {"name", name},       {"kind", p.kind},
          {"host", p.host},     {"tasks", p.tasks},
          {"busy_s", p.busy_s}, {"utilization", makespan > 0 ? p.busy_s / makespan : 0}};
      for (const auto& [cls, c] : p.by_class) {
        pj["classes"][cls] = {{"measured_mean_s", c.first / static_cast<double>(c.second)},
                              {"n", c.second}};
        if (planned) pj["classes"][cls]["planned_mean_s"] = planned_mean(name, cls);
      }
      j["pools"].push_back(pj);
    }
    auto tj = timing_json(timings, duty, planned ? &*planned : nullptr);
    j["job_timing"] = std::move(tj["jobs"]);
    for (auto& pj : j["pools"])
      if (tj["pools"].contains(pj["name"].get<std::string>()))
        for (auto& [k, v] : tj["pools"][pj["name"].get<std::string>()].items())
          if (!pj.contains(k)) pj[k] = v;
    j["warnings"] = warnings;
    out << j.dump() << "\n";
    return 0;
  }
  fmt::print(out,
             "measured: {} jobs, makespan {:.2f} s, {:.2f} jobs/h end to end, {:.2f} jobs/h "
             "between completions\n",
             jobs, makespan, thr, rate);
  if (planned)
    fmt::print(
        out,
        "planned:  {} jobs, makespan {:.2f} s, {:.2f} jobs/h end to end ({}); error {:+.1f}%\n",
        planned->jobs, planned->makespan_s, planned->throughput_per_hour, config_name, error * 100);
  if (planned)
    fmt::print(
        out, "per-job stage starts: worst {:.3f} s off the plan ({:.1f}% of its makespan, {})\n",
        worst_start_s, planned->makespan_s > 0 ? worst_start_s / planned->makespan_s * 100 : 0,
        worst_start_at.empty() ? "-" : worst_start_at);
  fmt::print(out, "{:<24} {:<8} {:<10} {:>5} {:>9} {:>6} {:>12} {:>12}\n", "pool", "kind", "class",
             "tasks", "busy_s", "util", "measured_s", "planned_s");
  for (const auto& [name, p] : pools)
    for (const auto& [cls, c] : p.by_class) {
      const double pm = planned ? planned_mean(name, cls) : -1;
      fmt::print(out, "{:<24} {:<8} {:<10} {:>5} {:>9.2f} {:>5.1f}% {:>12.3f} {:>12}\n", name,
                 p.kind, cls, c.second, p.busy_s, makespan > 0 ? p.busy_s / makespan * 100 : 0,
                 c.first / static_cast<double>(c.second),
                 pm >= 0 ? fmt::format("{:.3f}", pm) : "-");
    }
  fmt::print(out,
             "steady rate (middle of the run): {:.2f} videos/h measured, {} planned (long queue); "
             "real-time factor mean {:.3f}, max {:.3f}\n",
             steady, planned_steady >= 0 ? fmt::format("{:.2f} videos/h", planned_steady) : "-",
             rtf_mean, rtf_max);
  print_timing(out, timings, duty, planned ? &*planned : nullptr);
  if (!a.svg.empty()) fmt::print(out, "measured gantt: {}\n", a.svg);
  if (!a.plan_svg.empty() && planned) fmt::print(out, "planned gantt: {}\n", a.plan_svg);
  for (const auto& w : warnings) fmt::print(out, "warning: {}\n", w);
  return 0;
}

}  // namespace h3pipe::schedule
