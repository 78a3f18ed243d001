#include "common/worker/redis_tasks.h"

#include <utility>

#include "common/dispatch/claim_order.h"
#include "common/state/paths.h"
#include "common/worker/worker.h"

namespace h3pipe::worker {

RedisTasks::RedisTasks(RedisTasksOptions o) : opts_(std::move(o)) {}
RedisTasks::~RedisTasks() = default;

Result<std::unique_ptr<RedisTasks>> RedisTasks::create(RedisTasksOptions o) {
  std::unique_ptr<RedisTasks> t(new RedisTasks(std::move(o)));
  const auto& c = *t->opts_.cluster;
  const auto& pool = *t->opts_.pool;
  t->stage_ = describe(pool.stage).stage;
  auto r = t->opts_.redis.connect();
  if (!r.ok()) return r.error();
  t->redis_ = std::move(r.value());
  t->store_ = std::make_unique<state::Store>(*t->redis_);
  // New entries are taken in the claim order (docs/design.md, "The claim order").
  const std::string order = dispatch::claim_order_for(c, pool).encode();
  const std::string stream = stream_for(pool.stage, pool.host);
  queue::QueueOptions qo{stream,
                         group_for(pool.stage),
                         t->opts_.consumer,
                         c.queue.lease_ms,
                         c.queue.block_ms,
                         c.queue.sweep_ms,
                         order,
                         keys::claim_share(stream)};
  t->queue_ = std::make_unique<queue::StageQueue>(*t->redis_, qo);
  H3_TRY(t->queue_->ensure_group());
  t->leases_ = std::make_unique<queue::LeaseKeeper>(t->opts_.redis, qo, c.queue.renew_ms);
  if (!t->opts_.own_stream.empty()) {
    // Never blocks (block_ms 1): the shared stream is asked right after it.
    queue::QueueOptions own{t->opts_.own_stream,
                            group_for(pool.stage),
                            t->opts_.consumer,
                            c.queue.lease_ms,
                            1,
                            c.queue.sweep_ms,
                            order,
                            keys::claim_share(t->opts_.own_stream)};
    t->own_queue_ = std::make_unique<queue::StageQueue>(*t->redis_, own);
    H3_TRY(t->own_queue_->ensure_group());
    t->own_leases_ = std::make_unique<queue::LeaseKeeper>(t->opts_.redis, own, c.queue.renew_ms);
  }
  t->active_ = t->queue_.get();
  t->active_leases_ = t->leases_.get();
  return t;
}

// --- TaskSource ------------------------------------------------------------------------------

Result<bool> RedisTasks::visible() {
  for (auto* q : {own_queue_.get(), queue_.get()}) {
    if (!q) continue;
    auto c = q->claimable();
    if (!c.ok()) return c.error();
    if (c->any()) return true;
  }
  return false;
}

Result<std::optional<Taken>> RedisTasks::take(const std::function<bool()>& may_claim) {
  active_ = queue_.get();
  active_leases_ = leases_.get();
  // The group's own sample tasks first (no policy: the job is this group's).
  if (own_queue_) {
    auto own = own_queue_->claim(true);
    if (!own.ok()) return own.error();
    if (own->has_value()) {
      active_ = own_queue_.get();
      active_leases_ = own_leases_.get();
      return std::optional<Taken>(Taken{std::move(**own)});
    }
  }
  // Claimed (and maybe started) by the last completion's script (fold_claim_into).
  if (ahead_) {
    Taken t{std::move(*ahead_), std::exchange(ahead_start_, std::nullopt)};
    ahead_.reset();
    return std::optional<Taken>(std::move(t));
  }
  const std::optional<state::NextEntry> next = std::exchange(next_, std::nullopt);
  const bool new_work = may_claim();
  // The entry the last start saw next on the stream: when the policy lets this pool claim and
  // the claim would take new work anyway, claimed and started in one round trip (the same order
  // and moves as claim() then the engine's start; issue #24: the gap between two tasks).
  if (new_work && next && folds_claims() && queue_->next_claim_is_new()) {
    const auto& o = queue_->options();
    auto cs = store_->claim_and_start(
        {o.stream, o.group, o.consumer, "", o.claim_order, o.share_key}, *next, stage_);
    if (!cs.ok()) return cs.error();
    if (cs->has_value()) {
      auto& got = **cs;
      if (got.attempt) next_ = got.attempt->next;
      Taken t;
      t.entry.id = std::move(got.entry_id);
      t.entry.payload = std::move(got.payload);
      t.started = std::move(got.attempt);
      return std::optional<Taken>(std::move(t));
    }
  }
  auto claimed = queue_->claim(new_work);
  if (!claimed.ok()) return claimed.error();
  if (!claimed->has_value()) return std::optional<Taken>();
  return std::optional<Taken>(Taken{std::move(**claimed)});
}

void RedisTasks::hold(const std::string& id) {
  active_leases_->hold(id);
}
void RedisTasks::let_go(const std::string& id) {
  active_leases_->release(id);
}

Status RedisTasks::hand_back_ahead() {
  if (!ahead_) return {};
  auto e = std::exchange(ahead_, std::nullopt);
  ahead_start_.reset();
  return queue_->release_for_retry(*e, 0);
}

void RedisTasks::recheck_own() {
  queue_->recheck_own();
  if (own_queue_) own_queue_->recheck_own();
}

Result<long long> RedisTasks::depth() {
  return queue_->length();
}

void RedisTasks::fold_claim_into(state::Move& m) {
  if (!folds_claims() || !opts_.claims_unconditionally || active_ != queue_.get() ||
      !queue_->own_drained() || opts_.stopping())
    return;
  // The entry the task's start saw next: started in the same script when it is the one claimed.
  state::ClaimNext c{next_.value_or(state::NextEntry{}), stage_, 0};
  if (queue_->take_sweep()) c.sweep_idle_ms = queue_->options().lease_ms;
  m.then_claim = std::move(c);
}

void RedisTasks::took_folded(std::optional<state::ClaimedStart> c) {
  next_.reset();
  if (!c) return;
  if (c->reclaimed) queue_->swept_one();
  queue::Entry e;
  e.id = std::move(c->entry_id);
  e.payload = std::move(c->payload);
  e.reclaimed = c->reclaimed;
  ahead_ = std::move(e);
  ahead_start_ = std::move(c->attempt);
  if (ahead_start_) next_ = ahead_start_->next;
}

// --- Ledger ----------------------------------------------------------------------------------

state::QueueAck RedisTasks::entry(const std::string& id) const {
  const auto& o = active_->options();
  return {o.stream, o.group, o.consumer, id, o.claim_order, o.share_key};
}

Result<state::Attempt> RedisTasks::start(const pb::StageTask& t, const std::string& id) {
  auto a = store_->start_attempt(t.run_id(), t.job_id(), stage_, entry(id), folds_claims());
  if (a.ok()) next_ = a->next;
  return a;
}

Result<state::Moved> RedisTasks::apply(state::Move m, const std::string& id) {
  m.ack = entry(id);
  if (m.event == state::Event::kAdvance) fold_claim_into(m);
  auto moved = store_->apply(m);
  if (moved.ok() && m.then_claim) took_folded(std::move(moved->claimed));
  return moved;
}

Status RedisTasks::dead_letter_entry(const Claimed& c, const std::string& reason) {
  queue::Entry e;
  e.id = c.entry_id;
  e.payload = c.payload;
  return active_->dead_letter(e, state::stage_key(stage_), "", "", reason, {});
}

Status RedisTasks::retry_later(const std::string& id, int backoff_ms) {
  active_leases_->release(id);  // no renewal may make it look fresh again after this
  queue::Entry e;
  e.id = id;
  return active_->release_for_retry(e, backoff_ms);
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
  return active_leases_->is_lost(id);
}

void RedisTasks::note_handed_back(const pb::StageTask& t, const std::string& why) {
  (void)store_->note_handed_back(t.run_id(), t.job_id(), stage_, why);
}

Result<std::vector<pb::StageRecord>> RedisTasks::history(const std::string& run_id,
                                                         const std::string& job_id) {
  return store_->history(run_id, job_id);
}

}  // namespace h3pipe::worker
