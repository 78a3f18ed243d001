#include "common/worker/pool_board.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "common/config/stages.h"
#include "common/dispatch/claim_order.h"
#include "common/logging/log.h"
#include "common/queue/keys.h"
#include "common/spec/spec.h"
#include "common/state/state.h"
#include "common/worker/decode_choice.h"
#include "common/worker/gpu_lease.h"
#include "common/worker/heartbeat.h"

namespace {

// This file's component logger (common/logging/log.h).
spdlog::logger& logger() {
  static const auto l = h3pipe::logging::get("pool_board");
  return *l;
}

}  // namespace

namespace h3pipe::worker {
namespace {
double now_s() {
  return state::now_ms() / 1000.0;
}
}  // namespace

PoolBoard::PoolBoard(const config::Cluster& c, const config::Pool& self)
    : cluster_(c),
      self_(self),
      model_(c),
      self_ix_(model_.pool_index(self.name)),
      claim_order_(dispatch::claim_order_for(c, self).encode()),
      duty_(now_s()) {}

Result<std::unique_ptr<PoolBoard>> PoolBoard::create(const config::Cluster& c,
                                                     const config::Pool& self,
                                                     state::OpenPoolBoardStore open) {
  std::unique_ptr<PoolBoard> b(new PoolBoard(c, self));
  auto s = open();
  if (!s.ok()) return s.error();
  b->store_ = std::move(s.value());
  b->open_ = std::move(open);
  b->publish(0);
  b->store_->flush();  // the first state is on the board once create() returns
  b->heartbeat_ = std::thread([p = b.get()] { p->heartbeat_loop(); });
  return b;
}

Result<std::unique_ptr<PoolBoard>> PoolBoard::create(const config::Cluster& c,
                                                     const config::Pool& self,
                                                     const queue::Connector& redis) {
  return create(c, self, state::RedisPoolBoardStore::opener(redis));
}

// The class the board reasons about when it does not know the next task's: the pool's
// "default" profile (or its only one).
std::string PoolBoard::board_class(const config::Pool& p) const {
  if (p.profiles.count("default") || p.profiles.empty()) return "default";
  return p.profiles.begin()->first;
}

// What a pool commits its GPUs for, by the model (board_model.h: its own stage, plus the fastest
// pool of each later stage in its GPU group); a class it has no profile for (a first_free claim)
// counts its default's time.
double PoolBoard::committed_s(const std::string& cls) const {
  const double t = model_.class_model(cls).committed_s[self_ix_];
  return std::isfinite(t) ? t : expected_s(board_class(self_));
}

double PoolBoard::expected_s(const std::string& cls) const {
  const double t = model_.expected_s(self_ix_, cls);
  return std::isfinite(t) ? std::max(1e-6, t) : 1.0;
}

dispatch::Observation observe_board(const dispatch::BoardModel& m,
                                    const std::map<std::string, pb::Heartbeat>& beats,
                                    const std::vector<queue::StreamBacklog>& q, double now,
                                    std::size_t in_transit_here) {
  dispatch::Observation o;
  o.pools.assign(m.cluster().pools.size(), dispatch::PoolSeen{0, false});
  for (const auto& [name, hb] : beats) {
    const std::size_t i = m.pool_index(name);
    if (i == dispatch::kNoPool) continue;
    // A stamp from the future is no evidence (heartbeat.h): neither alive nor busy on its word.
    o.pools[i].alive = heartbeat_live(hb, now);
    if (o.pools[i].alive) o.pools[i].busy_for_s = std::max(0.0, hb.busy_until_unix_s() - now);
  }
  dispatch::Backlog& b = o.backlog;
  if (q.size() > 0) b.encode_queued = static_cast<std::size_t>(q[0].waiting());
  if (q.size() > 0) b.encoding = static_cast<std::size_t>(q[0].claimed);
  if (q.size() > 1) b.sample_queued = static_cast<std::size_t>(q[1].waiting());
  if (q.size() > 1) b.sampling = static_cast<std::size_t>(q[1].claimed);
  if (q.size() > 2) b.decode_queued_here = static_cast<std::size_t>(q[2].waiting());
  b.in_transit_here = in_transit_here;
  return o;
}

bool board_decision(const dispatch::BoardModel& m, std::size_t self, const std::string& job_class,
                    const dispatch::Observation& seen) {
  return m.should_claim(self, m.class_model(job_class), seen);
}

PoolBoard::~PoolBoard() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
}

void PoolBoard::heartbeat_loop() {
  std::unique_ptr<state::PoolBoardStore> r;
  std::unique_lock lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::milliseconds(500), [this] { return stop_; });
    if (stop_) break;
    pb::Heartbeat hb = last_state_;
    fill_use(hb);
    lk.unlock();
    if (!r) {
      auto c = open_();
      if (c.ok()) r = std::move(c.value());
    }
    if (r) {
      hb.set_unix_ms(state::now_ms());
      auto w = r->publish_now(self_.name, encode_heartbeat(hb));
      if (!w.ok() && w.error().code == errc::redis::kIo) r.reset();
    }
    lk.lock();
  }
}

void PoolBoard::publish(double busy_for_s) {
  double now = now_s();
  busy_until_unix_s_ = busy_for_s > 0 ? now + busy_for_s : 0;
  pb::Heartbeat hb;
  const auto& stage = config::describe_stage(self_.stage);
  hb.set_service(std::string(stage.service));
  hb.set_host(self_.host);
  hb.set_pool(self_.name);
  hb.set_stage(stage.stage);
  hb.set_unix_ms(state::now_ms());
  hb.set_state(busy_for_s > 0 ? "busy" : "idle");
  hb.set_busy_until_unix_s(busy_until_unix_s_);
  hb.set_expected_s(expected_s(board_class(self_)));
  // Sent without waiting for the reply (read with this connection's next command): no round
  // trip, and no other thread woken, on the worker's path between two tasks.
  std::lock_guard lk(mu_);
  duty_.set_busy(busy_for_s > 0, now);
  fill_use(hb);
  (void)store_->publish(self_.name, encode_heartbeat(hb));
  last_state_ = std::move(hb);
  next_heartbeat_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
}

