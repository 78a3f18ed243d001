#pragma once
// The stage worker's loop (worker.h) talks to the world through these ports and the engine's
// (engine.h: Ledger, Files): where its tasks come from (TaskSource) and the GPUs it may have to
// take turns on (GpuGate).  Production implements them with Redis (claimer.h: the TaskSource,
// where a pool decides what it runs next; redis_tasks.h: the Ledger over the Claimer's queue of
// the task at hand) and with the GPU group's lease (gpu_lease.h); unit tests with memory
// (tests/support/fake_stage_ports.h).  Submission ingest's loop (worker.h Ingest) has its own
// port, Intake.
#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "common/core/result.h"
#include "common/proto/h3pipe.pb.h"
#include "common/queue/queue.h"
#include "common/state/state.h"
#include "common/worker/engine.h"

namespace h3pipe::worker {

// A task handed out by a TaskSource: its stream entry (the task, and whether it was reclaimed or
// this consumer's own pending one) and, when the claim already made the start move
// (Store::claim_and_start), that start, which the engine takes instead of asking Ledger::start.
struct Taken {
  queue::Entry entry;
  std::optional<state::Attempt> started{};
};

// The dispatch policy as the Claimer (claimer.h) asks it: production's is the pool board's
// (PoolBoard::policy(), common/dispatch's rule over the heartbeats and backlogs).
struct ClaimPolicy {
  // Asked before a claim of new work; false = leave the task to a pool that would finish it
  // sooner.  Default: always claim.
  std::function<bool()> may_claim = [] { return true; };
  // may_claim says yes without reading anything (first_free, or no peer): the claim after a
  // completion may be made in the completion's own script.  Set it false with a may_claim that
  // can say no.
  bool unconditional = true;
  // When may_claim said no: waits up to the given time before the next ask (the board: until a
  // task arrives on the stream when none was waiting).  Default: sleeps it.
  std::function<void(std::chrono::milliseconds)> idle_wait;
};

// What a claim gave: a task, or none (refused: the policy said no to new work).
struct Claim {
  std::optional<Taken> taken;
  bool refused = false;
};

// Where a stage's tasks come from.  It is also the engine's NextClaim: on a successful
// completion the engine asks it to fold the next claim into the completion (engine.h).
class TaskSource : public NextClaim {
 public:
  ~TaskSource() override = default;
  // A task this pool could claim now (undelivered, its own pending, or an expired lease): a pool
  // of a GPU group takes the group's lease only then, never to block idle in a claim.
  virtual Result<bool> visible() = 0;
  // The next task: the GPU group's own first, then one the last completion claimed ahead, then
  // the stage's stream, which gives new work only when the dispatch policy says yes (asked only
  // when nothing came before).  No task: nothing now, or the policy said no (Claim::refused).
  virtual Result<Claim> take() = 0;
  // After a refusal: waits before the next ask (ClaimPolicy::idle_wait).
  virtual void wait_after_refusal(std::chrono::milliseconds d) = 0;
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

// Submission ingest's side of Redis: the submissions as they arrive (h3pipe:submit) and the job
// records they become, in the job store.  Production: ingest.cpp's RedisIntake over StageQueue and
// Store; tests: MemoryIntake (tests/support/fake_stage_ports.h).
class Intake {
 public:
  virtual ~Intake() = default;
  // The next submission, with its fields (run, spec), or none now (waits up to block_ms).
  virtual Result<std::optional<queue::Entry>> next() = 0;
  // Acknowledges it: accepted, the same job again, or refused with a record.
  virtual Status done(const queue::Entry& e) = 0;
  virtual Result<bool> job_exists(const std::string& run_id, const std::string& job_id) = 0;
  // The stored spec of a job, as spec::to_json wrote it.
  virtual Result<std::string> job_spec(const std::string& run_id, const std::string& job_id) = 0;
  // A new job and its encode task in one step; false: the job exists already (nothing written).
  virtual Result<bool> accept_job(const std::string& run_id, const pb::JobSpec& spec,
                                  const std::string& encode_payload) = 0;
  // A failed job with the reason (a new job id whose submission does not validate).
  virtual Status reject_job(const std::string& run_id, const std::string& job_id,
                            const std::string& reason) = 0;
  // A submission refused beside the run (its job id exists already): never a job.
  virtual Status refuse_submission(const std::string& run_id, const state::Refusal& r) = 0;
  // Entries on the dead-letter stream (the encoder exports the gauge).
  virtual Result<long long> dead_letters() = 0;
};

}  // namespace h3pipe::worker
