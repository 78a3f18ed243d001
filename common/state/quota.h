#pragma once
// Quotas per user (config /users/NAME/max_jobs; docs/design.md, "The claim order"): how many jobs
// a user has in flight, read at submission (h3pipe run; the API's submission path calls the same).
#include <string>
#include <vector>

#include "common/core/result.h"
#include "common/queue/redis.h"

namespace h3pipe::state {

// The user's jobs in flight: the task entries on `streams` (the stage streams: waiting or held)
// whose user field is `user`, plus the submissions on h3pipe:submit not yet ingested whose spec
// names the user.  A latent between hosts (in a sender's outbox) is not counted.
Result<long long> user_jobs_in_flight(queue::Redis& redis, const std::vector<std::string>& streams,
                                      const std::string& user);

}  // namespace h3pipe::state
