#pragma once
// A run's receipts as `h3pipe report` and GET /v1/runs/{id}/gantt both read them (one code, so
// the CLI's charts and the console's agree): those Redis keeps beside the run (state/receipts.h),
// the same on every host of the cluster, then <output_root>/RUN/*.pipeline.json for any job Redis
// holds none for (a receipt over the size bound, a run older than the copy, no Redis reachable).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/core/result.h"
#include "common/queue/redis.h"

namespace h3pipe::api {

struct RunReceipts {
  std::vector<nlohmann::json> receipts;  // Redis's in job id order, then the disk's in job id order
  std::vector<std::string> warnings;     // receipts left out, and why
  std::string redis_error;               // Redis was not read (redis null, or an I/O error)
};

// redis: null when none could be connected (then `redis_error` says why and the disk's receipts
// are all there is).  Error report.none when neither holds a receipt of the run; an error of
// artifacts::join_under for a run id that is not one path component.
Result<RunReceipts> run_receipts(queue::Redis* redis, const config::Cluster& c,
                                 const std::string& run_id, std::string redis_error = "");

}  // namespace h3pipe::api
