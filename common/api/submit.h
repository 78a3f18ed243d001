#pragma once
// The one submission path (issue #37): `h3pipe run` and h3pipe-api both validate a batch with
// spec::parse_batch and hand it here, so a job from the CLI and one from HTTP are the same job.
#include <string>
#include <utility>
#include <vector>

#include "common/core/result.h"
#include "common/queue/redis.h"
#include "common/spec/spec.h"

namespace h3pipe::api {

struct Submitted {
  // (batch line, job id) of each job the run already holds with another spec: when not empty,
  // nothing was registered or enqueued.
  std::vector<std::pair<std::size_t, std::string>> conflicts;
  int replicas_wanted = 0;         // redis.wait_replicas
  int replicas = -1;               // replicas that acknowledged the submission (-1: not asked)
  std::vector<queue::Reply> then;  // the replies of submit_batch's `then` commands
};

// A validated batch (no errors) into run `run_id`: the conflict check (one round trip), then in
// one MULTI/EXEC (all or none, one round trip) the run registered with the batch's job ids, every
// spec XADDed to h3pipe:submit and the caller's `also` commands (h3pipe-api's video record: it
// exists exactly when its job was submitted), then WAIT when redis.wait_replicas asks for it.  An
// enqueue failure is an Error whose message starts "submission failed, nothing enqueued: ".
// `then`: the caller's reads after the EXEC, in its round trip (h3pipe-api's Video object).
Result<Submitted> submit_batch(queue::Redis& redis, const std::string& run_id,
                               const spec::Batch& batch,
                               const std::vector<std::vector<std::string>>& also = {},
                               const std::vector<std::vector<std::string>>& then = {});

}  // namespace h3pipe::api
