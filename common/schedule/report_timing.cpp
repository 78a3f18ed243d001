// `h3pipe report`'s per-job and per-pool sections (job_timing.h).
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <map>

#include "common/schedule/job_timing.h"
#include "common/schedule/simulate.h"

namespace h3pipe::schedule {
namespace {

// The planner's split of the i-th job (jobs submitted at time 0 in the plan).
nlohmann::json planned_job(const JobRecord& r) {
  nlohmann::json st = nlohmann::json::array();
  double ready = r.submit_s;
  auto add = [&](const char* stage, const std::string& pool, double start, double end) {
    st.push_back({{"stage", stage},
                  {"pool", pool},
                  {"wait_s", std::max(0.0, start - ready)},
                  {"total_s", end - start}});
    ready = end;
  };
  if (r.encode_start_s >= 0) add("encode", r.encode_pool, r.encode_start_s, r.encode_end_s);
  add("sample", r.sample_pool, r.sample_start_s, r.sample_end_s);
  if (r.transfer_start_s >= 0) add("transfer", "", r.transfer_start_s, r.transfer_end_s);
  add("decode", r.decode_pool, r.decode_start_s, r.decode_end_s);
  return {{"end_to_end_s", r.decode_end_s - r.submit_s}, {"stages", st}};
}

}  // namespace

nlohmann::json timing_json(const std::vector<JobTiming>& jobs, const std::vector<PoolDuty>& pools,
                           const SimResult* planned) {
  nlohmann::json j;
  j["jobs"] = nlohmann::json::array();
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const JobTiming& t = jobs[i];
    nlohmann::json st = nlohmann::json::array();
    for (const auto& s : t.stages)
      st.push_back({{"stage", s.stage},
                    {"pool", s.pool},
                    {"host", s.host},
                    {"wait_s", s.wait_s},
                    {"run_s", s.run_s},
                    {"mux_s", s.mux_s},
                    {"wire_s", s.wire_s},
                    {"verify_s", s.verify_s},
                    {"other_s", s.other_s},
                    {"total_s", s.total_s}});
    nlohmann::json jj = {{"job_id", t.job_id},   {"class", t.job_class},
                         {"stages", st},         {"wait_s", t.wait_s},
                         {"run_s", t.run_s},     {"transfer_s", t.transfer_s},
                         {"mux_s", t.mux_s},     {"end_to_end_s", t.end_to_end_s},
                         {"video_s", t.video_s}, {"real_time_factor", t.real_time_factor}};
    if (planned && i < planned->job_records.size()) {
      jj["planned"] = planned_job(planned->job_records[i]);
      const double pv = jj["planned"]["end_to_end_s"].get<double>();
      jj["planned"]["real_time_factor"] = t.video_s > 0 ? pv / t.video_s : 0;
    }
    j["jobs"].push_back(std::move(jj));
  }
  // The plan's duty cycle of the same pool: its busy share of its own span (first start to last
  // end).
  std::map<std::string, double> planned_duty;
  if (planned)
    for (std::size_t i = 0; i < planned->lanes.size() && i < planned->stats.size(); ++i) {
      const auto& st = planned->stats[i];
      const double span = planned->makespan_s - st.lead_idle_s - st.tail_idle_s;
      planned_duty[planned->lanes[i].name] = span > 0 ? std::min(1.0, st.busy_s / span) : 1.0;
    }
  j["pools"] = nlohmann::json::object();
  for (const auto& p : pools)
    j["pools"][p.pool] = {
        {"planned_duty_cycle", planned_duty.count(p.pool) ? planned_duty[p.pool] : -1},
        {"stage", p.stage},
        {"host", p.host},
        {"tasks", p.tasks},
        {"span_s", p.span_s},
        {"busy_s", p.busy_s},
        {"duty_cycle", p.duty_cycle},
        {"bubbles", p.bubbles},
        {"bubble_s", p.bubble_s},
        {"gflop_per_s", p.gflop_per_s},
        {"peak_gflops", p.peak_gflops},
        {"mfu", p.mfu},
        {"device", p.device}};
  return j;
}

void print_timing(std::ostream& out, const std::vector<JobTiming>& jobs,
                  const std::vector<PoolDuty>& pools, const SimResult* planned) {
  fmt::print(out,
             "\nper job (seconds): wait = queues, run = compute + bookkeeping, xfer = transfer "
             "(wire+verify), mux\n");
  fmt::print(out, "{:<16} {:>8} {:>8} {:>14} {:>7} {:>9} {:>9} {:>7} {:>8}\n", "job", "wait", "run",
             "xfer(w+v)", "mux", "e2e", "plan_e2e", "rtf", "plan_rtf");
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const JobTiming& t = jobs[i];
    double wire = 0, verify = 0;
    for (const auto& s : t.stages) wire += s.wire_s, verify += s.verify_s;
    std::string pe = "-", pr = "-";
    if (planned && i < planned->job_records.size()) {
      const auto& r = planned->job_records[i];
      pe = fmt::format("{:.3f}", r.decode_end_s - r.submit_s);
      if (t.video_s > 0) pr = fmt::format("{:.3f}", (r.decode_end_s - r.submit_s) / t.video_s);
    }
    fmt::print(
        out,
        "{:<16} {:>8.3f} {:>8.3f} {:>6.3f}({:.3f}+{:.3f}) {:>7.3f} {:>9.3f} {:>9} {:>7.3f} {:>8}\n",
        t.job_id, t.wait_s, t.run_s, t.transfer_s, wire, verify, t.mux_s, t.end_to_end_s, pe,
        t.real_time_factor, pr);
  }
  fmt::print(out, "\nduty cycle (share of the pool's span it ran a task), bubbles by cause, MFU\n");
  fmt::print(out, "{:<20} {:<8} {:>5} {:>8} {:>7} {:>9} {:>9} {:>9} {:>10} {:>7}\n", "pool",
             "stage", "tasks", "span_s", "duty", "no_job_s", "gpu_grp_s", "ovrhd_s", "GFLOP/s",
             "mfu");
  for (const auto& p : pools) {
    auto b = [&](const char* c) {
      auto it = p.bubble_s.find(c);
      return it == p.bubble_s.end() ? 0.0 : it->second;
    };
    fmt::print(out,
               "{:<20} {:<8} {:>5} {:>8.3f} {:>6.1f}% {:>9.3f} {:>9.3f} {:>9.3f} {:>10} {:>7}\n",
               p.pool, p.stage, p.tasks, p.span_s, p.duty_cycle * 100, b("no_job"), b("gpu_group"),
               b("overhead"), p.gflop_per_s > 0 ? fmt::format("{:.1f}", p.gflop_per_s) : "-",
               p.mfu >= 0 ? fmt::format("{:.3f}", p.mfu) : "-");
  }
}

}  // namespace h3pipe::schedule
