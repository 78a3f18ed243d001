#pragma once
// The live side of the shared dispatch policy (common/schedule/dispatch.h): every sample pool
// publishes its state to the hash h3pipe:pools as a pb::Heartbeat (busy-until, expected stage
// seconds, timestamp; common/worker/heartbeat.h), and before each claim asks schedule::should_claim with the same inputs the planner's
// simulator uses, so a slower pool leaves a task to a faster pool that would finish it sooner.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <memory>
#include <set>
#include <string>

#include "common/config/config.h"
#include "common/queue/redis.h"
#include "common/schedule/dispatch.h"
#include "h3pipe.pb.h"

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
  // Entries of h3pipe:pools that were not a heartbeat (skipped by may_claim, warned once each).
  long long bad_heartbeats() const { return bad_heartbeats_.load(); }
  ~PoolBoard();

 private:
  PoolBoard(const config::Cluster& c, const config::Pool& self) : cluster_(c), self_(self) {}
  double expected_s(const config::Pool& p) const;
  double tail_s(const config::Pool& p) const;
  const config::Cluster& cluster_;
  const config::Pool& self_;
  std::unique_ptr<queue::Redis> redis_;
  std::atomic<long long> bad_heartbeats_{0};
  std::set<std::string> bad_pools_;  // pools whose entry was not a heartbeat at the last read
  bool board_unreadable_ = false;    // the last read of the board failed (warned once)
  schedule::Policy policy_ = schedule::Policy::kCompletionTime;
  std::chrono::steady_clock::time_point next_heartbeat_{};
  double busy_until_unix_s_ = 0;
  // Heartbeat while a long task runs (the worker thread is busy in the runtime): a separate
  // thread and connection re-publish the current state every 500 ms.
  void heartbeat_loop();
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  pb::Heartbeat last_state_;
  std::thread heartbeat_;
  queue::RedisAddress addr_;
};

}  // namespace h3pipe::worker
