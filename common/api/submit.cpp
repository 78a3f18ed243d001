#include "common/api/submit.h"

#include <iterator>

#include "common/queue/keys.h"
#include "common/queue/server.h"
#include "common/state/run_commands.h"

namespace h3pipe::api {

Result<Submitted> submit_batch(queue::Redis& redis, const std::string& run_id,
                               const spec::Batch& batch,
                               const std::vector<std::vector<std::string>>& also,
                               const std::vector<std::vector<std::string>>& then) {
  Submitted out;
  // The same run id again: a job id the run already holds with another spec is refused before
  // anything is registered or enqueued.
  std::vector<std::pair<std::string, std::string>> fields;
  for (const auto& s : batch.specs) fields.emplace_back(keys::job(run_id, s.job_id()), "spec");
  auto specs = queue::hget_each(redis, fields);
  if (!specs.ok()) return specs.error();
  for (std::size_t i = 0; i < batch.specs.size() && i < specs->size(); ++i) {
    const std::optional<std::string>& held = (*specs)[i];
    if (held && *held != spec::to_json(batch.specs[i]))
      out.conflicts.emplace_back(i < batch.lines.size() ? batch.lines[i] : 0,
                                 batch.specs[i].job_id());
  }
  if (!out.conflicts.empty()) return out;
  std::vector<std::string> ids;
  for (const auto& s : batch.specs) ids.push_back(s.job_id());
  // One transaction: the run registered and the whole batch submitted, or none of it.
  std::vector<std::vector<std::string>> cmds = {{"MULTI"}};
  for (auto& c : state::create_run_commands(run_id, ids)) cmds.push_back(std::move(c));
  for (const auto& s : batch.specs)
    cmds.push_back({"XADD", keys::submit(), "*", "run", run_id, "spec", spec::to_json(s)});
  cmds.insert(cmds.end(), also.begin(), also.end());
  cmds.push_back({"EXEC"});
  const std::size_t exec = cmds.size();
  cmds.insert(cmds.end(), then.begin(), then.end());
  auto r = redis.pipeline(cmds);
  if (!r.ok()) {
    Error e = r.error();
    e.message = "submission failed, nothing enqueued: " + e.message;
    return e;
  }
  out.then.assign(std::make_move_iterator(r->begin() + static_cast<long>(exec)),
                  std::make_move_iterator(r->end()));
  // A submission a failover must not lose: acknowledged once a replica holds it.
  out.replicas_wanted = redis.address().wait_replicas;
  if (out.replicas_wanted > 0) {
    auto w = redis.wait_replicated();
    out.replicas = w.ok() ? *w : 0;
  }
  return out;
}

}  // namespace h3pipe::api
