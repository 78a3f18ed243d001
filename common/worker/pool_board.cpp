#include "common/worker/pool_board.h"

#include "common/logging/log.h"
#include "common/queue/keys.h"
#include "common/schedule/decode_route.h"
#include "common/schedule/geometry.h"
#include "common/state/state.h"
#include "common/worker/decode_choice.h"
#include "common/worker/gpu_lease.h"
#include "common/worker/heartbeat.h"

#include <cmath>
#include <optional>
#include <map>
#include <set>
#include <utility>

namespace {

// This file's component logger (common/logging/log.h).
spdlog::logger& logger() {
  static const auto l = h3pipe::logging::get("pool_board");
  return *l;
}

}  // namespace

namespace h3pipe::worker {
namespace {
constexpr double kDeadAfterS = 3.0;
double now_s() { return state::now_ms() / 1000.0; }

pb::Stage to_pb(config::StageKind s) {
  switch (s) {
    case config::StageKind::kEncode: return pb::STAGE_ENCODE;
    case config::StageKind::kSample: return pb::STAGE_SAMPLE;
    case config::StageKind::kDecode: return pb::STAGE_DECODE;
  }
  return pb::STAGE_UNSPECIFIED;
}

const char* service_of(config::StageKind s) {
  switch (s) {
    case config::StageKind::kEncode: return "encoder";
    case config::StageKind::kSample: return "sampler";
    case config::StageKind::kDecode: return "decoder";
  }
  return "";
}
}  // namespace

PoolBoard::PoolBoard(const config::Cluster& c, const config::Pool& self) : cluster_(c), self_(self) {
  for (const auto& p : c.pools) groups_[p.name] = gpu_group(c, p);
}

const std::string& PoolBoard::group_of(const config::Pool& p) const {
  static const std::string none;
  auto it = groups_.find(p.name);
  return it == groups_.end() ? none : it->second;
}

Result<std::unique_ptr<PoolBoard>> PoolBoard::create(const config::Cluster& c, const config::Pool& self,
                                                     queue::RedisAddress addr) {
  std::unique_ptr<PoolBoard> b(new PoolBoard(c, self));
  auto r = queue::Redis::connect(addr);
  if (!r.ok()) return r.error();
  b->redis_ = std::move(r.value());
  b->policy_ = schedule::parse_policy(c.dispatch).value_or(schedule::Policy::kCompletionTime);
  b->addr_ = addr;
  b->publish(0);
  (void)b->redis_->command({"PING"});  // the first state is on the board once create() returns
  b->heartbeat_ = std::thread([p = b.get()] { p->heartbeat_loop(); });
  return b;
}

// The class the board reasons about when it does not know the next task's: the pool's
// "default" profile (or its only one).
std::string PoolBoard::board_class(const config::Pool& p) const {
  if (p.profiles.count("default") || p.profiles.empty()) return "default";
  return p.profiles.begin()->first;
}

// A pool's expected stage time for a class, as the simulator states it: its profile's expected()
// times the time scale; kCannotRun without a profile for the class.
double PoolBoard::expected_s(const config::Pool& p, const std::string& cls) const {
  const config::Profile* prof = p.profile_for(cls);
  if (!prof) {
    auto it = p.profiles.find("default");
    if (it == p.profiles.end() && !p.profiles.empty()) it = p.profiles.begin();
    if (it == p.profiles.end()) return 1.0;  // no profile: all pools equal
    prof = &it->second;
  }
  const double scale = cluster_.time_scale > 0 ? cluster_.time_scale : 1.0;
  return std::max(1e-6, prof->expected() * scale);
}

// What a pool commits its GPUs for (simulate.cpp, PoolRt::committed): its own stage, plus the
// fastest pool of each later stage in its GPU group.
double PoolBoard::committed_s(const config::Pool& p, const std::string& cls) const {
  double t = expected_s(p, cls);
  const std::string g = group_of(p);
  if (g.empty()) return t;
  for (int later = static_cast<int>(p.stage) + 1; later < 3; ++later) {
    double best = schedule::kCannotRun;
    for (const auto& q : cluster_.pools)
      if (static_cast<int>(q.stage) == later && group_of(q) == g) best = std::min(best, expected_s(q, cls));
    if (std::isfinite(best)) t += best;
  }
  return t;
}

bool PoolBoard::group_decodes(const config::Pool& p) const {
  const std::string g = group_of(p);
  for (const auto& q : cluster_.pools)
    if (!g.empty() && q.stage == config::StageKind::kDecode && group_of(q) == g) return true;
  return false;
}

// The route tail (schedule::route_tail_s) of a sample pool, as the planner states it: transfer +
// decode from its host for the class; 0 for a GPU group with its own decoder and for decoders.
double PoolBoard::tail_s(const config::Pool& p, const std::string& cls) const {
  if (p.stage == config::StageKind::kDecode || group_decodes(p)) return 0;
  const config::JobClass* k = cluster_.classes.empty() ? nullptr : &cluster_.classes.front();
  for (const auto& x : cluster_.classes)
    if (x.name == cls) k = &x;
  const std::uint64_t bytes = k ? schedule::latent_bytes(k->width, k->height, k->frames) : 0;
  return schedule::route_tail_s(cluster_, p.host, cls, bytes);
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
  std::unique_ptr<queue::Redis> r;
  std::unique_lock lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::milliseconds(500), [this] { return stop_; });
    if (stop_) break;
    pb::Heartbeat hb = last_state_;
    lk.unlock();
    if (!r) {
      auto c = queue::Redis::connect(addr_);
      if (c.ok()) r = std::move(c.value());
    }
    if (r) {
      hb.set_unix_ms(state::now_ms());
      auto w = r->command({"HSET", keys::pools(), self_.name, encode_heartbeat(hb)});
      if (!w.ok() && w.error().code == errc::redis::kIo) r.reset();
    }
    lk.lock();
  }
}

