#include "common/worker/claimer.h"

#include <thread>
#include <utility>

#include "common/dispatch/claim_order.h"
#include "common/queue/keys.h"
#include "common/worker/worker.h"

namespace h3pipe::worker {

Claimer::Claimer(ClaimerOptions o, queue::Redis& redis, state::Store& store)
    : opts_(std::move(o)), store_(store) {
  (void)redis;  // the queues' connection (create)
}
Claimer::~Claimer() = default;

Result<std::unique_ptr<Claimer>> Claimer::create(ClaimerOptions o, queue::Redis& redis,
                                                 state::Store& store) {
  std::unique_ptr<Claimer> t(new Claimer(std::move(o), redis, store));
  const auto& c = *t->opts_.cluster;
  const auto& pool = *t->opts_.pool;
  t->stage_ = config::describe_stage(pool.stage).stage;
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
  t->queue_ = std::make_unique<queue::StageQueue>(redis, qo);
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
    t->own_queue_ = std::make_unique<queue::StageQueue>(redis, own);
    H3_TRY(t->own_queue_->ensure_group());
    t->own_leases_ = std::make_unique<queue::LeaseKeeper>(t->opts_.redis, own, c.queue.renew_ms);
  }
  t->active_ = t->queue_.get();
  t->active_leases_ = t->leases_.get();
  return t;
}

Result<bool> Claimer::visible() {
  for (auto* q : {own_queue_.get(), queue_.get()}) {
    if (!q) continue;
    auto c = q->claimable();
    if (!c.ok()) return c.error();
    if (c->any()) return true;
  }
  return false;
}

Result<Claim> Claimer::take() {
  active_ = queue_.get();
  active_leases_ = leases_.get();
  // The group's own sample tasks first (no policy: the job is this group's).
  if (own_queue_) {
    auto own = own_queue_->claim(true);
    if (!own.ok()) return own.error();
    if (own->has_value()) {
      active_ = own_queue_.get();
      active_leases_ = own_leases_.get();
      return Claim{Taken{std::move(**own)}};
    }
  }
  // Claimed (and maybe started) by the last completion's script (fold_into).
  if (ahead_) {
    Taken t{std::move(*ahead_), std::exchange(ahead_start_, std::nullopt)};
    ahead_.reset();
    return Claim{std::move(t)};
  }
  const std::optional<state::NextEntry> next = std::exchange(next_, std::nullopt);
  const bool new_work = opts_.policy.may_claim();
  // The entry the last start saw next on the stream: when the policy lets this pool claim and
  // the claim would take new work anyway, claimed and started in one round trip (the same order
  // and moves as claim() then the engine's start; issue #24: the gap between two tasks).
  if (new_work && next && folds_claims() && queue_->next_claim_is_new()) {
    const auto& o = queue_->options();
    auto cs = store_.claim_and_start(
        {o.stream, o.group, o.consumer, "", o.claim_order, o.share_key}, *next, stage_);
    if (!cs.ok()) return cs.error();
    if (cs->has_value()) {
      auto& got = **cs;
      if (got.attempt) next_ = got.attempt->next;
      Taken t;
      t.entry.id = std::move(got.entry_id);
      t.entry.payload = std::move(got.payload);
      t.started = std::move(got.attempt);
      return Claim{std::move(t)};
    }
  }
  // Refused: still drains this consumer's own pending entries and expired leases.
  auto claimed = queue_->claim(new_work);
  if (!claimed.ok()) return claimed.error();
  if (!claimed->has_value()) return Claim{std::nullopt, !new_work};
  return Claim{Taken{std::move(**claimed)}};
}

void Claimer::wait_after_refusal(std::chrono::milliseconds d) {
  if (opts_.policy.idle_wait)
    opts_.policy.idle_wait(d);
  else
    std::this_thread::sleep_for(d);
}

void Claimer::hold(const std::string& id) {
  active_leases_->hold(id);
}
void Claimer::let_go(const std::string& id) {
  active_leases_->release(id);
}

Status Claimer::hand_back_ahead() {
  if (!ahead_) return {};
  auto e = std::exchange(ahead_, std::nullopt);
  ahead_start_.reset();
  return queue_->release_for_retry(*e, 0);
}

void Claimer::recheck_own() {
  queue_->recheck_own();
  if (own_queue_) own_queue_->recheck_own();
}

Result<long long> Claimer::depth() {
  return queue_->length();
}

// A completion of a pool that folds its claims (one queue, no GPU group) and whose policy says
// yes without reading anything: the next claim goes into the completion's script
// (Move::then_claim) while claim() would take new work or sweep anyway (own pending drained),
// never once the worker is stopping.
void Claimer::fold_into(state::Move& m) {
  if (m.event != state::Event::kAdvance || !folds_claims() || !opts_.policy.unconditional ||
      active_ != queue_.get() || !queue_->own_drained() || opts_.stopping())
    return;
  // The entry the task's start saw next: started in the same script when it is the one claimed.
  state::ClaimNext c{next_.value_or(state::NextEntry{}), stage_, 0};
  if (queue_->take_sweep()) c.sweep_idle_ms = queue_->options().lease_ms;
  m.then_claim = std::move(c);
}

void Claimer::folded(std::optional<state::ClaimedStart> c) {
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

}  // namespace h3pipe::worker
