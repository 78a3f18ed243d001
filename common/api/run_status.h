#pragma once
// A run's status as `h3pipe status --json` prints it and GET /v1/runs, /v1/runs/{id} answer it:
// one code for both (run_status.cpp).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/api/fleet.h"
#include "common/config/config.h"
#include "common/core/result.h"
#include "common/queue/redis.h"
#include "common/state/state.h"

namespace h3pipe::api {

// One line of `status --json` without a run id (and of GET /v1/runs): run_id, total, done,
// failed, cancelled_jobs, finished, refused_submissions.
nlohmann::json run_summary_json(const std::string& run_id, const state::RunStatus& s);

// `status --json RUN`: counts per state and stage, the jobs (mp4 and receipt paths of the done
// ones), refused submissions, the pools' heartbeats, stalled stages and `degraded`.  Errors:
// run.unknown for a run this Redis does not hold, else Redis's.
Result<nlohmann::json> run_status_json(queue::Redis& redis, const config::Cluster& c,
                                       const std::string& run_id,
                                       const std::vector<PoolLife>& lives,
                                       const std::string& degraded);

}  // namespace h3pipe::api
