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

// Quotas held (users.NAME.over_quota "hold"): a job accepted past max_jobs is queued, its encode
// task parked on keys::held(user) (Store::accept_job's stream), where no claim sees it; ingest
// releases the oldest as the user's jobs finish.
//
// The user's jobs admitted: its task entries on `streams` (the stage streams), waiting or held.
Result<long long> user_jobs_admitted(queue::Redis& redis, const std::vector<std::string>& streams,
                                     const std::string& user);
// Tasks held for the user (XLEN keys::held(user)).
Result<long long> held_tasks(queue::Redis& redis, const std::string& user);
// Where a job of `user` accepted now goes: the encode stream while the user is under `max_jobs`
// with nothing held, else keys::held(user) (behind the ones held before it).
Result<std::string> accept_stream(queue::Redis& redis, const std::vector<std::string>& streams,
                                  const std::string& user, long long max_jobs);
// Moves the user's oldest held tasks to the encode stream while it is under `max_jobs` (each in
// one script: the same entry fields added to the encode stream, removed from the held stream,
// the job's task:encode updated).  Returns how many moved.  Two callers at once (two encoders'
// ingest) may each release one before seeing the other's: the quota is passed by at most one
// job per extra encoder until those finish.
Result<long long> release_held(queue::Redis& redis, const std::vector<std::string>& streams,
                               const std::string& user, long long max_jobs);

}  // namespace h3pipe::state
