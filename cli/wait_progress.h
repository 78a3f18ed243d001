#pragma once
// `h3pipe wait`'s step progress (#37 item 3): the run's events stream (keys::run_events) read
// after the last entry seen, each job's latest `step` event kept until its stage finishes or the
// job ends.  Best effort: a read that fails shows nothing new (the wait's own status read handles
// Redis going away).
#include <map>
#include <string>
#include <vector>

#include "common/queue/redis.h"

namespace h3pipe::cli {

class StepProgress final {
 public:
  // Reads the events that arrived since the last call (at most kBatch per call).
  void poll(queue::Redis& r, const std::string& run);
  // "sample 3/8" while one job reports steps; "sample 3/8 (a), sample 5/8 (b) +2" for several;
  // "" when none does.
  std::string summary() const;
  // "JOB sample 3/8" for every step event since the last call, in order.
  std::vector<std::string> take_lines();

  static constexpr int kBatch = 1000;

 private:
  std::string after_ = "0-0";
  std::map<std::string, std::string> running_;  // job -> "sample 3/8"
  std::vector<std::string> lines_;
};

}  // namespace h3pipe::cli
