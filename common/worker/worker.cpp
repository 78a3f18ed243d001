#include "common/worker/worker.h"

#include <google/protobuf/util/json_util.h>

#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "common/artifacts/artifacts.h"
#include "common/core/sha256.h"
#include "common/latent/latent.h"
#include "common/logging/log.h"
#include "common/spec/spec.h"
#include "common/state/paths.h"
#include "common/worker/decode_choice.h"

namespace {

// This file's component logger (common/logging/log.h).
spdlog::logger& logger() {
  static const auto l = h3pipe::logging::get("worker");
  return *l;
}

}  // namespace

namespace h3pipe::worker {
namespace fs = std::filesystem;

std::string stream_for(config::StageKind stage, const std::string& host) {
  if (stage == config::StageKind::kDecode) return keys::stream("decode@" + host);
  return keys::stream(config::stage_name(stage));
}
std::string group_for(config::StageKind stage) {
  return config::stage_name(stage);
}

namespace {

// One-time library set-up that would otherwise land in the first task's stage time: OpenSSL's
// digest fetch (verify) and protobuf's JSON type resolver (the completion's history record).
void warm_first_use() {
  (void)sha256_hex("");
  (void)state::Store::advance_move("warm-up", "warm-up", pb::StageRecord(), state::JobState::kDone);
}

}  // namespace

// The engine's ledger: the job state machine (state::Store) and this stage's queue in Redis.
class StageWorker::RedisLedger final : public Ledger {
 public:
  explicit RedisLedger(StageWorker& w) : w_(w) {}
  state::QueueAck entry(const std::string& id) const {
    const auto& o = w_.active_->options();
    return {o.stream, o.group, o.consumer, id};
  }
  Result<state::Attempt> start(const pb::StageTask& t, const std::string& id) override {
    auto a =
        w_.store_->start_attempt(t.run_id(), t.job_id(), w_.stage_, entry(id), w_.folds_claims());
    if (a.ok()) w_.next_ = a->next;
    return a;
  }
  Result<state::Moved> apply(state::Move m, const std::string& id) override {
    m.ack = entry(id);
    if (m.event == state::Event::kAdvance) w_.fold_claim_into(m);
    auto moved = w_.store_->apply(m);
    if (moved.ok() && m.then_claim) w_.took_folded(std::move(moved->claimed));
    return moved;
  }
  Status dead_letter_entry(const Claimed& c, const std::string& reason) override {
    queue::Entry e;
    e.id = c.entry_id;
    e.payload = c.payload;
    return w_.active_->dead_letter(e, state::stage_key(w_.stage_), "", "", reason, {});
  }
  Status retry_later(const std::string& id, int backoff_ms) override {
    w_.active_leases_->release(id);  // no renewal may make it look fresh again after this
    queue::Entry e;
    e.id = id;
    return w_.active_->release_for_retry(e, backoff_ms);
  }
  void note_exec(const pb::StageTask& t) override {
    (void)w_.store_->note_exec(t.run_id(), t.job_id(), w_.stage_);
  }
  void note_error(const pb::StageTask& t, const std::string& why) override {
    (void)w_.store_->note_error(t.run_id(), t.job_id(), w_.stage_, why);
  }
  Result<bool> run_cancelled(const std::string& run) override { return w_.store_->cancelled(run); }
  bool lease_lost(const std::string& id) override { return w_.active_leases_->is_lost(id); }
  bool hand_back_due() override { return w_.hand_back_due(); }
  void note_handed_back(const pb::StageTask& t, const std::string& why) override {
    (void)w_.store_->note_handed_back(t.run_id(), t.job_id(), w_.stage_, why);
  }

