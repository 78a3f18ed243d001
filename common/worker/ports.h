#pragma once
// The stage worker's loop (worker.h) talks to the world through these ports and the engine's
// (engine.h: Ledger, Files): where its tasks come from (TaskSource) and the GPUs it may have to
// take turns on (GpuGate).  Production implements them with Redis (redis_tasks.h: one object is
// both the TaskSource and the Ledger, since a claim and the moves after it share the entry's
// stream) and with the GPU group's lease (gpu_lease.h); unit tests with memory
// (tests/support/fake_stage_ports.h).
#include <functional>
#include <optional>
#include <string>

#include "common/core/result.h"
#include "common/state/state.h"

namespace h3pipe::worker {

// A task handed out by a TaskSource: its entry, and how it came.
struct Taken {
  std::string entry_id;
  std::string payload;       // serialized pb::StageTask
  bool reclaimed = false;    // an expired lease of another consumer's
  bool own_pending = false;  // this consumer's own, left pending by an earlier life
  // The start move already made with the claim (Store::claim_and_start): the engine takes it
  // instead of asking Ledger::start.
  std::optional<state::Attempt> started{};
};

class TaskSource {
 public:
  virtual ~TaskSource() = default;
  // A task this pool could claim now (undelivered, its own pending, or an expired lease): a pool
  // of a GPU group takes the group's lease only then, never to block idle in a claim.
  virtual Result<bool> visible() = 0;
  // The next task: the GPU group's own first, then one the last completion claimed ahead, then
  // the stage's stream, which gives new work only when may_claim() says yes (asked only when
  // nothing came before; `asked` says whether it was and its answer).  nullopt: nothing now.
  struct Asked {
    bool asked = false;
    bool yes = true;
  };
  virtual Result<std::optional<Taken>> take(const std::function<bool()>& may_claim,
                                            Asked& asked) = 0;
  // While the task runs its lease is renewed (hold), and then no longer (let_go).
  virtual void hold(const std::string& entry_id) = 0;
  virtual void let_go(const std::string& entry_id) = 0;
  // A task the last completion claimed ahead is waiting (take() hands it out next).
  virtual bool claimed_ahead() const = 0;
  // At stop: that task handed back at once (claimable by any worker's next sweep).
  virtual Status hand_back_ahead() = 0;
  // After an error under the loop (Redis went away): the task may still be ours, so this
  // consumer's own pending entries are taken first again.
  virtual void recheck_own() = 0;
  // Tasks waiting on the stage's stream (the queue-depth gauge; an idle slice with work waiting
  // is a bubble).
  virtual Result<long long> depth() = 0;
};

// The GPUs of a pool that shares them with other pools (a GPU group): one of them runs at a time.
class GpuGate {
 public:
  virtual ~GpuGate() = default;
  // Takes the GPUs if they are free (or already ours): false while another pool holds them.
  virtual Result<bool> acquire() = 0;
  // Lets them go; then_rank > 0: the job just finished goes on to that stage of the group, which
  // takes the GPUs next.
  virtual void release(int then_rank) = 0;
};

}  // namespace h3pipe::worker
