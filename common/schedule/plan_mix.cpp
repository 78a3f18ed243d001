#include "common/schedule/plan_mix.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "common/core/bounded_file.h"
#include "common/spec/spec.h"

namespace h3pipe::schedule {
namespace {

// "TEXT@SECONDS" -> (TEXT, SECONDS); no '@' -> (TEXT, 0).  False when SECONDS is not a number
// >= 0.
bool split_at(const std::string& s, std::string& head, double& at_s) {
  const auto k = s.rfind('@');
  head = s.substr(0, k);
  at_s = 0;
  if (k == std::string::npos) return true;
  const std::string t = s.substr(k + 1);
  char* end = nullptr;
  at_s = std::strtod(t.c_str(), &end);
  return !t.empty() && end && *end == '\0' && std::isfinite(at_s) && at_s >= 0;
}

bool parse_ll(const std::string& s, long long& v) {
  if (s.empty()) return false;
  char* end = nullptr;
  v = std::strtoll(s.c_str(), &end, 10);
  return end && *end == '\0';
}

// The same cap `h3pipe run` puts on a batch file (limits.max_batch lines of at most a prompt, a
// negative prompt and 16 KiB of the rest).
Result<std::string> read_batch(const std::string& path, const config::Limits& limits) {
  const std::uint64_t cap =
      static_cast<std::uint64_t>(limits.max_batch) * (2ull * limits.max_prompt_bytes + 16 * 1024);
  return read_bounded_file(
      path, {"a JSON lines batch file", cap, errc::batch::kOpen, errc::batch::kNotAFile,
             errc::batch::kTooLarge, "limits.max_batch and limits.max_prompt_bytes"});
}

Status add_batch(const std::string& arg, const JobSource& src, const config::Cluster& cluster,
                 std::vector<SimJob>& out) {
  std::string path;
  double at_s = 0;
  if (!split_at(arg, path, at_s))
    return make_error(errc::plan::kArgs,
                      "--batch \"{}\": expected FILE or FILE@SECONDS (seconds >= 0)", arg);
  auto text = read_batch(path, cluster.limits);
  if (!text.ok()) return text.error();
  const spec::Batch batch = spec::parse_batch(*text, cluster);
  if (!batch.errors.empty()) {
    const auto& e = batch.errors.front();
    return make_error(errc::plan::kArgs, "{}:{}: {} ({} error(s) in the batch)", path, e.line,
                      e.error.to_string(), batch.errors.size());
  }
  for (const auto& s : batch.specs) {
    SimJob j;
    j.id = s.job_id();
    j.job_class = spec::job_class(s, cluster);
    j.submit_s = at_s;
    // As `h3pipe run --user/--priority`: the run's values fill what a line leaves out.
    j.priority = s.priority() != 0 ? s.priority() : src.priority;
    j.user = s.user().empty() ? src.user : s.user();
    out.push_back(std::move(j));
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<MixPart>> parse_mix(const std::string& text) {
  std::vector<MixPart> parts;
  std::size_t from = 0;
  while (from <= text.size()) {
    const auto comma = std::min(text.find(',', from), text.size());
    const std::string entry = text.substr(from, comma - from);
    from = comma + 1;
    const auto bad = [&] {
      return make_error(errc::plan::kArgs,
                        "--mix entry \"{}\": expected USER:JOBS[:PRIORITY][@SECONDS] (JOBS >= 1, "
                        "PRIORITY an integer from {} to {}, SECONDS >= 0)",
                        entry, -spec::kMaxPriority, spec::kMaxPriority);
    };
    MixPart p;
    std::string head;
    if (!split_at(entry, head, p.at_s)) return bad();
    std::vector<std::string> f;
    for (std::size_t a = 0;;) {
      const auto c = head.find(':', a);
      f.push_back(head.substr(a, c == std::string::npos ? std::string::npos : c - a));
      if (c == std::string::npos) break;
      a = c + 1;
    }
    long long n = 0, prio = 0;
    if (f.size() < 2 || f.size() > 3 || !config::valid_user_name(f[0]) || !parse_ll(f[1], n) ||
        n < 1 || n > 1000000 || (f.size() == 3 && !parse_ll(f[2], prio)) ||
        prio < -spec::kMaxPriority || prio > spec::kMaxPriority)
      return bad();
    p.user = f[0];
    p.jobs = static_cast<std::uint32_t>(n);
    p.priority = prio;
    parts.push_back(std::move(p));
  }
  return parts;
}

Result<std::vector<SimJob>> jobs_from(const JobSource& src, const config::Cluster& cluster,
                                      const std::string& job_class) {
  std::vector<SimJob> jobs;
  for (const auto& b : src.batches)
    if (auto s = add_batch(b, src, cluster, jobs); !s.ok()) return s.error();
  if (!src.mix.empty()) {
    auto parts = parse_mix(src.mix);
    if (!parts.ok()) return parts.error();
    const std::string cls = !job_class.empty()        ? job_class
                            : cluster.classes.empty() ? "default"
                                                      : cluster.classes.front().name;
    std::map<std::string, std::size_t> seen;
    for (const auto& p : *parts)
      for (std::uint32_t i = 0; i < p.jobs; ++i)
        jobs.push_back(
            {fmt::format("{}-{:04d}", p.user, ++seen[p.user]), cls, p.at_s, p.priority, p.user});
  }
  if (jobs.empty()) return make_error(errc::plan::kNoJobs, "the batches and --mix hold no job");
  // Submission order: by time, then as given (the stream order the live claims see).
  std::stable_sort(jobs.begin(), jobs.end(),
                   [](const SimJob& a, const SimJob& b) { return a.submit_s < b.submit_s; });
  return jobs;
}

double nearest_rank(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

LatencyStats latency_stats(std::vector<double> v) {
  LatencyStats s;
  s.jobs = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.p50_s = nearest_rank(v, 0.50);
  s.p95_s = nearest_rank(v, 0.95);
  double sum = 0;
  for (double x : v) sum += x;
  s.mean_s = sum / static_cast<double>(v.size());
  s.max_s = v.back();
  return s;
}

MixReport mix_report(const SimResult& sim, const std::vector<SimJob>& jobs) {
  std::vector<double> all;
  std::map<std::string, std::vector<double>> by_user;
  std::map<long long, std::vector<double>> by_priority;
  for (std::size_t i = 0; i < jobs.size() && i < sim.job_records.size(); ++i) {
    const double l = sim.job_records[i].decode_end_s - jobs[i].submit_s;
    all.push_back(l);
    by_user[jobs[i].user].push_back(l);
    by_priority[jobs[i].priority].push_back(l);
  }
  MixReport m;
  m.all = latency_stats(all);
  for (auto& [u, v] : by_user) m.by_user[u] = latency_stats(std::move(v));
  for (auto& [p, v] : by_priority) m.by_priority[p] = latency_stats(std::move(v));
  return m;
}

nlohmann::json mix_to_json(const MixReport& m) {
  using nlohmann::json;
  const auto one = [](const LatencyStats& s) {
    return json{{"jobs", s.jobs},
                {"p50_s", s.p50_s},
                {"p95_s", s.p95_s},
                {"mean_s", s.mean_s},
                {"max_s", s.max_s}};
  };
  json users = json::object(), prios = json::object();
  for (const auto& [u, s] : m.by_user) users[u] = one(s);
  for (const auto& [p, s] : m.by_priority) prios[std::to_string(p)] = one(s);
  return {{"all", one(m.all)}, {"by_user", users}, {"by_priority", prios}};
}

void print_mix_text(const MixReport& m, std::ostream& out) {
  fmt::print(out, "job latency (decode end - submission; p50/p95 by nearest rank):\n");
  fmt::print(out, "{:<24} {:>6} {:>9} {:>9} {:>9} {:>9}\n", "group", "jobs", "p50_s", "p95_s",
             "mean_s", "max_s");
  const auto row = [&](const std::string& name, const LatencyStats& s) {
    fmt::print(out, "{:<24} {:>6} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f}\n", name, s.jobs, s.p50_s,
               s.p95_s, s.mean_s, s.max_s);
  };
  row("all", m.all);
  for (const auto& [u, s] : m.by_user) row("user " + (u.empty() ? std::string("(none)") : u), s);
  for (const auto& [p, s] : m.by_priority) row(fmt::format("priority {}", p), s);
}

}  // namespace h3pipe::schedule
