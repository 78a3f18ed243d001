// run / wait / status / cancel: submission through the documented Redis stream, and progress.
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "cli/cli.h"
#include "cli/wait_progress.h"
#include "common/api/run_control.h"
#include "common/api/run_status.h"
#include "common/api/submit.h"
#include "common/core/bounded_file.h"
#include "common/core/json_parse.h"
#include "common/queue/keys.h"
#include "common/queue/server.h"
#include "common/schedule/profile_check.h"
#include "common/spec/spec.h"
#include "common/state/paths.h"
#include "common/state/quota.h"
#include "common/state/state.h"
#include "common/supervisor/supervisor.h"
#include "common/worker/gpu_lease.h"
#include "common/worker/worker.h"

namespace h3pipe::cli {
using Clock = std::chrono::steady_clock;
namespace {

// A batch file is read only when it is a regular file no larger than a batch of the config's
// limits can be (max_batch lines of at most a prompt, a negative prompt and 16 KiB of the rest):
// `h3pipe run /dev/zero` or a multi-GB file is refused before a byte is read (issue #14).
Result<std::string> read_batch_file(const std::string& path, const config::Limits& limits) {
  const std::uint64_t cap =
      static_cast<std::uint64_t>(limits.max_batch) * (2ull * limits.max_prompt_bytes + 16 * 1024);
  // One open, then fstat on it: a FIFO swapped in after a check cannot hang the read (#22).
  return read_bounded_file(
      path, {"a JSON lines batch file", cap, errc::batch::kOpen, errc::batch::kNotAFile,
             errc::batch::kTooLarge, "limits.max_batch and limits.max_prompt_bytes"});
}

}  // namespace

namespace {

// The operator's login name (run --user's default), or "" when it is no user name.
std::string login_name() {
  std::string name;
  if (const char* u = std::getenv("USER"); u && *u) name = u;
  if (name.empty())
    if (const passwd* pw = getpwuid(geteuid()); pw && pw->pw_name) name = pw->pw_name;
  return config::valid_user_name(name) ? name : "";
}

// Quotas (config /users/NAME/max_jobs): a batch that would take a user past its quota is refused
// whole, naming the user, its jobs in flight and the field; a user whose quota holds
// (over_quota "hold") is accepted, ingest holds its jobs past the quota.  0 to go on, else the
// exit code.
int check_quotas(queue::Redis& redis, const config::Cluster& c, const spec::Batch& batch) {
  std::map<std::string, long long> wanted;
  for (const auto& s : batch.specs) ++wanted[s.user()];
  const std::vector<std::string> streams = worker::stage_streams(c);
  for (const auto& [user, n] : wanted) {
    auto u = c.users.find(user);
    if (u == c.users.end() || u->second.max_jobs <= 0 || u->second.over_quota == "hold") continue;
    auto have = state::user_jobs_in_flight(redis, streams, user);
    if (!have.ok()) return fail(have.error());
    if (*have + n > u->second.max_jobs) {
      fmt::print(stderr,
                 "quota: user {} has {} job(s) in flight; {} more would pass users.{}.max_jobs "
                 "({}); nothing was submitted\n",
                 user, *have, n, user, u->second.max_jobs);
      return 2;
    }
  }
  return 0;
}

}  // namespace

int cmd_run(const Global& g, const std::string& batch_file, bool background,
            const std::string& run_arg, const RunShare& share) {
  auto c = load_stack_cluster(g);
  if (!c.ok()) {
    fmt::print(stderr, "{}\n", c.error().message);
    return 2;
  }
  auto text = read_batch_file(batch_file, c->limits);
  if (!text.ok()) {
    fmt::print(stderr, "{}\n", text.error().message);
    return 2;
  }
  auto batch = spec::parse_batch(*text, *c);
  if (!batch.errors.empty()) {
    for (const auto& e : batch.errors)
      fmt::print(stderr, "{}:{}: {}\n", batch_file, e.line, e.error.to_string());
    fmt::print(stderr, "{} error(s); nothing was submitted\n", batch.errors.size());
    return 2;
  }
  // The run's user and priority (docs/design.md, "The claim order"): every job a batch line
  // leaves without its own.
  if (share.priority &&
      (*share.priority < -spec::kMaxPriority || *share.priority > spec::kMaxPriority)) {
    fmt::print(stderr, "--priority: {} is out of range: expected an integer from {} to {}\n",
               *share.priority, -spec::kMaxPriority, spec::kMaxPriority);
    return 2;
  }
  const std::string user = share.user.empty() ? login_name() : share.user;
  if (!user.empty() && !config::valid_user_name(user)) {
    fmt::print(stderr, "--user: \"{}\" is not a user name: expected [A-Za-z0-9._@-]{{1,64}}\n",
               user);
    return 2;
  }
  for (auto& s : batch.specs) {
    if (share.priority && s.priority() == 0) s.set_priority(*share.priority);
    if (s.user().empty()) s.set_user(user);
  }
  std::string run_id = run_arg.empty() ? state::new_run_id() : run_arg;
  if (auto s = artifacts::validate_id("--run-id", run_id); !s.ok()) {
    fmt::print(stderr, "{}\n", s.error().message);
    return 2;
  }
  auto redis = connect(g, *c);
  if (!redis.ok()) return fail(redis.error());
  if (int rc = check_quotas(**redis, *c, batch); rc != 0) return rc;
  // The same --run-id again: a job id the run already holds with another spec is refused
  // (api::submit_batch, the one path `run` and h3pipe-api share), naming FILE:LINE, before
  // anything is registered or enqueued (the ingest would refuse it too, beside the run; the
  // submitter hears it from the exit code).
  auto sub = api::submit_batch(**redis, run_id, batch);
  if (!sub.ok()) return fail(sub.error());
  if (!sub->conflicts.empty()) {
    for (const auto& [line, job] : sub->conflicts)
      fmt::print(stderr, "{}:{}: jobId \"{}\" already exists in run {} with another spec\n",
                 batch_file, line, job, run_id);
    const Error e =
        make_error(errc::batch::kConflict, "{} job(s) conflict with run {}; nothing was submitted",
                   sub->conflicts.size(), run_id);
    return fail(e);
  }
  // Sim pools that would run the batch's classes in 0 s: said, not refused (issue #34 P11).
  std::set<std::string> classes;
  for (const auto& s : batch.specs) classes.insert(spec::job_class(s, *c));
  const std::string in_use = config_file_in_use(g);
  if (const std::string w = schedule::zero_profile_warning(
          *c, classes, in_use.empty() ? "(the embedded default)" : in_use);
      !w.empty())
    fmt::print(stderr, "warning: {}\n", w);
  // A submission a failover must not lose: acknowledged once a replica holds it
  // (redis.wait_replicas).
  if (const int want = sub->replicas_wanted; want > 0) {
    const int got = sub->replicas;
    if (got < want)
      fmt::print(stderr,
                 "warning: the submission reached {} of {} replica(s) within {} ms; a failover now "
                 "could lose "
                 "it (run `h3pipe run` again with --run-id {}: the same jobs are one job each)\n",
                 got, want, (*redis)->address().wait_timeout_ms, run_id);
    else
      fmt::print(stderr, "replicated to {} replica(s)\n", got);
  }
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
  auto c = load_stack_cluster(g);
  if (!c.ok()) {
    fmt::print(stderr, "{}\n", c.error().message);
    return 2;
  }
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
      // A refused login is not an outage: no retry helps, say what to fix now.
      if (!r.ok() && is_auth_refusal(r.error())) {
        fmt::print(stderr, "wait: {}\n", r.error().message);
        return false;
      }
      // A Redis that cannot persist answers PING with MISCONF: it answers, and reads work, so the
      // wait goes on and says why nothing moves (storage_degraded below).
      const Status ping = r.ok() ? queue::ping(**r) : Status(r.error());
      const bool answers = ping.ok() || (ping.error().code == errc::redis::kError &&
                                         ping.error().message.rfind("MISCONF", 0) == 0);
      if (r.ok() && answers) {
        redis = std::move(*r);
        if (warned) fmt::print(stderr, "wait: Redis is back\n");
        return true;
      }
      why = r.ok() ? "PING failed: " + ping.error().message : r.error().message;
      if (!warned && redis)
        fmt::print(stderr, "\nwait: Redis does not answer ({}); retrying for {} s\n", why, grace_s);
      warned = warned || static_cast<bool>(redis);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    fmt::print(stderr, "wait: Redis unreachable: {}\n", why);
    return false;
  };
  if (!reconnect()) return kExitUnreachable;
  bool tty = ::isatty(1);
  std::map<std::string, long long> last;
  StepProgress steps;  // the sampler's step k/n from the run's events (#37)
  state::RunStatus s;
  std::string degraded;  // said when it changes
  auto last_storage_check = Clock::time_point{};
  for (;;) {
    if (Clock::now() - last_storage_check > std::chrono::seconds(1)) {
      last_storage_check = Clock::now();
      const std::string d = storage_degraded(*redis, *c);
      if (d != degraded) {
        fmt::print(stderr, "\nwait: {}\n", d.empty() ? "no longer degraded" : "degraded: " + d);
        degraded = d;
      }
    }
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
    steps.poll(*redis, run_id);
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
      if (auto p = steps.summary(); !p.empty()) out += "  " + p;
      fmt::print("{}\x1b[K", out);
      std::fflush(stdout);
    } else if (now != last) {
      for (const auto& [k, v] : now)
        if (v != last[k]) fmt::print("{} {} {}/{}\n", run_id, k, v, total);
      std::fflush(stdout);
    }
    if (!tty) {
      for (const auto& l : steps.take_lines()) fmt::print("{} {}\n", run_id, l);
      std::fflush(stdout);
    }
    last = now;
    if (s.finished()) break;
    if (timeout_s > 0 && std::chrono::duration<double>(Clock::now() - start).count() > timeout_s) {
      fmt::print(stderr, "\nwait: timed out after {} s{}\n", timeout_s,
                 degraded.empty() ? "" : " (degraded: " + degraded + ")");
      return kExitTimedOut;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (tty) fmt::print("\n");
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  fmt::print("run {}: {} done, {} failed, {} cancelled of {} ({:.1f} s)\n", run_id, s.done,
             s.failed, s.cancelled_jobs, s.total, secs);
  if (s.refused)
    fmt::print(
        "  {} submission(s) refused beside the run (`h3pipe status {}`); not part of the verdict\n",
        s.refused, run_id);
  if (s.failed || s.cancelled_jobs) {
    auto jobs = state::Store(*redis).jobs(run_id);
    if (jobs.ok())
      for (const auto& j : *jobs)
        if (j.state == "failed" || j.state == "cancelled")
          fmt::print("  {} {}: {}\n", j.job_id, j.state, j.error);
  }
  return s.failed || s.cancelled_jobs ? 1 : 0;
}

namespace {

// h3pipe-api's URL on this host (docs/api.md): the running stack's run/api-<host>.json; "" when
// no API runs here.
std::string local_api_url(const config::Cluster& c) {
  const auto st = supervisor::running(c);
  if (!st) return "";
  auto text = read_bounded_file(c.state_dir / "run" / ("api-" + st->value("host", "") + ".json"),
                                {"a run file", kMaxSmallFileBytes});
  if (!text.ok()) return "";
  std::string why;
  const auto j = json_reader::parse_limited(*text, {kMaxSmallFileBytes}, &why);
  return j && j->is_object() ? j->value("api_url", std::string()) : std::string();
}

}  // namespace

int cmd_status(const Global& g, const std::string& run_id, bool json) {
  auto c = load_stack_cluster(g);
  if (!c.ok()) {
    fmt::print(stderr, "{}\n", c.error().message);
    return 2;
  }
  auto redis = connect(g, *c);
  if (!redis.ok()) return fail(redis.error());
  state::Store store(**redis);
  // Each pool's heartbeat by Redis's clock (fleet_status.cpp): dead pools and stalled stages.
  std::vector<PoolLife> lives;
  if (auto l = pool_lives(**redis, *c); l.ok())
    lives = std::move(*l);
  else
    fmt::print(stderr, "status: cannot read the pools' heartbeats: {}\n", l.error().message);
  const std::string api_url = local_api_url(*c);
  if (run_id.empty()) {
    const std::string degraded = storage_degraded(**redis, *c);
    if (!degraded.empty()) fmt::print(json ? stderr : stdout, "degraded: {}\n", degraded);
    auto runs = store.runs(50);
    if (!runs.ok()) return fail(runs.error());
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : *runs) {
      auto s = store.run_status(r);
      if (!s.ok()) continue;
      out.push_back(api::run_summary_json(r, *s));
      out.back()["api_url"] = api_url;  // each run's, so the list stays a list
      const auto stalled = stalled_stages(*s, lives);
      if (!json)
        fmt::print("{}  {}/{} done  {} failed  {} cancelled{}{}\n", r, s->done, s->total, s->failed,
                   s->cancelled_jobs,
                   s->finished()       ? ""
                   : !degraded.empty() ? "  (stalled: degraded)"
                   : !stalled.empty()  ? "  (" + stalled.front() + ")"
                                       : "  (running)",
                   s->refused ? fmt::format("  {} refused", s->refused) : "");
    }
    if (json) {
      fmt::print("{}\n", out.dump(2));
      return 0;
    }
    if (!lives.empty()) print_pool_lives(*c, lives);
    if (!api_url.empty()) fmt::print("api  {}\n", api_url);
    return 0;
  }
  const std::string degraded = storage_degraded(**redis, *c);
  // The JSON is GET /v1/runs/{id}'s (common/api/run_status.h); the text is read from it.
  auto built = api::run_status_json(**redis, *c, run_id, lives, degraded);
  if (!built.ok()) return fail(built.error());
  nlohmann::json j = std::move(*built);
  j["api_url"] = api_url;  // "" when no h3pipe-api runs on this host
  auto s = store.run_status(run_id);
  if (!s.ok()) return fail(s.error());
  auto jobs = store.jobs(run_id);
  if (!jobs.ok()) return fail(jobs.error());
  auto refused = store.refused(run_id);
  if (!refused.ok()) return fail(refused.error());
  if (json) {
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  const auto stalled = stalled_stages(*s, lives);
  fmt::print("run {}: {} done, {} failed, {} cancelled of {}{}{}\n", run_id, s->done, s->failed,
             s->cancelled_jobs, s->total, s->cancelled ? " (cancelled)" : "",
             s->finished()                         ? ""
             : degraded.empty() && stalled.empty() ? " (running)"
                                                   : " (stalled)");
  if (!degraded.empty()) fmt::print("degraded: {}\n", degraded);
  for (const auto& st : stalled) fmt::print("{}\n", st);
  for (const auto& job : *jobs)
    fmt::print("  {:<24} {:<10} {}\n", job.job_id, job.state, job.error);
  if (s->refused)
    fmt::print(
        "{} submission(s) refused beside the run (not jobs; the run's verdict ignores them):\n",
        s->refused);
  for (const auto& rf : *refused)
    fmt::print("  refused {:<16} submission {}: {}\n", rf.job_id, rf.submission, rf.reason);
  if (!lives.empty()) print_pool_lives(*c, lives);
  if (!api_url.empty()) fmt::print("api  {}\n", api_url);
  return 0;
}

int cmd_cancel(const Global& g, const std::string& run_id) {
  return with_stack_redis(g, [&](queue::Redis& redis) -> int {
    state::Store store(redis);
    if (auto s = store.run_status(run_id); !s.ok()) return fail(s.error());
    if (auto s = store.cancel(run_id); !s.ok()) return fail(s.error());
    fmt::print(
        "run {} cancelled: queued tasks are dropped as workers reach them; running stages finish\n",
        run_id);
    return 0;
  });
}

int cmd_move_first(const Global& g, const std::string& run_id, const std::string& job_id) {
  return with_stack_redis(g, [&](queue::Redis& redis) -> int {
    auto out = api::move_job_first(redis, run_id, job_id, state::now_ms());
    if (!out.ok()) return fail(out.error());
    if (*out == api::ControlOutcome::kNoSuchJob) {
      fmt::print(stderr, "no job {} in run {} in this Redis\n", job_id, run_id);
      return kExitNoSuchRun;
    }
    fmt::print("job {} of run {} moved first: its waiting task is taken before every other\n",
               job_id, run_id);
    return 0;
  });
}

int cmd_pause(const Global& g, const std::string& run_id, bool pause) {
  return with_stack_redis(g, [&](queue::Redis& redis) -> int {
    auto out = api::set_run_paused(redis, run_id, pause);
    if (!out.ok()) return fail(out.error());
    if (*out == api::ControlOutcome::kNoSuchRun) {
      fmt::print(stderr, "no run {} in this Redis\n", run_id);
      return kExitNoSuchRun;
    }
    if (pause)
      fmt::print("run {} paused: none of its waiting tasks is claimed; running ones finish\n",
                 run_id);
    else
      fmt::print("run {} unpaused: its waiting tasks are claimed again\n", run_id);
    return 0;
  });
}

}  // namespace h3pipe::cli
