#pragma once
// The live side of the shared dispatch policy (common/dispatch): every pool of every stage
// publishes its state to the hash h3pipe:pools as a pb::Heartbeat (busy-until for what its
// claimed task commits its GPUs to, expected stage seconds, timestamp; heartbeat.h), and before
// each claim reads the board and the streams' depths into an Observation (observe_board) and asks
// the input model the planner's simulator asks (dispatch::BoardModel::should_claim: the stage's
// peers with their committed times and route tails, the backlog upstream, and for a sampler with
// encodes still upstream the encoders' arrivals and the decode side).  So a slower pool leaves a
// task to a faster one that would finish it sooner, at every stage, as the plan does.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "common/config/config.h"
#include "common/dispatch/board_model.h"
#include "common/metrics/degraded.h"
#include "common/queue/connector.h"
#include "common/state/pool_board_store.h"
#include "common/worker/decode_choice.h"
#include "common/worker/duty_window.h"
#include "common/worker/ports.h"
#include "h3pipe.pb.h"

namespace h3pipe::worker {

// The board as may_claim reads it, as the model's observation: `beats` by pool name (a pool
// without one is dead; one that is not heartbeat_live too: stamped in the reader's future, or
// too old, heartbeat.h), `streams` the (length, claimed) of the encode,
// sample and (a decoder's) its host's decode stream, `now_s` unix seconds; `in_transit_here`:
// latents on their way to a decoder's host (0 live: they are in the outboxes of the senders on
// other hosts, which the board does not read; the simulator counts them).  No decode load (set
// Observation::decode_load).
dispatch::Observation observe_board(const dispatch::BoardModel& m,
                                    const std::map<std::string, pb::Heartbeat>& beats,
                                    const std::vector<queue::StreamBacklog>& streams, double now_s,
                                    std::size_t in_transit_here = 0);
// The decision for the idle pool `self` (index into the config's pools) on the head task of
// class `job_class`, from the observation: what may_claim returns once it has read the board.
bool board_decision(const dispatch::BoardModel& m, std::size_t self, const std::string& job_class,
                    const dispatch::Observation& seen);

// The board reads and writes Redis through state::PoolBoardStore only: one store for the worker's
// thread (opened by create(), whose error it returns), one for the heartbeat thread (opened when
// the first beat is due, again after an I/O error).
class PoolBoard final {
 public:
  static Result<std::unique_ptr<PoolBoard>> create(const config::Cluster& c,
                                                   const config::Pool& self,
                                                   state::OpenPoolBoardStore open);
  // In Redis, on connections from `redis` (state::RedisPoolBoardStore::opener).
  static Result<std::unique_ptr<PoolBoard>> create(const config::Cluster& c,
                                                   const config::Pool& self,
                                                   const queue::Connector& redis);
  // busy: expected seconds of the task just claimed (0 = idle now).  Sent without waiting for
  // Redis's reply (PoolBoardStore::publish).
  void publish(double busy_for_s);
  // The policy's verdict for this pool now; true on any Redis trouble (never stall the pipeline).
  bool may_claim();
  // True when may_claim's answer is yes without reading anything (policy first_free at this
  // stage, or no peer to defer to): it cannot depend on a completion, so the worker may fold the
  // next claim into the completion's own step (state::Move::then_claim).
  bool claims_unconditionally() const;
  // A task was claimed: busy for what it commits the pool's GPUs to (its class's profile, and
  // the later stages of the pool's GPU group).
  void claimed(const pb::StageTask& t);
  void idle() { publish(0); }
  // After may_claim said no: when no task was waiting, blocks on the stage's stream until one is
  // added (XREAD BLOCK ... $) or `max` passes, so an idle pool decides when a task arrives rather
  // than at its next poll; else (a task waits for a pool that would finish it sooner) sleeps
  // `max`.  An entry added between may_claim's read and the XREAD is seen at the next ask.
  void wait_for_work(std::chrono::milliseconds max);
  // The three above as the Claimer asks them (claimer.h); the board outlives the worker.
  ClaimPolicy policy();
  // The pool's GPUs as its heartbeat reports them (the runner's GPU monitor, NVML): asked at
  // every beat; unset or nullopt: none (gpu_devices 0).
  struct GpuUse {
    unsigned devices = 0;
    double utilization = 0;  // mean, 0..1
    double memory_used_bytes = 0, memory_total_bytes = 0;
  };
  void set_gpu_use(std::function<std::optional<GpuUse>()> f);
  // Entries of h3pipe:pools that were not a heartbeat (skipped by may_claim, warned once each).
  long long bad_heartbeats() const { return bad_heartbeats_.load(); }
  ~PoolBoard();

 private:
  PoolBoard(const config::Cluster& c, const config::Pool& self);
  std::string board_class(const config::Pool& p) const;
  std::optional<std::string> head_class();  // the class of the next task on this pool's stream
  std::string stage_stream() const;         // the stream this pool claims from
  bool nothing_ready_ = false;              // may_claim's last answer: no task was waiting
  double expected_s(const std::string& cls) const;   // this pool's, for its heartbeat
  double committed_s(const std::string& cls) const;  // what a task of cls commits its GPUs for
  const config::Cluster& cluster_;
  const config::Pool& self_;
  const dispatch::BoardModel model_;  // the config's side of every decision (board_model.h)
  const std::size_t self_ix_;         // self_ in Cluster::pools
  const std::string claim_order_;     // this pool's claim order (head_class asks its pick)
  std::unique_ptr<state::PoolBoardStore> store_;  // the worker's thread
  std::atomic<long long> bad_heartbeats_{0};
  std::set<std::string> bad_pools_;  // pools whose entry was not a heartbeat at the last read
  // The last read of the board failed: claims as first-free would, warned once, counted.
  metrics::Degraded board_state_{"dispatch_board_unreadable", "pool " + self_.name};
  std::chrono::steady_clock::time_point next_heartbeat_{};
  double busy_until_unix_s_ = 0;
  // Heartbeat while a long task runs (the worker thread is busy in the runtime): a separate
  // thread and store (connection) re-publish the current state every 500 ms.
  void heartbeat_loop();
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  pb::Heartbeat last_state_;
  DutyWindow duty_;  // busy from publish(> 0) to publish(0); under mu_
  std::function<std::optional<GpuUse>()> gpu_use_;  // under mu_
  void fill_use(pb::Heartbeat& hb);                 // duty cycle and GPUs; under mu_
  std::thread heartbeat_;
  state::OpenPoolBoardStore open_;
};

}  // namespace h3pipe::worker
