#pragma once
// `h3pipe resume RUN` and POST /v1/runs/{id}/resume: one code (resume_run.cpp).  For each job the
// furthest stage whose output exists and verifies; only what is missing is re-enqueued.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/core/result.h"
#include "common/queue/redis.h"

namespace h3pipe::api {

struct ResumeOutcome {
  bool no_jobs = false;        // the run has no jobs in this Redis (nothing done)
  std::string no_decode_pool;  // the job that stopped the resume: no decode pool in the config
  // done, in flight, re-enqueued encode, sample, decode, left to the hosts holding their latents
  int counts[6] = {0, 0, 0, 0, 0, 0};
  std::vector<std::string> notes;  // "resume JOB: its latent is on host H; run resume there"
  // "resume RUN: 3 done, 0 in flight, re-enqueued 1 encode, 0 sample, 0 decode"
  std::string summary(const std::string& run_id) const;
  nlohmann::json to_json(const std::string& run_id) const;
};

// Errors: Redis's, the run's resume lock, or a job's ("resume JOB: ...").
Result<ResumeOutcome> resume_run(queue::Redis& redis, const config::Cluster& c,
                                 const std::string& run_id);

}  // namespace h3pipe::api