void PoolBoard::publish(double busy_for_s) {
  double now = now_s();
  busy_until_unix_s_ = busy_for_s > 0 ? now + busy_for_s : 0;
  pb::Heartbeat hb;
  hb.set_service(service_of(self_.stage));
  hb.set_host(self_.host);
  hb.set_pool(self_.name);
  hb.set_stage(to_pb(self_.stage));
  hb.set_unix_ms(state::now_ms());
  hb.set_state(busy_for_s > 0 ? "busy" : "idle");
  hb.set_busy_until_unix_s(busy_until_unix_s_);
  hb.set_expected_s(expected_s(self_, board_class(self_)));
  // Sent without waiting for the reply (read with this connection's next command): no round
  // trip, and no other thread woken, on the worker's path between two tasks.
  (void)redis_->send({"HSET", keys::pools(), self_.name, encode_heartbeat(hb)});
  std::lock_guard lk(mu_);
  last_state_ = std::move(hb);
  next_heartbeat_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
}

std::string PoolBoard::stage_stream() const {
  return self_.stage == config::StageKind::kDecode ? keys::stream("decode@" + self_.host)
                                                   : keys::stream(config::stage_name(self_.stage));
}

void PoolBoard::wait_for_work(std::chrono::milliseconds max) {
  if (!std::exchange(nothing_ready_, false)) {
    std::this_thread::sleep_for(max);
    return;
  }
  auto r = redis_->command({"XREAD", "BLOCK", std::to_string(std::max<long long>(1, max.count())), "STREAMS", stage_stream(), "$"});
  // On trouble the next may_claim reads the board again (and degrades there if it must).
  if (!r.ok()) std::this_thread::sleep_for(max);
}

