#pragma once
// The Claimer: where a pool decides what it runs next (docs/design.md, "The claim order";
// issue #39).  The only code of a live worker that claims from a stage's streams, asks the
// dispatch policy, and folds the next claim into a completion:
//
//   take():     the GPU group's own stream first (the group's job: no policy), then the task the
//               last completion claimed ahead, then the stage stream: the policy is asked once
//               (ClaimPolicy::may_claim; a "no" still lets the claim drain this consumer's own
//               pending entries and expired leases, never new work), and the claim takes the next
//               entry in the claim order (StageQueue::claim, or Store::claim_and_start when the
//               last start saw that entry next: claim and start in one round trip, issue #24).
//   fold_into() / folded(): the engine's explicit call on a successful completion (NextClaim,
//               engine.h): when the policy needs no read (ClaimPolicy::unconditional) and the
//               pool has one queue, the next claim rides in the completion's own script
//               (state::Move::then_claim); what it claimed is handed out by the next take().
//
// The order itself (which waiting entry a claim takes) is dispatch::pick / charge
// (common/dispatch/claim_order.h) and its Lua twin (common/queue/claim_order_lua.inc) that every
// claim script here runs; the planner's simulator decides its claims with dispatch::claim_next,
// the same order and the same policy question (dispatch::BoardModel::should_claim) in one call.
// Tests: claimer_test (this object over Redis), claim_order_redis_test (C++ vs Lua),
// dispatch_live_vs_plan_test (the policy, live vs planned).
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/config/config.h"
#include "common/queue/connector.h"
#include "common/queue/queue.h"
#include "common/state/state.h"
#include "common/worker/engine.h"
#include "common/worker/ports.h"

namespace h3pipe::worker {

struct ClaimerOptions {
  const config::Cluster* cluster = nullptr;
  const config::Pool* pool = nullptr;
  queue::Connector redis;  // the lease keepers' connections
  std::string consumer;    // stable per pool (restart drains its own pending entries)
  // The GPU group's own sample stream, taken before the shared one (GroupRole::own_stream).
  std::string own_stream;
  // The pool shares its GPUs (a GPU group): it takes the group's lease before each claim, so no
  // claim is folded into the completion before it.
  bool gpu_group = false;
  ClaimPolicy policy;
  // The worker is stopping (or drained): no claim is folded into a completion any more.
  std::function<bool()> stopping = [] { return false; };
};

class Claimer final : public TaskSource {
 public:
  // Over `redis` (its connection, which outlives it) and `store` (the job store on it, likewise):
  // creates the consumer groups of the stage's streams if they are missing.
  static Result<std::unique_ptr<Claimer>> create(ClaimerOptions o, queue::Redis& redis,
                                                 state::Store& store);
  ~Claimer() override;

  // TaskSource
  Result<bool> visible() override;
  Result<Claim> take() override;
  void wait_after_refusal(std::chrono::milliseconds d) override;
  void hold(const std::string& entry_id) override;
  void let_go(const std::string& entry_id) override;
  bool claimed_ahead() const override { return ahead_.has_value(); }
  Status hand_back_ahead() override;
  void recheck_own() override;
  Result<long long> depth() override;
  // NextClaim (the engine's call on a successful completion)
  void fold_into(state::Move& m) override;
  void folded(std::optional<state::ClaimedStart> c) override;

  // The ledger's side (RedisTasks): the queue and lease keeper of the task at hand (the group's
  // own stream or the stage's), and what the task's start saw next on the stream.
  queue::StageQueue& active() { return *active_; }
  queue::LeaseKeeper& active_leases() { return *active_leases_; }
  // Whether a start should peek at the entry after it (the next claim may start it).
  bool folds_claims() const { return !opts_.gpu_group && !own_queue_; }
  void started(std::optional<state::NextEntry> next) { next_ = std::move(next); }

 private:
  Claimer(ClaimerOptions o, queue::Redis& redis, state::Store& store);

  ClaimerOptions opts_;
  state::Store& store_;
  pb::Stage stage_ = pb::STAGE_UNSPECIFIED;
  std::unique_ptr<queue::StageQueue> queue_;
  std::unique_ptr<queue::LeaseKeeper> leases_;
  // A sampler whose GPU group has an encoder: the group's own sample stream, taken first (the
  // jobs its encoder encoded), then the shared one.  active_ is the queue of the task at hand.
  std::unique_ptr<queue::StageQueue> own_queue_;
  std::unique_ptr<queue::LeaseKeeper> own_leases_;
  queue::StageQueue* active_ = nullptr;
  queue::LeaseKeeper* active_leases_ = nullptr;
  std::optional<state::NextEntry> next_;       // the entry after the task at hand (Attempt::next)
  std::optional<queue::Entry> ahead_;          // claimed by the last completion (fold_into)
  std::optional<state::Attempt> ahead_start_;  // and started with it, when it was next_
};

}  // namespace h3pipe::worker
