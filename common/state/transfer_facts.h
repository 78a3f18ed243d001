#pragma once
// What the transfer receiver reads of a job before it accepts its latent from a peer (issue #35
// D4: an authenticated sender completed jobs it never sampled, with its own spec): the job's
// state, its stored spec and the host of its latest sample record.  The decision is the
// service's (services/transfer/handoff.h); this is the typed read, in the state module.
#include <string>

#include "common/core/result.h"
#include "common/queue/redis.h"

namespace h3pipe::state {

struct TransferFacts {
  bool exists = false;     // the job's hash is there
  std::string state;       // its state field (job_state.h names)
  std::string spec_json;   // the spec it was accepted with (canonical JSON)
  std::string sampled_on;  // the host of its latest STAGE_SAMPLE history record; empty if none
};

// Errors: I/O only.  Needs hget and lrange on the run's keys (the h3pipe-transfer ACL user).
Result<TransferFacts> transfer_facts(queue::Redis& redis, const std::string& run_id,
                                     const std::string& job_id);

}  // namespace h3pipe::state