// The next undelivered task of this pool's stream: the entry after the group's last-delivered id.
std::optional<std::string> PoolBoard::head_class() {
  const std::string stream = stage_stream();
  auto g = redis_->command({"XINFO", "GROUPS", stream});
  if (!g.ok()) return std::nullopt;
  std::string last;
  for (std::size_t i = 0; g->get()->type == REDIS_REPLY_ARRAY && i < g->get()->elements; ++i) {
    const redisReply* grp = g->get()->element[i];
    std::string name, id;
    for (std::size_t k = 0; grp && k + 1 < grp->elements; k += 2) {
      const std::string f = queue::reply_str(grp->element[k]);
      if (f == "name") name = queue::reply_str(grp->element[k + 1]);
      if (f == "last-delivered-id") id = queue::reply_str(grp->element[k + 1]);
    }
    if (name == config::stage_name(self_.stage)) last = id;
  }
  if (last.empty()) return std::nullopt;
  auto e = redis_->command({"XRANGE", stream, "(" + last, "+", "COUNT", "1"});
  if (!e.ok() || e->get()->type != REDIS_REPLY_ARRAY || e->get()->elements == 0) return std::nullopt;
  const redisReply* fields = e->get()->element[0]->element[1];
  for (std::size_t k = 0; fields && k + 1 < fields->elements; k += 2) {
    if (queue::reply_str(fields->element[k]) != "task") continue;
    pb::StageTask t;
    if (!t.ParseFromString(queue::reply_str(fields->element[k + 1]))) return std::nullopt;
    const auto& sp = t.spec();
    return cluster_.class_of(sp.width(), sp.height(), sp.frames(), sp.steps(), sp.job_class());
  }
  return std::nullopt;
}

void PoolBoard::claimed(const pb::StageTask& t) {
  const auto& sp = t.spec();
  publish(committed_s(self_, cluster_.class_of(sp.width(), sp.height(), sp.frames(), sp.steps(), sp.job_class())));
}

