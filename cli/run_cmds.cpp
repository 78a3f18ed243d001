// run / wait / status / cancel: submission through the documented Redis stream, and progress.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli/cli.h"
#include "common/queue/keys.h"
#include "common/spec/spec.h"
#include "common/state/paths.h"
#include "common/state/state.h"

namespace h3pipe::cli {
using Clock = std::chrono::steady_clock;
namespace {

// A batch file is read only when it is a regular file no larger than a batch of the config's
// limits can be (max_batch lines of at most a prompt, a negative prompt and 16 KiB of the rest):
// `h3pipe run /dev/zero` or a multi-GB file is refused before a byte is read (issue #14).
Result<std::string> read_batch_file(const std::string& path, const config::Limits& limits) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st))
    return make_error(errc::batch::kOpen, "{}: cannot open the batch file", path);
  if (!std::filesystem::is_regular_file(st))
    return make_error(errc::batch::kNotAFile, "{}: not a regular file (a JSON lines batch file is expected)", path);
  const std::uint64_t cap = static_cast<std::uint64_t>(limits.max_batch) *
                            (2ull * limits.max_prompt_bytes + 16 * 1024);
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return make_error(errc::batch::kOpen, "{}: cannot read the batch file: {}", path, ec.message());
  if (size > cap)
    return make_error(errc::batch::kTooLarge,
                      "{}: {} bytes, above what {} jobs can take ({} bytes; limits.max_batch, "
                      "limits.max_prompt_bytes)", path, size, limits.max_batch, cap);
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(errc::batch::kOpen, "{}: cannot open the batch file", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int cmd_run(const Global& g, const std::string& batch_file, bool background, const std::string& run_arg) {
  auto c = load_cluster(g);
  if (!c.ok()) { fmt::print(stderr, "{}\n", c.error().message); return 2; }
  auto text = read_batch_file(batch_file, c->limits);
  if (!text.ok()) { fmt::print(stderr, "{}\n", text.error().message); return 2; }
  auto batch = spec::parse_batch(*text, *c);
  if (!batch.errors.empty()) {
    for (const auto& e : batch.errors)
      fmt::print(stderr, "{}:{}: {}\n", batch_file, e.line, e.error.to_string());
    fmt::print(stderr, "{} error(s); nothing was submitted\n", batch.errors.size());
    return 2;
  }
  std::string run_id = run_arg.empty() ? state::new_run_id() : run_arg;
  if (auto s = artifacts::validate_id("--run-id", run_id); !s.ok()) { fmt::print(stderr, "{}\n", s.error().message); return 2; }
  auto redis = connect(g, *c);
  if (!redis.ok()) { fmt::print(stderr, "{}\n", redis.error().message); return 1; }
  state::Store store(**redis);
  std::vector<std::string> ids;
  for (const auto& s : batch.specs) ids.push_back(s.job_id());
  if (auto s = store.create_run(run_id, ids); !s.ok()) {
    fmt::print(stderr, "{}\n", s.error().message);
    return 1;
  }
  // One transaction: the whole batch is submitted or none of it.
  std::vector<std::vector<std::string>> cmds = {{"MULTI"}};
  for (const auto& s : batch.specs) cmds.push_back({"XADD", keys::submit(), "*", "run", run_id, "spec", spec::to_json(s)});
  cmds.push_back({"EXEC"});
  auto r = (*redis)->pipeline(cmds);
  if (!r.ok()) { fmt::print(stderr, "submission failed, nothing enqueued: {}\n", r.error().message); return 1; }
  fmt::print(stderr, "submitted {} job(s) as run {}\n", batch.specs.size(), run_id);
  fmt::print("{}\n", run_id);
  std::fflush(stdout);
  if (background) return 0;
  return cmd_wait(g, run_id, 0);
}

namespace {

std::string bar(long long n, long long total, int width = 30) {
  int fill = total > 0 ? static_cast<int>(width * std::min(n, total) / total) : 0;
  return "[" + std::string(fill, '#') + std::string(width - fill, '.') + "]";
}

}  // namespace

int cmd_wait(const Global& g, const std::string& run_id, double timeout_s) {
  auto c = load_cluster(g);
  if (!c.ok()) { fmt::print(stderr, "{}\n", c.error().message); return 2; }
  auto start = Clock::now();
  // Redis may restart under a long wait (a crash, an upgrade: the run carries on from its AOF):
  // reconnect for up to the timeout, or 60 s without one, before giving up (exit 5).
  const double grace_s = timeout_s > 0 ? timeout_s : 60.0;
  std::unique_ptr<queue::Redis> redis;
  auto reconnect = [&]() -> bool {
    const auto deadline = Clock::now() + std::chrono::duration<double>(grace_s);
    std::string why;
    bool warned = false;
    while (Clock::now() < deadline) {
      auto r = connect(g, *c);
      if (r.ok() && (*r)->command({"PING"}).ok()) {
        redis = std::move(*r);
        if (warned) fmt::print(stderr, "wait: Redis is back\n");
        return true;
      }
      why = r.ok() ? "PING failed" : r.error().message;
      if (!warned && redis) fmt::print(stderr, "\nwait: Redis does not answer ({}); retrying for {} s\n", why, grace_s);
      warned = warned || static_cast<bool>(redis);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    fmt::print(stderr, "wait: Redis unreachable: {}\n", why);
    return false;
  };
  if (!reconnect()) return kExitUnreachable;
  bool tty = ::isatty(1);
  std::map<std::string, long long> last;
  state::RunStatus s;
  for (;;) {
    auto rs = state::Store(*redis).run_status(run_id);
    if (!rs.ok() && rs.error().code == errc::run::kUnknown) {
      fmt::print(stderr, "{}\n", rs.error().message);
      return kExitNoSuchRun;
    }
    if (!rs.ok()) {
      if (!reconnect()) return kExitUnreachable;
      continue;
    }
    s = *rs;
    long long total = std::max(s.total, s.expected);
    // Jobs at or past each stage (never executions: a re-run stage counts its job once).
    std::map<std::string, long long> now = s.stage_jobs();
    now["failed"] = s.failed;
    now["cancelled"] = s.cancelled_jobs;
    if (tty) {
      std::string out = "\r";
      for (const char* st : {"encode", "sample", "decode"})
        out += fmt::format("{} {} {}/{}  ", st, bar(now[st], total, 12), now[st], total);
      if (s.failed) out += fmt::format("failed {}  ", s.failed);
      if (s.cancelled_jobs) out += fmt::format("cancelled {}", s.cancelled_jobs);
      fmt::print("{}", out);
      std::fflush(stdout);
    } else if (now != last) {
      for (const auto& [k, v] : now)
        if (v != last[k]) fmt::print("{} {} {}/{}\n", run_id, k, v, total);
      std::fflush(stdout);
    }
    last = now;
    if (s.finished()) break;
    if (timeout_s > 0 && std::chrono::duration<double>(Clock::now() - start).count() > timeout_s) {
      fmt::print(stderr, "\nwait: timed out after {} s\n", timeout_s);
      return kExitTimedOut;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (tty) fmt::print("\n");
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  fmt::print("run {}: {} done, {} failed, {} cancelled of {} ({:.1f} s)\n", run_id, s.done, s.failed,
             s.cancelled_jobs, s.total, secs);
  if (s.failed || s.cancelled_jobs) {
    auto jobs = state::Store(*redis).jobs(run_id);
    if (jobs.ok())
      for (const auto& j : *jobs)
        if (j.state == "failed" || j.state == "cancelled") fmt::print("  {} {}: {}\n", j.job_id, j.state, j.error);
  }
  return s.failed || s.cancelled_jobs ? 1 : 0;
}

int cmd_status(const Global& g, const std::string& run_id, bool json) {
  auto c = load_cluster(g);
  if (!c.ok()) { fmt::print(stderr, "{}\n", c.error().message); return 2; }
  auto redis = connect(g, *c);
  if (!redis.ok()) { fmt::print(stderr, "{}\n", redis.error().message); return 1; }
  state::Store store(**redis);
  if (run_id.empty()) {
    auto runs = store.runs(50);
    if (!runs.ok()) { fmt::print(stderr, "{}\n", runs.error().message); return 1; }
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : *runs) {
      auto s = store.run_status(r);
      if (!s.ok()) continue;
      out.push_back({{"run_id", r}, {"total", s->total}, {"done", s->done}, {"failed", s->failed},
                     {"cancelled_jobs", s->cancelled_jobs}, {"finished", s->finished()}});
      if (!json)
        fmt::print("{}  {}/{} done  {} failed  {} cancelled{}\n", r, s->done, s->total, s->failed, s->cancelled_jobs,
                   s->finished() ? "" : "  (running)");
    }
    if (json) fmt::print("{}\n", out.dump(2));
    return 0;
  }
  auto s = store.run_status(run_id);
  if (!s.ok()) { fmt::print(stderr, "{}\n", s.error().message); return 1; }
  auto jobs = store.jobs(run_id);
  if (!jobs.ok()) { fmt::print(stderr, "{}\n", jobs.error().message); return 1; }
  nlohmann::json j = {{"run_id", run_id}, {"created_unix_ms", s->created_ms}, {"total", s->total}, {"done", s->done}, {"failed", s->failed},
                      {"cancelled", s->cancelled}, {"cancelled_jobs", s->cancelled_jobs}, {"finished", s->finished()},
                      {"stages", s->stage_jobs()}, {"states", s->in_state}, {"illegal_transitions", s->illegal}};
  for (const auto& job : *jobs) {
    nlohmann::json jj = {{"job_id", job.job_id}, {"state", job.state}};
    if (!job.error.empty()) jj["error"] = job.error;
    for (const auto& [k, v] : job.fields)
      if (k.rfind("attempts:", 0) == 0 || k.rfind("exec:", 0) == 0 || k.rfind("done:", 0) == 0) jj[k] = std::stoll(v);
    if (job.state == "done") {
      if (auto p = paths::mp4(*c, run_id, job.job_id); p.ok()) jj["mp4"] = p->string();
      if (auto p = paths::receipt(*c, run_id, job.job_id); p.ok()) jj["receipt"] = p->string();
    }
    j["jobs"].push_back(jj);
  }
  if (json) {
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("run {}: {} done, {} failed, {} cancelled of {}{}{}\n", run_id, s->done, s->failed, s->cancelled_jobs, s->total,
             s->cancelled ? " (cancelled)" : "", s->finished() ? "" : " (running)");
  for (const auto& job : *jobs)
    fmt::print("  {:<24} {:<10} {}\n", job.job_id, job.state, job.error);
  return 0;
}

int cmd_cancel(const Global& g, const std::string& run_id) {
  auto c = load_cluster(g);
  if (!c.ok()) { fmt::print(stderr, "{}\n", c.error().message); return 2; }
  auto redis = connect(g, *c);
  if (!redis.ok()) { fmt::print(stderr, "{}\n", redis.error().message); return 1; }
  state::Store store(**redis);
  if (auto s = store.run_status(run_id); !s.ok()) { fmt::print(stderr, "{}\n", s.error().message); return 1; }
  if (auto s = store.cancel(run_id); !s.ok()) { fmt::print(stderr, "{}\n", s.error().message); return 1; }
  fmt::print("run {} cancelled: queued tasks are dropped as workers reach them; running stages finish\n", run_id);
  return 0;
}

}  // namespace h3pipe::cli
