#pragma once
// Paused runs (h3pipe pause / unpause; docs/design.md, "The claim order"): a run in the set
// keys::paused_runs() has none of its waiting tasks claimed, at any stage; its running tasks
// finish, and what they enqueue waits too.  Unpausing lets the claims take them again.
#include <string>

#include "common/core/result.h"
#include "common/queue/redis.h"

namespace h3pipe::state {

Status pause_run(queue::Redis& redis, const std::string& run_id);
Status unpause_run(queue::Redis& redis, const std::string& run_id);
Result<bool> run_paused(queue::Redis& redis, const std::string& run_id);
// h3pipe move JOB --run RUN --first: the job's waiting task is taken before every other, at this
// stage and the ones after (keys::moved_first(), scored by the move's time: the latest move
// first).  at_ms: the move's time.
Status move_first(queue::Redis& redis, const std::string& run_id, const std::string& job_id,
                  long long at_ms);

}  // namespace h3pipe::state