// The live side of the dispatch policy for every stage: the same inputs the simulator's
// try_claim builds (simulate.cpp), read from the pools' heartbeats and the streams.
bool PoolBoard::may_claim() {
  const auto stage = self_.stage;
  const schedule::Policy policy = schedule::effective_policy(policy_, stage);
  if (policy == schedule::Policy::kFirstFree) return true;
  const auto peers = stage == config::StageKind::kDecode ? cluster_.pools_on(self_.host, stage) : cluster_.pools_on("", stage);
  // Nobody to defer to (and, for samplers, no decode side that could make waiting pay).
  if (peers.size() == 1) return true;
  if (std::chrono::steady_clock::now() >= next_heartbeat_) publish(0);
  std::vector<std::pair<std::string, std::string>> streams = {{keys::stream("encode"), "encode"},
                                                               {keys::stream("sample"), "sample"}};
  if (stage == config::StageKind::kDecode) streams.emplace_back(keys::stream("decode@" + self_.host), "decode");
  auto backlog = stream_backlogs(*redis_, streams);
  auto r = backlog.ok() ? redis_->pipeline({{"HGETALL", keys::pools()}}) : Result<std::vector<queue::Reply>>(backlog.error());
  if (!r.ok()) {
    // Degraded, never stalled: claim as first_free would until the board reads again.
    board_state_.hit(r.error().to_string() + "; claiming without the policy until it reads again");
    return true;
  }
  board_state_.ok();
  const auto& rep = *r;
  const double now = now_s();
  // The class the next task of this pool's stream is of, when the cluster has several (the
  // simulator decides on the head task's class); else the pool's own default.
  const std::string cls = cluster_.classes.size() > 1 ? head_class().value_or(board_class(self_)) : board_class(self_);
  // Every pool's heartbeat: busy-until and liveness.
  std::map<std::string, std::pair<double, bool>> beat;  // pool -> (free_in_s, alive)
  const redisReply* h = rep[0].get();
  for (std::size_t i = 0; h && i + 1 < h->elements; i += 2) {
    std::string name = queue::reply_str(h->element[i]);
    if (!cluster_.find_pool(name)) continue;
    auto hb = decode_heartbeat(name, queue::reply_str(h->element[i + 1]));
    if (!hb.ok()) {
      // Something else wrote to the hash (another version, an operator): that pool is left out
      // of the decision, as a dead one would be.  Warned once until it reads again.
      ++bad_heartbeats_;
      if (bad_pools_.insert(name).second) logger().warn("pool {}: {}", self_.name, hb.error().to_string());
      continue;
    }
    bad_pools_.erase(name);
    beat[name] = {std::max(0.0, hb->busy_until_unix_s() - now), now - static_cast<double>(hb->unix_ms()) / 1000.0 < kDeadAfterS};
  }
  auto state_of = [&](const config::Pool& p) {
    schedule::PoolState s;
    s.name = p.name;
    s.expected_s = committed_s(p, cls);
    s.tail_s = tail_s(p, cls);
    auto it = beat.find(p.name);
    s.alive = it != beat.end() && it->second.second;
    s.free_in_s = it != beat.end() ? it->second.first : 0;
    // A pool whose GPUs another pool of its group holds is free when that pool's task ends
    // (Sim::free_in): an encoder whose sampler now samples its job is not free.
    if (const std::string g = group_of(p); !g.empty())
      for (const auto& q : cluster_.pools)
        if (q.name != p.name && group_of(q) == g)
          if (auto b = beat.find(q.name); b != beat.end() && b->second.second) s.free_in_s = std::max(s.free_in_s, b->second.first);
    if (p.name == self_.name) s.alive = true, s.free_in_s = 0;
    return s;
  };
  std::vector<schedule::PoolState> pools;
  for (const auto* p : peers) pools.push_back(state_of(*p));

  const auto& q = *backlog;
  schedule::Backlog b;
  b.encode_queued = static_cast<std::size_t>(q[0].waiting());
  b.encoding = static_cast<std::size_t>(q[0].claimed);
  b.sample_queued = static_cast<std::size_t>(q[1].waiting());
  b.sampling = static_cast<std::size_t>(q[1].claimed);
  if (stage == config::StageKind::kDecode) b.decode_queued_here = static_cast<std::size_t>(q[2].waiting());
  // Nothing waiting: do not block in XREADGROUP, or the first task to arrive would go to whichever
  // pool happens to be blocked there, fast or slow.  Poll again shortly instead.
  const std::size_t ready = stage == config::StageKind::kEncode   ? b.encode_queued
                            : stage == config::StageKind::kSample ? b.sample_queued
                                                                  : b.decode_queued_here;
  if (ready == 0) {
    nothing_ready_ = true;  // wait_for_work blocks on the stream
    return false;
  }
  // A sampler with encodes still upstream sees them as arrivals, and the decode side
  // (Sim::sample_lookahead).
  if (stage == config::StageKind::kSample && (b.encoding > 0 || b.encode_queued > 0)) {
    std::vector<schedule::PoolState> enc;
    std::vector<bool> reaches;  // a leasing encoder's job stays on its GPU group
    for (const auto* e : cluster_.pools_on("", config::StageKind::kEncode)) {
      auto s = state_of(*e);
      s.tail_s = 0;
      enc.push_back(s);
      bool leases = false;
      const std::string g = group_of(*e);
      for (const auto* q : cluster_.pools_on("", config::StageKind::kSample)) leases = leases || (!g.empty() && group_of(*q) == g);
      reaches.push_back(!leases);
    }
    schedule::Lookahead la;
    la.arrivals_in_s = schedule::upstream_arrivals(enc, reaches, b.encode_queued);
    std::vector<std::string> hosts;  // a GPU group with its own decoder: no row (its tail counts)
    for (const auto* q : peers) hosts.push_back(group_decodes(*q) ? "" : q->host);
    const config::JobClass* k = cluster_.classes.empty() ? nullptr : &cluster_.classes.front();
    for (const auto& x : cluster_.classes)
      if (x.name == cls) k = &x;
    const std::uint64_t bytes = k ? schedule::latent_bytes(k->width, k->height, k->frames) : 0;
    schedule::fill_decode_side(cluster_, hosts, cls, bytes, decode_load(cluster_, redis_.get()), la);
    return schedule::should_claim(policy, self_.name, pools, b.sample_queued, la);
  }
  return schedule::should_claim(policy, self_.name, pools, schedule::claim_lookahead(stage, b));
}

}  // namespace h3pipe::worker
