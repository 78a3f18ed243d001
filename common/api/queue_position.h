#pragma once
// A queued job's place in the live claim order (the Video's queue_position, #37): the encode
// stream's head as the claim order reads it (queue/claim_view.h), ranked by the workers' own
// order (dispatch::pick and charge, the C++ twin of the Lua every claim runs): 1 is the next
// task an encoder takes.
#include <optional>
#include <string>

#include "common/config/config.h"
#include "common/core/result.h"
#include "common/queue/redis.h"

namespace h3pipe::api {

// How many entries of the stream are read to rank a job (a job further back has no position).
inline constexpr int kQueueScan = 1024;

// nullopt: the job's task is not waiting on the encode stream (not yet accepted, held by a quota,
// claimed already, its run paused) or lies beyond the first kQueueScan entries.  Errors: I/O.
Result<std::optional<long long>> queue_position(queue::Redis& r, const config::Cluster& c,
                                                const std::string& run, const std::string& job);

}  // namespace h3pipe::api
