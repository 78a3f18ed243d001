#include "common/schedule/plan.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "common/schedule/gantt_svg.h"

namespace h3pipe::schedule {
namespace {

double metric_of(const PlanResult& p, const std::string& metric) {
  return metric == "steady" ? p.steady_throughput_per_hour : p.sim.throughput_per_hour;
}

Status write_text_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return make_error(errc::plan::kSvg, "{}: cannot open for writing", path);
  f << text;
  f.close();
  if (!f) return make_error(errc::plan::kSvg, "{}: write failed", path);
  return Status::Ok();
}

void print_plan_text(const PlanResult& p, std::ostream& out) {
  const auto& s = p.sim;
  fmt::print(out, "plan: {} ({}), {} jobs of class {}, {} GPUs, policy {}\n", p.name, p.config_path,
             s.jobs, p.job_class, p.gpus, p.policy);
  fmt::print(out,
             "makespan {:.2f} s | {:.2f} jobs/h end to end | {:.2f} jobs/h steady (long queue)\n",
             s.makespan_s, s.throughput_per_hour, p.steady_throughput_per_hour);
  fmt::print(out, "{:<24} {:<8} {:<12} {:>6} {:>9} {:>5} {:>7} {:>9} {:>9} {:>9}\n", "resource",
             "kind", "host", "util", "busy_s", "tasks", "bubbles", "bubble_s", "wait_avg",
             "wait_max");
  for (std::size_t i = 0; i < s.lanes.size(); ++i) {
    const auto& l = s.lanes[i];
    const auto& st = s.stats[i];
    fmt::print(out,
               "{:<24} {:<8} {:<12} {:>5.1f}% {:>9.2f} {:>5} {:>7} {:>9.2f} {:>9.2f} {:>9.2f}\n",
               l.name, lane_kind_name(l.kind), l.host, st.utilization * 100, st.busy_s, st.tasks,
               st.bubbles, st.bubble_s, st.queue_wait_mean_s, st.queue_wait_max_s);
  }
  if (p.mix) print_mix_text(*p.mix, out);
  for (const auto& w : s.warnings) fmt::print(out, "warning: {}\n", w);
}

}  // namespace

std::size_t count_gpus(const config::Cluster& c) {
  std::set<std::pair<std::string, int>> seen;
  for (const auto& p : c.pools)
    for (int g : p.gpus) seen.emplace(p.host, g);
  return seen.size();
}

Result<PlanResult> plan_cluster(const config::Cluster& cluster, std::string job_class,
                                std::uint32_t jobs, const SimOptions& options) {
  if (jobs == 0) return make_error(errc::plan::kArgs, "--jobs must be at least 1");
  if (job_class.empty())
    job_class = cluster.classes.empty() ? "default" : cluster.classes.front().name;
  PlanResult p;
  p.name = cluster.name;
  p.job_class = job_class;
  p.gpus = count_gpus(cluster);
  p.policy = policy_name(options.policy);
  auto sim = simulate(cluster, make_jobs(jobs, job_class), options);
  if (!sim.ok()) return sim.error();
  p.sim = std::move(sim.value());
  if (jobs >= kSteadyJobs) {
    p.steady_throughput_per_hour = p.sim.completion_rate_per_hour();
  } else {
    auto steady = steady_throughput_per_hour(cluster, job_class, options);
    if (!steady.ok()) return steady.error();
    p.steady_throughput_per_hour = steady.value();
  }
  return p;
}

Result<PlanResult> plan_cluster(const config::Cluster& cluster, const std::vector<SimJob>& jobs,
                                const SimOptions& options) {
  if (jobs.empty()) return make_error(errc::plan::kNoJobs, "the plan needs at least one job");
  PlanResult p;
  p.name = cluster.name;
  p.job_class = jobs.front().job_class;
  p.gpus = count_gpus(cluster);
  p.policy = policy_name(options.policy);
  SimOptions o = options;
  o.record = true;  // the latencies come from the job records
  auto sim = simulate(cluster, jobs, o);
  if (!sim.ok()) return sim.error();
  p.sim = std::move(sim.value());
  p.mix = mix_report(p.sim, jobs);
  auto steady = steady_throughput_per_hour(cluster, p.job_class, options);
  if (!steady.ok()) return steady.error();
  p.steady_throughput_per_hour = steady.value();
  return p;
}