 private:
  StageWorker& w_;
};

// The engine's files: the artifact roots on this host's disk.
class StageWorker::DiskFiles final : public Files {
 public:
  explicit DiskFiles(StageWorker& w) : w_(w) {}
  Result<std::string> verify(const fs::path& root, const fs::path& p) override {
    return artifacts::verify(artifacts::Root(root), p);
  }
  void remove(const fs::path& p) override {
    std::error_code ec;
    fs::remove(p, ec);
  }
  Result<std::uint64_t> size(const fs::path& p) override {
    std::error_code ec;
    auto n = fs::file_size(p, ec);
    if (ec) return make_error(errc::artifact::kSize, "{}: {}", p.string(), ec.message());
    return static_cast<std::uint64_t>(n);
  }
  Status make_dirs(const fs::path& root, const fs::path& dir) override {
    auto r = artifacts::make_dirs(artifacts::Root(root), dir);
    if (!r.ok()) return r.error();
    return {};
  }
  Status fits(const fs::path& lat, const latent::Expected& want) override {
    auto l = latent::read_latent(lat, &want);
    if (!l.ok()) return l.error();
    return {};
  }
  Status write_receipt(const pb::StageTask& t, const pb::StageRecord& own) override {
    return w_.write_receipt(t, own);
  }

