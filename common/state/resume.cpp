#include "common/state/resume.h"

#include "common/queue/keys.h"
#include "common/spec/spec.h"

namespace h3pipe::state {
namespace {

// A job whose last move ended it: a task of it still on a stream is stale.
bool terminal(const std::string& state) {
  return state == "failed" || state == "cancelled" || state == "done";
}

// The job id of an XRANGE entry ([id, [field, value, ...]]) when it is a task of run_id.
std::optional<std::string> task_job(const redisReply* entry, const std::string& run_id) {
  if (!entry || entry->type != REDIS_REPLY_ARRAY || entry->elements < 2) return std::nullopt;
  const redisReply* f = entry->element[1];
  if (!f || f->type != REDIS_REPLY_ARRAY) return std::nullopt;
  for (std::size_t k = 0; k + 1 < f->elements; k += 2) {
    if (queue::reply_str(f->element[k]) != "task") continue;
    pb::StageTask t;
    if (t.ParseFromString(queue::reply_str(f->element[k + 1])) && t.run_id() == run_id &&
        !t.job_id().empty())
      return t.job_id();
  }
  return std::nullopt;
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
    auto rng = redis.command({"XRANGE", s, "-", "+"});
    // A stream that is not there, or a key of another type, holds no task; a connection lost
    // midway would hide tasks that will run, so it is the error.
    if (!rng.ok() && queue::connection_lost(rng.error())) return rng.error();
    if (!rng.ok() || rng->get()->type != REDIS_REPLY_ARRAY) continue;
    for (std::size_t i = 0; i < rng->get()->elements; ++i)
      if (auto job = task_job(rng->get()->element[i], run_id)) out.insert(std::move(*job));
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
    rj.left_to_its_task = in_flight->count(j.job_id) > 0 && !terminal(j.state);
    plan.jobs.push_back(std::move(rj));
  }
  return plan;
}

}  // namespace h3pipe::state
