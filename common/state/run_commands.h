#pragma once
// The commands that register a run and the job ids about to be submitted to it (what
// state::Store::create_run sends), for a caller that sends them inside a transaction of its own:
// the one submission path (api/submit.h) registers the run and enqueues its jobs in one
// MULTI/EXEC.  A header of its own so that callers need not include state.h.
#include <string>
#include <vector>

#include "common/queue/queue.h"

namespace h3pipe::state {

// HSETNX the run's created_ms, ZADD NX it to the runs, SADD the job ids it expects (none: no
// SADD); sent again they change nothing.
queue::Commands create_run_commands(const std::string& run_id,
                                    const std::vector<std::string>& job_ids);

}  // namespace h3pipe::state
