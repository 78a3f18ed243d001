#include "common/worker/redis_tasks.h"

#include <utility>

#include "common/state/paths.h"
#include "common/worker/worker.h"

namespace h3pipe::worker {

RedisTasks::~RedisTasks() = default;

Result<std::unique_ptr<RedisTasks>> RedisTasks::create(ClaimerOptions o) {
  std::unique_ptr<RedisTasks> t(new RedisTasks());
  t->stage_ = config::describe_stage(o.pool->stage).stage;
  auto r = o.redis.connect();
  if (!r.ok()) return r.error();
  t->redis_ = std::move(r.value());
  t->store_ = std::make_unique<state::Store>(*t->redis_);
  auto c = Claimer::create(std::move(o), *t->redis_, *t->store_);
  if (!c.ok()) return c.error();
  t->claimer_ = std::move(c.value());
  return t;
}

state::QueueAck RedisTasks::entry(const std::string& id) {
  const auto& o = claimer_->active().options();
  return {o.stream, o.group, o.consumer, id, o.claim_order, o.share_key};
}

Result<state::Attempt> RedisTasks::start(const pb::StageTask& t, const std::string& id) {
  auto a =
      store_->start_attempt(t.run_id(), t.job_id(), stage_, entry(id), claimer_->folds_claims());
  if (a.ok()) claimer_->started(a->next);
  return a;
}

// The next claim rides in the move only when the engine asked the Claimer (NextClaim::fold_into).
Result<state::Moved> RedisTasks::apply(state::Move m, const std::string& id) {
  m.ack = entry(id);
  return store_->apply(m);
}

Status RedisTasks::dead_letter_entry(const Claimed& c, const std::string& reason) {
  queue::Entry e;
  e.id = c.entry_id;
  e.payload = c.payload;
  return claimer_->active().dead_letter(e, state::stage_key(stage_), "", "", reason, {});
}

Status RedisTasks::retry_later(const std::string& id, int backoff_ms) {
  claimer_->active_leases().release(id);  // no renewal may make it look fresh again after this
  queue::Entry e;
  e.id = id;
  return claimer_->active().release_for_retry(e, backoff_ms);
}

void RedisTasks::note_exec(const pb::StageTask& t) {
  (void)store_->note_exec(t.run_id(), t.job_id(), stage_);
}

void RedisTasks::note_error(const pb::StageTask& t, const std::string& why) {
  (void)store_->note_error(t.run_id(), t.job_id(), stage_, why);
}

Result<bool> RedisTasks::run_cancelled(const std::string& run) {
  return store_->cancelled(run);
}

bool RedisTasks::lease_lost(const std::string& id) {
  return claimer_->active_leases().is_lost(id);
}

void RedisTasks::note_handed_back(const pb::StageTask& t, const std::string& why) {
  (void)store_->note_handed_back(t.run_id(), t.job_id(), stage_, why);
}

Result<std::vector<pb::StageRecord>> RedisTasks::history(const std::string& run_id,
                                                         const std::string& job_id) {
  return store_->history(run_id, job_id);
}

}  // namespace h3pipe::worker
