#pragma once
// Pause, unpause and move first (issue #39 item 4; docs/design.md, "The claim order"): one code
// for `h3pipe pause|unpause RUN`, `h3pipe move JOB --run RUN --first` and the API's
// POST /v1/runs/{id}/pause|unpause, /v1/runs/{id}/jobs/{job}/move and /v1/videos/{id}/move
// (control_routes.cpp).  The claims read the paused set and the moved-first set
// (common/state/pause.h); nothing here touches a running task.
#include <string>

#include "common/core/result.h"
#include "common/queue/redis.h"

namespace h3pipe::api {

enum class ControlOutcome {
  kDone,       // paused, unpaused or moved (again: the same answer, idempotent)
  kNoSuchRun,  // the run has nothing in this Redis
  kNoSuchJob,  // the run has no job of that id
};

// Adds the run to the paused set (pause) or removes it; kNoSuchRun when the run is unknown.
Result<ControlOutcome> set_run_paused(queue::Redis& redis, const std::string& run_id, bool pause);
// Whether the run is paused now (the API answers it).
Result<bool> run_is_paused(queue::Redis& redis, const std::string& run_id);
// The job's waiting task is taken before every other, at this stage and the ones after (the
// latest move first); at_ms: the move's time.  kNoSuchJob when the run has no such job.
Result<ControlOutcome> move_job_first(queue::Redis& redis, const std::string& run_id,
                                      const std::string& job_id, long long at_ms);

}  // namespace h3pipe::api
