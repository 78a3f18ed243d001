#include "common/state/gpu_lease_store.h"

#include "common/queue/keys.h"

namespace h3pipe::state {
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

GpuLeaseStore::GpuLeaseStore(const std::string& group, std::string token, int rank, int ttl_ms)
    : key_(std::string(keys::kPrefix) + ":gpu:" + group),
      want_key_(key_ + ":want"),
      token_(std::move(token)),
      rank_(rank),
      ttl_ms_(ttl_ms) {}

Result<bool> GpuLeaseStore::acquire(queue::Redis& r) const {
  auto x =
      r.eval(kAcquire, {key_, want_key_}, {token_, std::to_string(ttl_ms_), std::to_string(rank_)});
  if (!x.ok()) return x.error();
  return queue::reply_int(x->get()) == 1;
}

Result<bool> GpuLeaseStore::renew(queue::Redis& r) const {
  auto x = r.eval(kRenew, {key_}, {token_, std::to_string(ttl_ms_)});
  if (!x.ok()) return x.error();
  return queue::reply_int(x->get()) != 0;
}

Status GpuLeaseStore::release(queue::Redis& r, int then_rank) const {
  auto x = r.eval(kRelease, {key_, want_key_},
                  {token_, std::to_string(then_rank), std::to_string(ttl_ms_)});
  if (!x.ok()) return x.error();
  return {};
}

}  // namespace h3pipe::state
