#include "common/worker/pool_board.h"

#include <spdlog/spdlog.h>

#include "common/queue/keys.h"
#include "common/schedule/decode_route.h"
#include "common/schedule/geometry.h"
#include "common/state/state.h"
#include "common/worker/heartbeat.h"

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

// A pool's expected stage time: its profile for the default class (or the only one it has);
// sample pools of one run usually see one class, and the policy only needs relative speeds.
double PoolBoard::expected_s(const config::Pool& p) const {
  auto it = p.profiles.find("default");
  if (it == p.profiles.end() && !p.profiles.empty()) it = p.profiles.begin();
  if (it == p.profiles.end()) return 1.0;  // no profile: all pools equal
  return std::max(1e-6, it->second.expected() * cluster_.time_scale);
}

// The route tail (schedule::route_tail_s) of a sample pool, as the planner states it: transfer +
// decode from its host, for the class whose profile expected_s uses (its latent size from
// /classes, else the first class's).  Static: computed from the config alone.
double PoolBoard::tail_s(const config::Pool& p) const {
  std::string cls = "default";
  if (!p.profiles.count("default") && !p.profiles.empty()) cls = p.profiles.begin()->first;
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
      if (!w.ok() && w.error().code == "redis.io") r.reset();
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
  hb.set_expected_s(expected_s(self_));
  // Sent without waiting for the reply (read with this connection's next command): no round
  // trip, and no other thread woken, on the worker's path between two tasks.
  (void)redis_->send({"HSET", keys::pools(), self_.name, encode_heartbeat(hb)});
  std::lock_guard lk(mu_);
  last_state_ = std::move(hb);
  next_heartbeat_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
}

bool PoolBoard::may_claim() {
  if (policy_ == schedule::Policy::kFirstFree) return true;
  if (cluster_.pools_on("", config::StageKind::kSample).size() == 1) return true;  // nobody to defer to
  if (std::chrono::steady_clock::now() >= next_heartbeat_) publish(0);
  auto r = redis_->pipeline({{"HGETALL", keys::pools()},
                             {"XLEN", keys::stream("sample")},
                             {"XPENDING", keys::stream("sample"), "sample"},
                             {"XLEN", keys::stream("encode")},
                             {"XPENDING", keys::stream("encode"), "encode"}});
  if (!r.ok()) {
    // Degraded, never stalled: claim as first_free would until the board reads again.
    if (!board_unreadable_)
      spdlog::warn("pool {}: dispatch board unreadable ({}); claiming without the policy until it reads again",
                   self_.name, r.error().to_string());
    board_unreadable_ = true;
    return true;
  }
  board_unreadable_ = false;
  const auto& rep = *r;
  double now = now_s();
  std::vector<schedule::PoolState> pools;
  const redisReply* h = rep[0].get();
  for (std::size_t i = 0; h && i + 1 < h->elements; i += 2) {
    std::string name = queue::reply_str(h->element[i]);
    const config::Pool* p = cluster_.find_pool(name);
    if (!p || p->stage != config::StageKind::kSample) continue;
    auto hb = decode_heartbeat(name, queue::reply_str(h->element[i + 1]));
    if (!hb.ok()) {
      // Something else wrote to the hash (another version, an operator): that pool is left out
      // of the decision, as a dead one would be.  Warned once until it reads again.
      ++bad_heartbeats_;
      if (bad_pools_.insert(name).second) spdlog::warn("pool {}: {}", self_.name, hb.error().to_string());
      continue;
    }
    bad_pools_.erase(name);
    schedule::PoolState s;
    s.name = name;
    s.expected_s = expected_s(*p);
    s.tail_s = tail_s(*p);
    s.free_in_s = std::max(0.0, hb->busy_until_unix_s() - now);
    s.alive = now - static_cast<double>(hb->unix_ms()) / 1000.0 < kDeadAfterS;
    if (name == self_.name) { s.alive = true; s.free_in_s = 0; }
    pools.push_back(s);
  }
  auto pending = [](const redisReply* x) { return x && x->type == REDIS_REPLY_ARRAY && x->elements > 0 ? queue::reply_int(x->element[0]) : 0; };
  long long sample_len = queue::reply_int(rep[1].get()), sample_pending = pending(rep[2].get());
  long long enc_len = queue::reply_int(rep[3].get()), enc_pending = pending(rep[4].get());
  schedule::Backlog b;
  b.sample_queued = static_cast<std::size_t>(std::max(0LL, sample_len - sample_pending));
  b.sampling = static_cast<std::size_t>(sample_pending);
  b.encode_queued = static_cast<std::size_t>(std::max(0LL, enc_len - enc_pending));
  b.encoding = static_cast<std::size_t>(enc_pending);
  // Nothing waiting: do not block in XREADGROUP, or the first task to arrive would go to whichever
  // pool happens to be blocked there, fast or slow.  Poll again shortly instead.
  if (b.sample_queued == 0) return false;
  return schedule::should_claim(policy_, self_.name, pools, schedule::claim_lookahead(config::StageKind::kSample, b));
}

}  // namespace h3pipe::worker
