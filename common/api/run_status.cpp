#include "common/api/run_status.h"

#include "common/state/paths.h"

namespace h3pipe::api {

nlohmann::json run_summary_json(const std::string& run_id, const state::RunStatus& s) {
  return {{"run_id", run_id},
          {"total", s.total},
          {"done", s.done},
          {"failed", s.failed},
          {"cancelled_jobs", s.cancelled_jobs},
          {"finished", s.finished()},
          {"refused_submissions", s.refused}};
}

Result<nlohmann::json> run_status_json(queue::Redis& redis, const config::Cluster& c,
                                       const std::string& run_id,
                                       const std::vector<PoolLife>& lives,
                                       const std::string& degraded) {
  state::Store store(redis);
  auto s = store.run_status(run_id);
  if (!s.ok()) return s.error();
  auto jobs = store.jobs(run_id);
  if (!jobs.ok()) return jobs.error();
  nlohmann::json j = {{"run_id", run_id},
                      {"created_unix_ms", s->created_ms},
                      {"expected", s->expected},
                      {"total", s->total},
                      {"done", s->done},
                      {"failed", s->failed},
                      {"cancelled", s->cancelled},
                      {"cancelled_jobs", s->cancelled_jobs},
                      {"finished", s->finished()},
                      {"stages", s->stage_jobs()},
                      {"states", s->in_state},
                      {"illegal_transitions", s->illegal},
                      {"refused_submissions", s->refused},
                      {"refused", nlohmann::json::array()},
                      {"degraded", degraded},
                      {"pools", pool_lives_json(lives)},
                      {"stalled", stalled_stages(*s, lives)}};
  // Submissions refused beside the run: shown, never part of its verdict.
  auto refused = store.refused(run_id);
  if (!refused.ok()) return refused.error();
  for (const auto& rf : *refused)
    j["refused"].push_back({{"submission", rf.submission},
                            {"job_id", rf.job_id},
                            {"reason", rf.reason},
                            {"at_unix_ms", rf.at_ms}});
  j["jobs"] = nlohmann::json::array();
  for (const auto& job : *jobs) {
    nlohmann::json jj = {{"job_id", job.job_id}, {"state", job.state}};
    if (!job.error.empty()) jj["error"] = job.error;
    for (const auto& [k, v] : job.fields)
      if (k.rfind("attempts:", 0) == 0 || k.rfind("exec:", 0) == 0 || k.rfind("done:", 0) == 0)
        jj[k] = std::stoll(v);
    if (job.state == "done") {
      if (auto p = paths::mp4(c, run_id, job.job_id); p.ok()) jj["mp4"] = p->string();
      if (auto p = paths::receipt(c, run_id, job.job_id); p.ok()) jj["receipt"] = p->string();
    }
    j["jobs"].push_back(jj);
  }
  return j;
}

}  // namespace h3pipe::api
