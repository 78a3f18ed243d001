#pragma once
// A queued job's place in the live claim order (the Video's queue_position, #37): the encode
// stream's head as the claim order reads it (queue/claim_view.h), ranked by the workers' own
// order (dispatch::pick and charge, the C++ twin of the Lua every claim runs): 1 is the next
// task an encoder takes.
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/config/config.h"
#include "common/core/result.h"
#include "common/queue/redis.h"

namespace h3pipe::api {

// How many entries of the stream are read to rank a job (a job further back has no position).
inline constexpr int kQueueScan = 1024;

// Every waiting task's place, "RUN JOB" -> 1.. (a task held by a quota, claimed already, of a
// paused run, or beyond the first kQueueScan entries has none).  One ranking reads the stream's
// head, its pending list and the share state in one round trip and orders them all
// (O(kQueueScan^2) picks at most: ~1M steps).  Errors: I/O.
Result<std::unordered_map<std::string, long long>> rank_queue(queue::Redis& r,
                                                              const config::Cluster& c);

// rank_queue shared by every request of a replica: ranked again only when the last ranking is
// older than max_age, so that a GET of a queued video, or a list of 100, costs a lookup and at
// most one ranking per max_age, whatever the rate (a place is then at most max_age old).
class QueuePositions {
 public:
  explicit QueuePositions(std::chrono::milliseconds max_age = std::chrono::milliseconds(250))
      : max_age_(max_age) {}
  // RUN's JOB's place; nullopt: none (as above, or not yet accepted by the ingest).
  Result<std::optional<long long>> of(queue::Redis& r, const config::Cluster& c,
                                      const std::string& run, const std::string& job);

 private:
  const std::chrono::milliseconds max_age_;
  std::mutex mu_;
  std::optional<std::chrono::steady_clock::time_point> ranked_at_;
  std::unordered_map<std::string, long long> places_;
};

}  // namespace h3pipe::api
