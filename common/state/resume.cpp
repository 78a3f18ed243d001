#include "common/state/resume.h"

#include <random>
#include <thread>

#include "common/queue/keys.h"
#include "common/queue/reply.h"
#include "common/spec/spec.h"

namespace h3pipe::state {
namespace {

// The job id of a stream entry when it is a task of run_id.
std::optional<std::string> task_job(const queue::Entry& e, const std::string& run_id) {
  pb::StageTask t;
  if (e.payload.empty() || !t.ParseFromString(e.payload) || t.run_id() != run_id ||
      t.job_id().empty())
    return std::nullopt;
  return t.job_id();
}

}  // namespace

Status uncancel(queue::Redis& redis, const std::string& run_id) {
  auto r = redis.command({"HSET", keys::run(run_id), "cancelled", "0"});
  if (!r.ok()) return r.error();
  return {};
}

Result<std::set<std::string>> outstanding_jobs(queue::Redis& redis, const std::string& run_id,
                                               const std::vector<std::string>& streams) {
  std::set<std::string> out;
  for (const auto& s : streams) {
    auto rng = queue::read_range(redis, s, "-", "+");
    // A stream that is not there, or a key of another type, holds no task; a connection lost
    // midway would hide tasks that will run, so it is the error.
    if (!rng.ok() && queue::connection_lost(rng.error())) return rng.error();
    if (!rng.ok()) continue;
    for (const auto& e : *rng)
      if (auto job = task_job(e, run_id)) out.insert(std::move(*job));
  }
  return out;
}

std::string ResumeLock::key(const std::string& run_id) {
  return keys::run(run_id) + ":resume-lock";
}

Result<ResumeLock> ResumeLock::acquire(queue::Redis& redis, const std::string& run_id,
                                       std::chrono::milliseconds wait) {
  std::random_device rd;
  const std::string token = fmt::format("{:08x}{:08x}{:08x}{:08x}", rd(), rd(), rd(), rd());
  const std::string k = key(run_id);
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    auto r = redis.command({"SET", k, token, "NX", "PX", std::to_string(kTtl.count())});
    if (!r.ok()) return r.error();
    if (r->get()->type != REDIS_REPLY_NIL) return ResumeLock(redis, k, token);
    if (std::chrono::steady_clock::now() >= deadline)
      return make_error(errc::state::kRefused,
                        "run {}: another resume of this run holds its lock ({}) and did not "
                        "finish within {} s; try again once it has (a resume that was killed "
                        "leaves the lock to expire within {} s)",
                        run_id, k, wait.count() / 1000, kTtl.count() / 1000);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

Status ResumeLock::refresh() {
  const auto now = std::chrono::steady_clock::now();
  if (now - extended_ < kTtl / 3) return {};
  auto held = redis_->command({"GET", key_});
  if (!held.ok()) return held.error();
  if (queue::reply_str(held->get()) != token_)
    return make_error(errc::state::kRefused,
                      "the resume lock {} expired and is no longer this resume's; stopped so "
                      "that two resumes never enqueue one stage twice",
                      key_);
  auto ext = redis_->command({"PEXPIRE", key_, std::to_string(kTtl.count())});
  if (!ext.ok()) return ext.error();
  extended_ = now;
  return {};
}

ResumeLock::ResumeLock(ResumeLock&& o) noexcept
    : redis_(o.redis_),
      key_(std::move(o.key_)),
      token_(std::move(o.token_)),
      extended_(o.extended_) {
  o.token_.clear();
}

ResumeLock::~ResumeLock() {
  if (token_.empty()) return;
  // Deleted only while it is still this holder's (GET then DEL: the lock is refreshed well
  // within its TTL, so it cannot expire and pass to another resume in between).
  auto held = redis_->command({"GET", key_});
  if (held.ok() && queue::reply_str(held->get()) == token_) (void)redis_->command({"DEL", key_});
}

Result<ResumePlan> begin_resume(queue::Redis& redis, const std::string& run_id,
                                const std::vector<std::string>& streams) {
  Store store(redis);
  ResumePlan plan;
  auto lock = ResumeLock::acquire(redis, run_id);
  if (!lock.ok()) return lock.error();
  plan.lock.emplace(std::move(*lock));
  auto rs = store.run_status(run_id);
  if (!rs.ok()) return rs.error();
  plan.run = std::move(*rs);
  // The cancel flag goes first: a worker that reaches one of this run's tasks from now on runs it.
  H3_TRY(uncancel(redis, run_id));
  auto jobs = store.jobs(run_id);
  if (!jobs.ok()) return jobs.error();
  if (jobs->empty()) return plan;
  auto in_flight = outstanding_jobs(redis, run_id, streams);
  if (!in_flight.ok()) return in_flight.error();
  plan.jobs.reserve(jobs->size());
  for (auto& j : *jobs) {
    ResumeJob rj;
    rj.job_id = j.job_id;
    rj.state = j.state;
    if (auto it = j.fields.find("spec"); it != j.fields.end())
      if (auto spec = spec::parse_json(it->second); spec.ok()) rj.spec = std::move(*spec);
    // A terminal job's task was acked with its last move: one still there is stale.
    const auto state = parse_job_state(j.state);
    rj.left_to_its_task = in_flight->count(j.job_id) > 0 && !(state && terminal(*state));
    plan.jobs.push_back(std::move(rj));
  }
  return plan;
}

}  // namespace h3pipe::state
