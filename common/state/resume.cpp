#include "common/state/resume.h"

#include "common/queue/keys.h"
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

Result<ResumePlan> begin_resume(queue::Redis& redis, const std::string& run_id,
                                const std::vector<std::string>& streams) {
  Store store(redis);
  ResumePlan plan;
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
