#pragma once
// The live side of the shared dispatch policy (common/schedule/dispatch.h): every sample pool
// publishes its state to the hash h3pipe:pools (busy-until, expected stage seconds per job class,
// heartbeat), and before each claim asks schedule::should_claim with the same inputs the planner's
// simulator uses, so a slower pool leaves a task to a faster pool that would finish it sooner.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <memory>
#include <string>

#include "common/config/config.h"
#include "common/queue/redis.h"
#include "common/schedule/dispatch.h"

namespace h3pipe::worker {

class PoolBoard final {
 public:
  static Result<std::unique_ptr<PoolBoard>> create(const config::Cluster& c, const config::Pool& self,
                                                   queue::RedisAddress addr);
  // busy: expected seconds of the task just claimed (0 = idle now).  Sent without waiting for
  // Redis's reply (Redis::send).
  void publish(double busy_for_s);
  // The policy's verdict for this pool now; true on any Redis trouble (never stall the pipeline).
  bool may_claim();
  void claimed() { publish(expected_s(self_)); }
  void idle() { publish(0); }
  ~PoolBoard();

 private:
  PoolBoard(const config::Cluster& c, const config::Pool& self) : cluster_(c), self_(self) {}
  double expected_s(const config::Pool& p) const;
  double tail_s(const config::Pool& p) const;
  const config::Cluster& cluster_;
  const config::Pool& self_;
  std::unique_ptr<queue::Redis> redis_;
  schedule::Policy policy_ = schedule::Policy::kCompletionTime;
  std::chrono::steady_clock::time_point next_heartbeat_{};
  double busy_until_unix_s_ = 0;
  // Heartbeat while a long task runs (the worker thread is busy in the runtime): a separate
  // thread and connection re-publish the current state every 500 ms.
  void heartbeat_loop();
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::string last_state_;
  std::thread heartbeat_;
  queue::RedisAddress addr_;
};

}  // namespace h3pipe::worker