Result<PlanResult> plan_file(const std::string& path, const std::string& job_class,
                             std::uint32_t jobs, const std::string& policy, bool stochastic,
                             std::uint64_t seed, const JobSource& source) {
  auto cluster = config::load_file(path);
  if (!cluster.ok()) return cluster.error();
  SimOptions o;
  auto pol = policy.empty() ? std::optional<Policy>(cluster->dispatch) : parse_policy(policy);
  if (!pol)
    return make_error(errc::plan::kArgs, "--policy \"{}\": expected completion_time or first_free",
                      policy);
  o.policy = *pol;
  o.stochastic = stochastic;
  o.seed = seed;
  Result<PlanResult> p = make_error(errc::plan::kNoJobs, "no jobs");
  if (source.empty()) {
    p = plan_cluster(cluster.value(), job_class, jobs, o);
  } else {
    auto mix = jobs_from(source, cluster.value(), job_class);
    if (!mix.ok()) return rephrase(mix.error(), "{}: {}", path, mix.error().message);
    p = plan_cluster(cluster.value(), *mix, o);
  }
  if (!p.ok()) return rephrase(p.error(), "{}: {}", path, p.error().message);
  p->config_path = path;
  return p;
}

Comparison compare_plans(std::vector<PlanResult> plans, double threshold,
                         const std::string& metric) {
  std::stable_sort(plans.begin(), plans.end(),
                   [](const PlanResult& a, const PlanResult& b) { return a.gpus < b.gpus; });
  Comparison c;
  for (auto& p : plans) c.rows.push_back({std::move(p), 0, 0, ""});
  if (c.rows.empty()) return c;
  const double first = metric_of(c.rows[0].plan, metric);
  for (std::size_t i = 0; i < c.rows.size(); ++i) {
    auto& r = c.rows[i];
    const double m = metric_of(r.plan, metric);
    const double current = metric_of(c.rows[c.recommended].plan, metric);
    r.gain_over_first = first > 0 ? m / first - 1 : 0;
    r.gain_over_current = current > 0 ? m / current - 1 : 0;
    if (i == 0) {
      r.decision = "baseline";
    } else if (r.gain_over_current >= threshold - 1e-12) {
      r.decision = "taken";
      c.recommended = i;
    } else {
      r.decision = "declined";
    }
  }
  return c;
}

nlohmann::json plan_to_json(const PlanResult& p) {
  using nlohmann::json;
  const auto& s = p.sim;
  json j = {{"config", p.config_path},
            {"name", p.name},
            {"class", p.job_class},
            {"jobs", s.jobs},
            {"gpus", p.gpus},
            {"policy", p.policy},
            {"makespan_s", s.makespan_s},
            {"throughput_per_hour", s.throughput_per_hour},
            {"steady_throughput_per_hour", p.steady_throughput_per_hour},
            {"first_completion_s", s.first_completion_s}};
  json res = json::array();
  for (std::size_t i = 0; i < s.lanes.size(); ++i) {
    const auto& l = s.lanes[i];
    const auto& st = s.stats[i];
    res.push_back({{"name", l.name},
                   {"kind", lane_kind_name(l.kind)},
                   {"host", l.host},
                   {"gpu_group", l.group},
                   {"tasks", st.tasks},
                   {"busy_s", st.busy_s},
                   {"utilization", st.utilization},
                   {"bubbles", st.bubbles},
                   {"bubble_s", st.bubble_s},
                   {"lead_idle_s", st.lead_idle_s},
                   {"tail_idle_s", st.tail_idle_s},
                   {"queue_wait_mean_s", st.queue_wait_mean_s},
                   {"queue_wait_max_s", st.queue_wait_max_s}});
  }
  j["resources"] = std::move(res);
  j["warnings"] = s.warnings;
  return j;
}

