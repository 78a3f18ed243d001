#pragma once
// A stage's jobs in Redis: the Ledger of the worker's engine (the state machine's moves, each
// acking its task's entry in the same step), over the Claimer's queue of the task at hand.  It
// owns the worker's connection, the job store and the Claimer (claimer.h: where the pool decides
// what it runs next, the worker's TaskSource), since a claim and the moves after it share the
// entry's stream.  Built on the domain's ports in common/queue and common/state; no reply is read
// here.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/queue/connector.h"
#include "common/queue/queue.h"
#include "common/state/state.h"
#include "common/worker/claimer.h"
#include "common/worker/engine.h"
#include "common/worker/ports.h"

namespace h3pipe::worker {

class RedisTasks final : public Ledger {
 public:
  // Connects, and builds the Claimer (which creates the consumer groups of the stage's streams
  // if they are missing).
  static Result<std::unique_ptr<RedisTasks>> create(ClaimerOptions o);
  ~RedisTasks() override;

  // The pool's Claimer: the worker's TaskSource and the engine's NextClaim.
  Claimer& claimer() { return *claimer_; }

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
  RedisTasks() = default;
  state::QueueAck entry(const std::string& id);

  pb::Stage stage_ = pb::STAGE_UNSPECIFIED;
  std::unique_ptr<queue::Redis> redis_;
  std::unique_ptr<state::Store> store_;
  std::unique_ptr<Claimer> claimer_;
};

}  // namespace h3pipe::worker
