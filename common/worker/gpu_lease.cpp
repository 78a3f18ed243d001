#include "common/worker/gpu_lease.h"

#include <map>
#include <random>

#include "common/logging/log.h"
#include "common/queue/keys.h"

namespace {

// This file's component logger (common/logging/log.h).
spdlog::logger& logger() {
  static const auto l = h3pipe::logging::get("gpu_lease");
  return *l;
}

}  // namespace

namespace h3pipe::worker {
namespace {

// KEYS: lease, want.  ARGV: token, ttl, rank (the pool's stage: later stages go first).  A pool
// that finds the lease held says it wants it next; a pool of an earlier stage then leaves it to
// the later one, so work already started is finished before new work is admitted (simulate.h).
constexpr const char* kAcquire = R"LUA(
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
local rank = tonumber(ARGV[3])
local want = tonumber(redis.call('GET', KEYS[2]) or '0')
if v then
  if rank > want then redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2]) end
  return 0
end
if want > rank then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if want == rank then redis.call('DEL', KEYS[2]) end
return 1
)LUA";
constexpr const char* kRenew = R"LUA(
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
)LUA";
// KEYS: lease, want.  ARGV: token, then-rank (0: none), ttl.  A holder whose job goes on to a
// later stage of the same group says so as it lets go, so that stage takes the GPUs next.
constexpr const char* kRelease = R"LUA(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
local rank = tonumber(ARGV[2])
if rank > 0 and rank > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
return 1
)LUA";

}  // namespace

std::string gpu_group(const config::Cluster& c, const config::Pool& p) {
  // The simulator's grouping (Cluster::gpu_group_leaders); the first pool names the group.
  const auto leader = c.gpu_group_leaders();
  for (std::size_t i = 0; i < c.pools.size(); ++i) {
    if (c.pools[i].name != p.name) continue;
    for (std::size_t k = 0; k < c.pools.size(); ++k)
      if (k != i && leader[k] == leader[i]) return c.pools[leader[i]].name;
    return "";
  }
  return "";
}

const config::Pool* group_pool(const config::Cluster& c, const config::Pool& p,
                               config::StageKind stage) {
  const std::string g = gpu_group(c, p);
  if (g.empty()) return nullptr;
  for (const auto& q : c.pools)
    if (q.stage == stage && gpu_group(c, q) == g) return &q;
  return nullptr;
}

std::string group_sample_stream(const std::string& group) {
  return keys::stream("sample@" + group);
}

GpuLease::GpuLease(queue::RedisAddress addr, std::string group, std::string holder, int rank,
                   int ttl_ms)
    : addr_(std::move(addr)),
      key_(std::string(keys::kPrefix) + ":gpu:" + group),
      want_key_(key_ + ":want"),
      rank_(rank),
      ttl_ms_(ttl_ms) {
  std::random_device rd;
  token_ = fmt::format("{}/{:08x}", holder, rd());
  renewer_ = std::thread([this] { renew_loop(); });
}

GpuLease::~GpuLease() {
  release();
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  renewer_.join();
}

Result<bool> GpuLease::acquire() {
  if (!redis_) {
    auto r = queue::Redis::connect(addr_);
    if (!r.ok()) return r.error();
    redis_ = std::move(*r);
  }
  auto r = redis_->eval(kAcquire, {key_, want_key_},
                        {token_, std::to_string(ttl_ms_), std::to_string(rank_)});
  if (!r.ok()) {
    if (r.error().code == errc::redis::kIo) redis_.reset();
    return r.error();
  }
  const bool got = queue::reply_int(r->get()) == 1;
  held_ = got;
  return got;
}

void GpuLease::release(int then_rank) {
  if (!held_.exchange(false) || !redis_) return;
  // Best effort: a lease not released expires after ttl.
  if (auto r = redis_->eval(kRelease, {key_, want_key_},
                            {token_, std::to_string(then_rank), std::to_string(ttl_ms_)});
      !r.ok() && r.error().code == errc::redis::kIo)
    redis_.reset();
}

void GpuLease::renew_loop() {
  std::unique_ptr<queue::Redis> r;
  std::unique_lock lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::milliseconds(std::max(10, ttl_ms_ / 3)),
                 [this] { return stop_; });
    if (stop_ || !held_) continue;
    lk.unlock();
    if (!r) {
      auto c = queue::Redis::connect(addr_);
      if (c.ok()) r = std::move(c.value());
    }
    if (r) {
      auto x = r->eval(kRenew, {key_}, {token_, std::to_string(ttl_ms_)});
      if (!x.ok()) {
        logger().warn("gpu lease {}: renewal failed: {}", key_, x.error().message);
        if (x.error().code == errc::redis::kIo) r.reset();
      } else if (queue::reply_int(x->get()) == 0 && held_) {
        logger().error(
            "gpu lease {}: lost (expired while held); another pool of the group may start", key_);
      }
    }
    lk.lock();
  }
}

}  // namespace h3pipe::worker
