#pragma once
// The Redis commands of a move's operations (move_ops.h), for Store::apply's script: the one place
// that turns what a move does into keys and argv.  Internal to common/state.
#include <string>

#include "common/queue/queue.h"
#include "common/state/move_ops.h"

namespace h3pipe::state {

// The commands of `ops`, in order, for job `job_id` of run `run_id`.
queue::Commands op_commands(const std::string& run_id, const std::string& job_id, const Ops& ops);

}  // namespace h3pipe::state