void PoolBoard::set_gpu_use(std::function<std::optional<GpuUse>()> f) {
  std::lock_guard lk(mu_);
  gpu_use_ = std::move(f);
}

void PoolBoard::fill_use(pb::Heartbeat& hb) {
  const double now = now_s();
  hb.set_duty_cycle(duty_.duty_cycle(now));
  hb.set_duty_window_s(duty_.covered_s(now));
  const auto g = gpu_use_ ? gpu_use_() : std::nullopt;
  hb.set_gpu_devices(g ? g->devices : 0);
  hb.set_gpu_utilization(g ? g->utilization : 0);
  hb.set_gpu_memory_used_bytes(g ? static_cast<std::uint64_t>(g->memory_used_bytes) : 0);
  hb.set_gpu_memory_total_bytes(g ? static_cast<std::uint64_t>(g->memory_total_bytes) : 0);
}

std::string PoolBoard::stage_stream() const {
  return keys::stage_stream(config::stage_name(self_.stage), self_.host);
}

void PoolBoard::wait_for_work(std::chrono::milliseconds max) {
  if (!std::exchange(nothing_ready_, false)) {
    std::this_thread::sleep_for(max);
    return;
  }
  // On trouble the next may_claim reads the board again (and degrades there if it must).
  if (!store_->wait_for_entry(stage_stream(), max).ok()) std::this_thread::sleep_for(max);
}

// The task this pool's claim would take next (the claim order's pick, docs/design.md).
std::optional<std::string> PoolBoard::head_class() {
  auto task = store_->next_task(stage_stream(), config::stage_name(self_.stage), claim_order_);
  if (!task.ok() || !*task) return std::nullopt;
  pb::StageTask t;
  if (!t.ParseFromString(**task)) return std::nullopt;
  return spec::job_class(t.spec(), cluster_);
}

void PoolBoard::claimed(const pb::StageTask& t) {
  publish(committed_s(spec::job_class(t.spec(), cluster_)));
}

// The live side of the dispatch policy for every stage: the board's heartbeats and the streams'
// depths as the model's observation (observe_board), decided by the model the simulator runs.
bool PoolBoard::claims_unconditionally() const {
  if (dispatch::effective_policy(model_.policy(), self_.stage) == dispatch::Policy::kFirstFree)
    return true;
  // Nobody to defer to (and, for samplers, no decode side that could make waiting pay).
  return model_.peers(self_ix_).size() == 1;
}

bool PoolBoard::may_claim() {
  const auto stage = self_.stage;
  if (claims_unconditionally()) return true;
  if (std::chrono::steady_clock::now() >= next_heartbeat_) publish(0);
  std::vector<std::pair<std::string, std::string>> streams = {
      {keys::stage_stream("encode"), "encode"}, {keys::stage_stream("sample"), "sample"}};
  if (stage == config::StageKind::kDecode)
    streams.emplace_back(keys::stage_stream("decode", self_.host), "decode");
  auto backlog = store_->backlogs(streams);
  auto r = backlog.ok() ? store_->heartbeats()
                        : Result<std::vector<std::pair<std::string, std::string>>>(backlog.error());
  if (!r.ok()) {
    // Degraded, never stalled: claim as first_free would until the board reads again.
    board_state_.hit(r.error().to_string() + "; claiming without the policy until it reads again");
    return true;
  }
  board_state_.ok();
  const double now = now_s();
  // Every pool's heartbeat: busy-until and liveness.
  std::map<std::string, pb::Heartbeat> beats;
  for (auto& [name, bytes] : *r) {
    if (!cluster_.find_pool(name)) continue;
    auto hb = decode_heartbeat(name, bytes);
    if (!hb.ok()) {
      // Something else wrote to the hash (another version, an operator): that pool is left out
      // of the decision, as a dead one would be.  Warned once until it reads again.
      ++bad_heartbeats_;
      if (bad_pools_.insert(name).second)
        logger().warn("pool {}: {}", self_.name, hb.error().to_string());
      continue;
    }
    bad_pools_.erase(name);
    beats[name] = std::move(*hb);
  }
  dispatch::Observation seen = observe_board(model_, beats, *backlog, now);
  // Nothing waiting: do not block in XREADGROUP, or the first task to arrive would go to whichever
  // pool happens to be blocked there, fast or slow.  Poll again shortly instead.
  const auto& b = seen.backlog;
  const std::size_t ready = stage == config::StageKind::kEncode   ? b.encode_queued
                            : stage == config::StageKind::kSample ? b.sample_queued
                                                                  : b.decode_queued_here;
  if (ready == 0) {
    nothing_ready_ = true;  // wait_for_work blocks on the stream
    return false;
  }
  // The class the next task of this pool's stream is of, when the cluster has several (the
  // simulator decides on the head task's class); else the pool's own default.
  const std::string cls =
      cluster_.classes.size() > 1 ? head_class().value_or(board_class(self_)) : board_class(self_);
  seen.decode_load = [this] { return decode_load(cluster_, store_.get()); };
  return board_decision(model_, self_ix_, cls, seen);
}

ClaimPolicy PoolBoard::policy() {
  ClaimPolicy p;
  p.may_claim = [this] { return may_claim(); };
  p.unconditional = claims_unconditionally();
  p.idle_wait = [this](std::chrono::milliseconds d) { wait_for_work(d); };
  return p;
}

}  // namespace h3pipe::worker