 private:
  StageWorker& w_;
};

StageWorker::StageWorker(Options opts, Runtimes rt, metrics::WorkerProbe& probe, Hooks hooks)
    : opts_(std::move(opts)), rt_(std::move(rt)), probe_(probe), hooks_(std::move(hooks)) {}

StageWorker::~StageWorker() = default;

Result<std::unique_ptr<StageWorker>> StageWorker::create(Options opts, Runtimes rt,
                                                         metrics::WorkerProbe& probe, Hooks hooks) {
  std::unique_ptr<StageWorker> w(
      new StageWorker(std::move(opts), std::move(rt), probe, std::move(hooks)));
  const auto& pool = *w->opts_.pool;
  const auto& c = *w->opts_.cluster;
  w->stage_ = describe(pool.stage).stage;
  warm_first_use();
  if (!w->hooks_.decode_host) {
    std::string self = pool.host;
    // The shared decode-host choice (decode_choice.h) without backlogs; stage services with
    // several decode hosts wire the one that reads them from Redis.
    w->hooks_.decode_host = [&c, self](const pb::StageTask& t) {
      return choose_decode_host(c, self, t, nullptr);
    };
  }
  auto r = w->opts_.redis.connect();
  if (!r.ok()) return r.error();
  w->redis_ = std::move(r.value());
  w->store_ = std::make_unique<state::Store>(*w->redis_);
  queue::QueueOptions qo{stream_for(pool.stage, pool.host),
                         group_for(pool.stage),
                         w->opts_.consumer,
                         c.queue.lease_ms,
                         c.queue.block_ms,
                         c.queue.sweep_ms};
  w->queue_ = std::make_unique<queue::StageQueue>(*w->redis_, qo);
  H3_TRY(w->queue_->ensure_group());
  w->leases_ = std::make_unique<queue::LeaseKeeper>(w->opts_.redis, qo, c.queue.renew_ms);
  w->active_ = w->queue_.get();
  w->active_leases_ = w->leases_.get();
  Routing routing{w->hooks_.decode_host, w->hooks_.hand_off, w->hooks_.nudge};
  if (routing.hand_off)  // timed: the duty cycle's transfer_credit share
    routing.hand_off = [h = routing.hand_off, acc = w->handoff_s_](const pb::StageTask& t,
                                                                   const fs::path& p) {
      const auto t0 = std::chrono::steady_clock::now();
      Status s = h(t, p);
      *acc += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return s;
    };
  if (const std::string g = gpu_group(c, pool); !g.empty()) {
    const int rank = pool.stage == config::StageKind::kEncode   ? 1
                     : pool.stage == config::StageKind::kSample ? 2
                                                                : 3;
    w->gpu_ = std::make_unique<GpuLease>(w->opts_.redis, g, pool.name, rank, c.queue.lease_ms);
    logger().info("{}: shares its GPUs with GPU group {}: runs only while it holds {}", pool.name,
                  g, w->gpu_->key());
    // The group keeps an encoded job through its sampling (simulate.h): its encoder sends the
    // sample task to the group's own stream and hands the GPUs to the sampler as it lets go.
    if (pool.stage == config::StageKind::kEncode &&
        group_pool(c, pool, config::StageKind::kSample)) {
      routing.sample_stream = group_sample_stream(g);
      w->then_rank_ = 2;
    }
    if (pool.stage == config::StageKind::kSample &&
        group_pool(c, pool, config::StageKind::kEncode)) {
      queue::QueueOptions own{
          group_sample_stream(g), group_for(pool.stage), w->opts_.consumer, c.queue.lease_ms, 1,
          c.queue.sweep_ms};
      w->own_queue_ = std::make_unique<queue::StageQueue>(*w->redis_, own);
      H3_TRY(w->own_queue_->ensure_group());
      w->own_leases_ = std::make_unique<queue::LeaseKeeper>(w->opts_.redis, own, c.queue.renew_ms);
    }
    if (pool.stage == config::StageKind::kSample) {
      const config::Pool* d = group_pool(c, pool, config::StageKind::kDecode);
      if (d && d->host == pool.host) w->then_rank_ = 3;
    }
  }
  w->ledger_ = std::make_unique<RedisLedger>(*w);
  w->files_ = std::make_unique<DiskFiles>(*w);
  StageWorker* self = w.get();
  Compute compute = [self](const runtime::StageContext& ctx) -> Result<runtime::StageOutput> {
    switch (self->stage_) {
      case pb::STAGE_ENCODE:
        return self->rt_.encode->encode(ctx);
      case pb::STAGE_SAMPLE:
        return self->rt_.sample->sample(ctx);
      default:
        return self->rt_.decode->decode(ctx);
    }
  };
  w->engine_ =
      std::make_unique<StageEngine>(EngineOptions{&c, &pool, true}, *w->ledger_, *w->files_,
                                    std::move(compute), Clock::system(), routing);
  w->engine_->on_outcome = [self](Outcome o, const pb::StageTask& t, const pb::StageRecord& rec) {
    // The metrics once the next task's runtime runs (EngineOptions::defer_reports); the event now
    // (the board hears "idle" before the next task's "claimed").
    self->engine_->report([self, o, rec] { self->count(o, rec); });
    if (self->hooks_.on_event) self->hooks_.on_event(outcome_name(o), t);
  };
  return w;
}

void StageWorker::count(Outcome o, const pb::StageRecord& rec) {
  switch (o) {
    case Outcome::kCompleted:
      probe_.add_bytes(static_cast<double>(rec.bytes()));
      probe_.task_done((rec.end_unix_ms() - rec.start_unix_ms()) / 1000.0, rec.queue_wait_s());
      // MFU of a sample task whose runtime reports its model GFLOP and the device's peak (builtin).
      if (stage_ == pb::STAGE_SAMPLE && rec.run_s() > 0) {
        auto j = nlohmann::json::parse(rec.settings_json(), nullptr, false);
        if (j.is_object() && j.contains("runtime_reported") && j["runtime_reported"].is_object()) {
          const auto& rr = j["runtime_reported"];
          const double gflop = rr.value("gflop", 0.0), peak = rr.value("peak_gflops", 0.0);
          if (gflop > 0 && peak > 0) probe_.set_mfu(gflop / rec.run_s() / peak);
        }
      }
      break;
    case Outcome::kSkipped:
      probe_.task_skipped();
      break;
    case Outcome::kRetried:
      probe_.task_retry();
      break;
    case Outcome::kDeadLettered:
      probe_.task_dead_lettered();
      break;
    case Outcome::kCancelled:
      probe_.task_cancelled();
      break;
    case Outcome::kRefused:
      probe_.task_refused();
      break;
    case Outcome::kLeaseLost:
      probe_.lease_lost();
      break;
    case Outcome::kCount:
      break;
  }
}

bool StageWorker::hand_back_due() {
  if (!stop_ || opts_.stop_grace_s <= 0 || !stop_->load()) return false;
  const auto now = std::chrono::steady_clock::now();
  if (!stop_seen_) stop_seen_ = now;
  const double margin = std::min(2.0, 0.2 * opts_.stop_grace_s);
  return std::chrono::duration<double>(now - *stop_seen_).count() >= opts_.stop_grace_s - margin;
}

void StageWorker::run(const std::atomic<bool>& stop) {
  stop_ = &stop;
  auto idle_since = std::chrono::steady_clock::now();
  while (!stop.load()) {
    auto r = step();
    if (!r.ok()) {
      // A full disk or a Redis that cannot persist: said once per change (disk_health.h), not
      // every 200 ms.
      if (!disk_.observe(r.error()))
        logger().warn("{}: {}", opts_.pool->name, r.error().to_string());
      // The task may still be ours (e.g. Redis went away before the completion): take our own
      // pending entries first again, rather than waiting for our own lease to expire.
      queue_->recheck_own();
      if (own_queue_) own_queue_->recheck_own();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    disk_.ok();
    auto now = std::chrono::steady_clock::now();
    const double slice = std::chrono::duration<double>(now - idle_since).count();
    if (*r) {
      // The slice is the claim and the task: the task's process() ran it, less its hand-off.
      const double handoff = std::min(*handoff_s_, process_s_);
      probe_.task_ran(process_s_ - handoff);
      probe_.idle(handoff, "transfer_credit");
      probe_.idle(slice - process_s_, "overhead");
      idle_since = now;
    } else {
      if (claimed_once_) probe_.idle(slice, idle_cause_);
      // Idle: count the slice as a bubble if work was waiting for this pool.
      auto len = queue_->length();
      if (len.ok()) {
        probe_.set_queue_depth(static_cast<double>(*len));
        if (*len > 0) probe_.add_bubble(std::chrono::duration<double>(now - idle_since).count());
      }
      idle_since = now;
    }
  }
  engine_->run_deferred();
  // Stopped between a completion that claimed the next task and its processing: handed back at
  // once (claimable by the next sweep of any worker), not left until its lease runs out.
  if (prefetched_) {
    if (auto s = queue_->release_for_retry(*prefetched_, 0); !s.ok())
      logger().warn("{}: handing back {} at stop: {}", opts_.pool->name, prefetched_->id,
                    s.error().to_string());
    prefetched_.reset();
    prefetched_start_.reset();
  }
}

void StageWorker::fold_claim_into(state::Move& m) {
  if (!folds_claims() || !hooks_.claims_unconditionally || active_ != queue_.get() ||
      !queue_->own_drained() || (stop_ && stop_->load()))
    return;
  // The entry the task's start saw next: started in the same script when it is the one claimed.
  state::ClaimNext c{next_.value_or(state::NextEntry{}), stage_, 0};
  if (queue_->take_sweep()) c.sweep_idle_ms = queue_->options().lease_ms;
  m.then_claim = std::move(c);
}

void StageWorker::took_folded(std::optional<state::ClaimedStart> c) {
  next_.reset();
  if (!c) return;
  if (c->reclaimed) queue_->swept_one();
  queue::Entry e;
  e.id = std::move(c->entry_id);
  e.payload = std::move(c->payload);
  e.reclaimed = c->reclaimed;
  prefetched_ = std::move(e);
  prefetched_start_ = std::move(c->attempt);
  if (prefetched_start_) next_ = prefetched_start_->next;
}

Result<bool> StageWorker::work_visible() {
  if (own_queue_) {
    auto own = work_visible(*own_queue_);
    if (!own.ok() || *own) return own;
  }
  return work_visible(*queue_);
}

Result<bool> StageWorker::work_visible(queue::StageQueue& q) {
  auto c = q.claimable();
  if (!c.ok()) return c.error();
  return c->any();
}

Result<bool> StageWorker::step() {
  // Reports the last task left (engine.h defer_reports) when no next task is claimed yet.
  if (!prefetched_) engine_->run_deferred();
  const auto nap = std::chrono::milliseconds(opts_.cluster->queue.block_ms / 4 + 1);
  if (gpu_) {
    // Polled often: a GPU group hands its GPUs from stage to stage at every job, and each wait
    // here is time the GPUs sit idle (two small Redis commands per poll).
    const auto gpu_nap = std::min(nap, std::chrono::milliseconds(5));
    auto visible = work_visible();
    if (!visible.ok()) return visible.error();
    if (!*visible) {
      idle_cause_ = "no_job";
      gpu_wait_since_.reset();
      std::this_thread::sleep_for(gpu_nap);
      return false;
    }
    auto got = gpu_->acquire();
    if (!got.ok()) return got.error();
    if (!*got) {
      idle_cause_ = "gpu_group";
      if (!gpu_wait_since_) gpu_wait_since_ = std::chrono::steady_clock::now();
      std::this_thread::sleep_for(gpu_nap);
      return false;
    }
  }
  double gpu_wait_s = 0;
  if (gpu_wait_since_) {
    gpu_wait_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - *gpu_wait_since_).count();
    gpu_wait_since_.reset();
  }
  // The GPUs are let go whatever happens below; after a completed task whose job goes on in
  // this group, to that stage first.
  int then_rank = 0;
  struct Release {
    GpuLease* l;
    const int& rank;
    ~Release() {
      if (l) l->release(rank);
    }
  } release{gpu_.get(), then_rank};
  // The group's own sample tasks first (no policy: the job is this group's), then the stage's
  // shared stream under the dispatch policy.
  std::optional<queue::Entry> got;
  active_ = queue_.get();
  active_leases_ = leases_.get();
  if (own_queue_) {
    auto own = own_queue_->claim(true);
    if (!own.ok()) return own.error();
    if (own->has_value()) {
      got = std::move(**own);
      active_ = own_queue_.get();
      active_leases_ = own_leases_.get();
    }
  }
  bool new_work = true;
  std::optional<state::Attempt> started;
  // Claimed (and maybe started) by the last completion's script (fold_claim_into).
  if (!got && prefetched_) {
    got = std::exchange(prefetched_, std::nullopt);
    started = std::exchange(prefetched_start_, std::nullopt);
  }
  // The entry the last start saw next on the stream: when the policy lets this pool claim and
  // the claim would take new work anyway, claimed and started in one round trip (the same
  // order and moves as claim() then the engine's start; issue #24: the gap between two tasks).
  const std::optional<state::NextEntry> next =
      got ? std::nullopt : std::exchange(next_, std::nullopt);
  if (!got) {
    new_work = hooks_.may_claim();
    if (new_work && next && folds_claims() && queue_->next_claim_is_new()) {
      const auto& o = queue_->options();
      auto cs = store_->claim_and_start({o.stream, o.group, o.consumer, ""}, *next, stage_);
      if (!cs.ok()) return cs.error();
      if (cs->has_value()) {
        queue::Entry e;
        e.id = std::move((*cs)->entry_id);
        e.payload = std::move((*cs)->payload);
        got = std::move(e);
        started = std::move((*cs)->attempt);
        if (started) next_ = started->next;
      }
    }
    if (!got) {
      auto claimed = queue_->claim(new_work);
      if (!claimed.ok()) return claimed.error();
      if (claimed->has_value()) got = std::move(**claimed);
    }
  }
  if (!got) {
    idle_cause_ = new_work ? "no_job" : "dispatch";
    if (!new_work) hooks_.idle_wait ? hooks_.idle_wait(nap) : std::this_thread::sleep_for(nap);
    return false;
  }
  const queue::Entry& e = *got;
  if (e.reclaimed) probe_.reclaimed("expired_lease");
  if (e.own_pending) probe_.reclaimed("own_pending");
  pb::StageTask t;
  double wait = 0;
  if (t.ParseFromString(e.payload))
    wait = std::max(0.0, (state::now_ms() - t.enqueued_unix_ms()) / 1000.0);
  if (hooks_.on_event) hooks_.on_event("claimed", t);
  active_leases_->hold(e.id);
  probe_.set_busy(true);
  claimed_once_ = true;
  *handoff_s_ = 0;
  const auto p0 = std::chrono::steady_clock::now();
  auto r = engine_->process({e.id, e.payload, gpu_wait_s, std::move(started)}, wait);
  process_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count();
  probe_.set_busy(false);
  active_leases_->release(e.id);
  if (!r.ok()) return r.error();
  if (*r == Outcome::kCompleted || *r == Outcome::kSkipped) then_rank = then_rank_;
  return true;
}

}  // namespace h3pipe::worker