int run_plan(const PlanArgs& a, std::ostream& out, std::ostream& err) {
  if (a.config.empty() && a.compare.empty()) {
    fmt::print(err, "plan: give --config FILE or --compare A.json,B.json,...\n");
    return 2;
  }
  if (a.metric != "end_to_end" && a.metric != "steady") {
    fmt::print(err, "plan: --metric \"{}\": expected end_to_end or steady\n", a.metric);
    return 2;
  }
  if (!a.policy.empty() && !parse_policy(a.policy)) {
    fmt::print(err, "plan: --policy \"{}\": expected completion_time or first_free\n", a.policy);
    return 2;
  }
  if (a.jobs == 0) {
    fmt::print(err, "plan: --jobs must be at least 1\n");
    return 2;
  }
  if (a.threshold < 0) {
    fmt::print(err, "plan: --threshold must be >= 0\n");
    return 2;
  }
  if (!a.source.mix.empty())
    if (auto m = parse_mix(a.source.mix); !m.ok()) {
      fmt::print(err, "plan: {}\n", m.error().message);
      return 2;
    }
  std::vector<std::string> paths;
  if (!a.config.empty()) paths.push_back(a.config);
  for (const auto& c : a.compare)
    if (!c.empty() && std::find(paths.begin(), paths.end(), c) == paths.end()) paths.push_back(c);

  std::vector<PlanResult> plans;
  for (const auto& path : paths) {
    auto p = plan_file(path, a.job_class, a.jobs, a.policy, a.stochastic, a.seed, a.source);
    if (!p.ok()) {
      fmt::print(err, "plan: {}\n", p.error().message);
      return 1;
    }
    plans.push_back(std::move(p.value()));
  }

  const bool comparing = !a.compare.empty();
  Comparison cmp;
  const PlanResult* chosen = &plans.front();
  if (comparing) {
    cmp = compare_plans(std::move(plans), a.threshold, a.metric);
    chosen = &cmp.rows[cmp.recommended].plan;
  }

  if (!a.svg.empty()) {
    auto chart = gantt_from_sim(chosen->sim, fmt::format("plan: {} - {} x {}", chosen->name,
                                                         chosen->sim.jobs, chosen->job_class));
    chart.notes.push_back(fmt::format("steady {:.2f} jobs/h (long queue); config {}",
                                      chosen->steady_throughput_per_hour, chosen->config_path));
    if (auto s = write_text_file(a.svg, render_svg(chart)); !s.ok()) {
      fmt::print(err, "plan: {}\n", s.error().message);
      return 1;
    }
  }

  if (a.json) {
    nlohmann::json j = plan_to_json(*chosen);
    if (chosen->mix) j["latency"] = mix_to_json(*chosen->mix);
    j["stochastic"] = a.stochastic;
    if (!a.svg.empty()) j["svg"] = a.svg;
    if (comparing) {
      j["recommended"] = chosen->config_path;
      j["recommended_name"] = chosen->name;
      j["threshold"] = a.threshold;
      j["metric"] = a.metric;
      nlohmann::json rows = nlohmann::json::array();
      for (const auto& r : cmp.rows)
        rows.push_back({{"config", r.plan.config_path},
                        {"name", r.plan.name},
                        {"gpus", r.plan.gpus},
                        {"makespan_s", r.plan.sim.makespan_s},
                        {"throughput_per_hour", r.plan.sim.throughput_per_hour},
                        {"steady_throughput_per_hour", r.plan.steady_throughput_per_hour},
                        {"gain", r.gain_over_first},
                        {"gain_over_pick", r.gain_over_current},
                        {"decision", r.decision}});
      j["candidates"] = std::move(rows);
    }
    out << j.dump() << "\n";
    return 0;
  }

  if (!comparing) {
    print_plan_text(*chosen, out);
  } else {
    fmt::print(out, "compare: {} jobs of class {}, metric {}, threshold {:.1f}%\n",
               chosen->sim.jobs, chosen->job_class, a.metric, a.threshold * 100);
    fmt::print(out, "{:<28} {:>4} {:>11} {:>9} {:>9} {:>8} {:>8}  {}\n", "topology", "gpus",
               "makespan_s", "e2e/h", "steady/h", "gain", "vs_pick", "decision");
    for (const auto& r : cmp.rows)
      fmt::print(out, "{:<28} {:>4} {:>11.2f} {:>9.2f} {:>9.2f} {:>7.1f}% {:>7.1f}%  {}\n",
                 r.plan.name, r.plan.gpus, r.plan.sim.makespan_s, r.plan.sim.throughput_per_hour,
                 r.plan.steady_throughput_per_hour, r.gain_over_first * 100,
                 r.gain_over_current * 100, r.decision);
    fmt::print(out, "recommended: {} ({})\n\n", chosen->name, chosen->config_path);
    print_plan_text(*chosen, out);
  }
  if (!a.svg.empty()) fmt::print(out, "gantt: {}\n", a.svg);
  return 0;
}

}  // namespace h3pipe::schedule
