#include "common/api/progress.h"

#include <algorithm>
#include <cmath>

#include "common/queue/keys.h"
#include "common/queue/streams.h"

namespace h3pipe::api {
namespace {

constexpr std::string_view kStages[] = {"encode", "sample", "transfer", "decode"};

long long to_ll(const std::string& s) {
  try {
    return s.empty() ? 0 : std::stoll(s);
  } catch (...) {
    return 0;
  }
}

}  // namespace

double StagePlan::of(std::string_view stage) const {
  if (stage == "encode") return encode_s;
  if (stage == "sample") return sample_s;
  if (stage == "transfer") return transfer_s;
  if (stage == "decode") return decode_s;
  return 0;
}

double StagePlan::before(std::string_view stage) const {
  double s = 0;
  for (auto st : kStages) {
    if (st == stage) return s;
    s += of(st);
  }
  return 0;
}

StagePlan plan_for(const config::Cluster& c, std::string_view job_class) {
  double sum[3] = {0, 0, 0};
  int n[3] = {0, 0, 0};
  for (const auto& p : c.pools) {
    const config::Profile* pr = p.profile_for(job_class);
    if (!pr) continue;
    const int i = static_cast<int>(p.stage);
    sum[i] += pr->expected() * (c.time_scale > 0 ? c.time_scale : 1.0);
    ++n[i];
  }
  StagePlan plan;
  auto mean = [&](config::StageKind k) {
    const int i = static_cast<int>(k);
    return n[i] ? sum[i] / n[i] : 0.0;
  };
  plan.encode_s = mean(config::StageKind::kEncode);
  plan.sample_s = mean(config::StageKind::kSample);
  plan.decode_s = mean(config::StageKind::kDecode);
  if (plan.total() <= 0) plan = StagePlan{5, 70, 5, 20};
  return plan;
}

Progress job_progress(const std::vector<queue::events::Event>& events, std::string_view job,
                      const StagePlan& plan, long long now_ms) {
  namespace ev = queue::events;
  Progress out;
  const double total = plan.total() > 0 ? plan.total() : 1.0;
  double best = 0;               // planned seconds done, the highest seen
  long long stage_start_ms = 0;  // the running stage's stage.started
  long long last_step_ms = 0;
  bool completed = false;
  for (const auto& e : events) {
    if (e.job != job) continue;
    double share = -1;
    if (e.type == ev::kStageStarted) {
      out.stage = e.stage, out.host = e.host, out.pool = e.pool, out.attempt = e.attempt;
      out.step = out.steps = 0;
      stage_start_ms = e.ts_ms;
      last_step_ms = 0;
      share = plan.before(e.stage);
    } else if (e.type == ev::kStep) {
      const long long k = to_ll(e.step), n = to_ll(e.steps);
      if (n > 0 && k >= 0 && k <= n) {
        if (e.stage != out.stage) stage_start_ms = 0;  // its start was not seen
        out.stage = e.stage;
        if (!e.host.empty()) out.host = e.host, out.pool = e.pool, out.attempt = e.attempt;
        out.step = k, out.steps = n;
        last_step_ms = e.ts_ms;
        share = plan.before(e.stage) + plan.of(e.stage) * static_cast<double>(k) / n;
      }
    } else if (e.type == ev::kStageFinished) {
      out.stage = e.stage;
      if (!e.host.empty()) out.host = e.host, out.pool = e.pool, out.attempt = e.attempt;
      share = plan.before(e.stage) + plan.of(e.stage);
      stage_start_ms = 0;
    } else if (e.type == ev::kCompleted) {
      completed = true;
      out.terminal = true;
      share = total;
    } else if (e.type == ev::kFailed || e.type == ev::kCancelled) {
      out.terminal = true;
    }
    best = std::max(best, share);
  }
  if (completed) {
    out.percent = 100;
    out.eta_s = 0;
    return out;
  }
  out.percent = std::clamp(static_cast<int>(std::floor(100.0 * best / total)), 0, 99);
  if (out.terminal) return out;
  // Left: the plan's rest, the running stage's rest from its measured step rate when known.
  double left = std::max(0.0, total - best);
  if (out.steps > 0 && out.step > 0 && stage_start_ms > 0 && last_step_ms >= stage_start_ms) {
    const double per_step_s =
        static_cast<double>(last_step_ms - stage_start_ms) / 1000.0 / static_cast<double>(out.step);
    const double stage_rest = plan.before(out.stage) + plan.of(out.stage) - best;
    const double measured = per_step_s * static_cast<double>(out.steps - out.step) -
                            static_cast<double>(std::max(0LL, now_ms - last_step_ms)) / 1000.0;
    left = left - std::max(0.0, stage_rest) + std::max(0.0, measured);
  }
  out.eta_s = std::round(left * 10.0) / 10.0;
  return out;
}

std::vector<std::string> progress_command(const std::string& run) {
  return {"XRANGE", keys::run_events(run), "-", "+", "COUNT", std::to_string(kMaxProgressEvents)};
}

Progress progress_from(const queue::Reply& events, const std::string& job, const StagePlan& plan,
                       long long now_ms) {
  const auto entries = queue::as_entries(events);
  std::vector<queue::events::Event> evs;
  evs.reserve(entries.size());
  for (const auto& en : entries) evs.push_back(queue::events::from_fields(en.fields));
  return job_progress(evs, job, plan, now_ms);
}

Result<Progress> read_progress(queue::Redis& r, const std::string& run, const std::string& job,
                               const StagePlan& plan, long long now_ms) {
  auto rep = r.command(progress_command(run));
  if (!rep.ok()) return rep.error();
  return progress_from(*rep, job, plan, now_ms);
}

}  // namespace h3pipe::api
