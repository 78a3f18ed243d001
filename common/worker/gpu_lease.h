#pragma once
// GPU groups live: the pools joined by shares_gpus_with (transitively; an encoder on a sampler's
// GPUs, a serial box running every stage on the same cards) take turns on their GPUs through one
// lease in Redis, h3pipe:gpu:<group>, so two of them never run at once.  That is the planner's
// model (simulate.h: "one GPU group runs one task at a time"); without it an encoder and a
// sampler on the same cards ran together live.
//
// The lease is SET NX PX with a token of the holder's own; a thread renews it every ttl/3 while
// held, and only the holder's token can renew or release it (Lua: state::GpuLeaseStore), so a
// holder that dies frees the GPUs after ttl at the latest.
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/config/config.h"
#include "common/queue/connector.h"
#include "common/state/gpu_lease_store.h"
#include "common/worker/ports.h"

namespace h3pipe::worker {

// The GPU group of a pool: the name of the first pool (config order) of its shares_gpus_with
// component, or "" for a pool that shares its GPUs with nobody.
std::string gpu_group(const config::Cluster& c, const config::Pool& p);
// A pool of `stage` in p's GPU group (nullptr if none).
const config::Pool* group_pool(const config::Cluster& c, const config::Pool& p,
                               config::StageKind stage);
// The stream of the sample tasks a GPU group keeps for its own sampler.
std::string group_sample_stream(const std::string& group);

// What a pool's GPU group means for its loop (the planner's model, simulate.h): the group keeps
// an encoded job through its sampling, so its encoder sends the sample task to the group's own
// stream, which its sampler takes first, and each stage hands the GPUs to the next one of the job.
struct GroupRole {
  std::string group;       // gpu_group(): "" for a pool with GPUs of its own (no other field set)
  int rank = 0;            // this pool's stage in the group: encode 1, sample 2, decode 3
  int then_rank = 0;       // a completed task's job goes on to this stage of the group (0: leaves)
  std::string to_stream;   // encode: where its sample tasks go ("" = the shared sample stream)
  std::string own_stream;  // sample: the group's own sample stream, taken first ("" = none)
};
GroupRole group_role(const config::Cluster& c, const config::Pool& p);

class GpuLease final : public GpuGate {
 public:
  // holder: what the lease says (the pool's name and a random suffix).  rank: the pool's stage
  // (encode 1, sample 2, decode 3): while a later stage's pool waits for the lease, an earlier
  // one does not take it.  Connections (the worker's thread's, the renewer's) from `connector`.
  GpuLease(queue::Connector connector, const std::string& group, const std::string& holder,
           int rank, int ttl_ms);
  ~GpuLease();
  // Takes the lease if it is free (or already ours): false while another pool holds it.
  Result<bool> acquire() override;
  // then_rank > 0: the job just finished here goes on to that stage in this group (an encode to
  // its sampling), which takes the GPUs next.
  void release(int then_rank) override;
  void release() { release(0); }
  bool held() const { return held_.load(); }
  const std::string& key() const { return store_.key(); }

 private:
  void renew_loop();
  queue::Connector connector_;
  const state::GpuLeaseStore store_;
  int ttl_ms_;
  std::unique_ptr<queue::Redis> redis_;  // acquire/release: the worker's thread
  std::atomic<bool> held_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread renewer_;
};

}  // namespace h3pipe::worker
