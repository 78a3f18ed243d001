#pragma once
// A stage's tasks and jobs in Redis: the TaskSource of the worker's loop and the Ledger of its
// engine in one object, since a claim and the moves after it share the entry's stream, and the
// one round trip between two tasks (issue #24) folds the next claim into the last completion's
// script.  Built on the domain's ports in common/queue (StageQueue, LeaseKeeper) and common/state
// (Store); no reply is read here.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/queue/connector.h"
#include "common/queue/queue.h"
#include "common/state/state.h"
#include "common/worker/engine.h"
#include "common/worker/ports.h"

namespace h3pipe::worker {

struct RedisTasksOptions {
  const config::Cluster* cluster = nullptr;
  const config::Pool* pool = nullptr;
  queue::Connector redis;  // this object's connection and its lease keepers'
  std::string consumer;    // stable per pool (restart drains its own pending entries)
  // The GPU group's own sample stream, taken before the shared one (GroupRole::own_stream).
  std::string own_stream;
  // The pool shares its GPUs (a GPU group): it takes the group's lease before each claim, so no
  // claim is folded into the completion before it.
  bool gpu_group = false;
  // The dispatch policy says yes without reading anything (Hooks::claims_unconditionally): the
  // claim after a completion may go into the completion's script.
  bool claims_unconditionally = true;
  // The worker is stopping: no claim is folded into a completion any more.
  std::function<bool()> stopping = [] { return false; };
};

class RedisTasks final : public TaskSource, public Ledger {
 public:
  // Connects, and creates the consumer groups of the stage's streams if they are missing.
  static Result<std::unique_ptr<RedisTasks>> create(RedisTasksOptions o);
  ~RedisTasks() override;

  // TaskSource
  Result<bool> visible() override;
  Result<std::optional<Taken>> take(const std::function<bool()>& may_claim) override;
  void hold(const std::string& entry_id) override;
  void let_go(const std::string& entry_id) override;
  bool claimed_ahead() const override { return ahead_.has_value(); }
  Status hand_back_ahead() override;
  void recheck_own() override;
  Result<long long> depth() override;

  // Ledger
  Result<state::Attempt> start(const pb::StageTask& t, const std::string& entry_id) override;
  Result<state::Moved> apply(state::Move m, const std::string& entry_id) override;
  Status dead_letter_entry(const Claimed& c, const std::string& reason) override;
  Status retry_later(const std::string& entry_id, int backoff_ms) override;
  void note_exec(const pb::StageTask& t) override;
  void note_error(const pb::StageTask& t, const std::string& reason) override;
  Result<bool> run_cancelled(const std::string& run_id) override;
  bool lease_lost(const std::string& entry_id) override;
  void note_handed_back(const pb::StageTask& t, const std::string& why) override;

  // The job's stage records, in order (the receipt: DiskFiles).
  Result<std::vector<pb::StageRecord>> history(const std::string& run_id,
                                               const std::string& job_id);

 private:
  explicit RedisTasks(RedisTasksOptions o);
  state::QueueAck entry(const std::string& id) const;
  // A pool with no GPU group or group stream of its own: one queue, so the next claim may be
  // folded with its start (Store::claim_and_start) after a start that saw the entry next_.
  bool folds_claims() const { return !opts_.gpu_group && !own_queue_; }
  // A completion (advance move) of a pool that folds its claims and claims unconditionally: the
  // next claim goes into the completion's script (Move::then_claim) while claim() would take new
  // work or sweep anyway (own pending drained), never once the worker is stopping.
  void fold_claim_into(state::Move& m);
  void took_folded(std::optional<state::ClaimedStart> c);

  RedisTasksOptions opts_;
  pb::Stage stage_ = pb::STAGE_UNSPECIFIED;
  std::unique_ptr<queue::Redis> redis_;
  std::unique_ptr<state::Store> store_;
  std::unique_ptr<queue::StageQueue> queue_;
  std::unique_ptr<queue::LeaseKeeper> leases_;
  // A sampler whose GPU group has an encoder: the group's own sample stream, taken first (the
  // jobs its encoder encoded), then the shared one.  active_ is the queue of the task at hand.
  std::unique_ptr<queue::StageQueue> own_queue_;
  std::unique_ptr<queue::LeaseKeeper> own_leases_;
  queue::StageQueue* active_ = nullptr;
  queue::LeaseKeeper* active_leases_ = nullptr;
  std::optional<state::NextEntry> next_;       // the entry after the task at hand (Attempt::next)
  std::optional<queue::Entry> ahead_;          // claimed by the last completion (fold_claim_into)
  std::optional<state::Attempt> ahead_start_;  // and started with it, when it was next_
};

}  // namespace h3pipe::worker
