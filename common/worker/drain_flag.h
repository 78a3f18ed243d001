#pragma once
// A pool drained by an operator (#38: the console's drain, POST /v1/pools/{pool}/drain) claims
// nothing, as at scale-in, until it is undrained; the task in progress finishes, and one the
// last completion claimed ahead is handed back.  The flag is the pool's field in the hash
// keys::drained_pools(), read on a connection of its own at most every kRecheck.
#include <chrono>
#include <memory>
#include <string>

#include "common/queue/connector.h"

namespace h3pipe::worker {

class DrainFlag final {
 public:
  static constexpr std::chrono::milliseconds kRecheck{250};
  DrainFlag(queue::Connector redis, std::string pool)
      : redis_(std::move(redis)), pool_(std::move(pool)) {}
  // The last answer read (false until Redis first answers, and while it does not: a flag that
  // cannot be read never stops the pipeline).
  bool drained();

 private:
  queue::Connector redis_;
  std::string pool_;
  std::unique_ptr<queue::Redis> conn_;
  bool drained_ = false;
  std::chrono::steady_clock::time_point next_{};
};

}  // namespace h3pipe::worker
