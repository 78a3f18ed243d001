#pragma once
// A GPU group's lease in Redis (worker/gpu_lease.h has who takes it when): the key
// h3pipe:gpu:<group> holds the holder's token (SET PX: a holder that dies frees it after the ttl),
// h3pipe:gpu:<group>:want the rank of the latest stage waiting for it.  Each call is one script
// (EVALSHA) on the caller's connection; only the holder's token renews or releases the lease.
#include <string>

#include "common/core/result.h"
#include "common/queue/redis.h"

namespace h3pipe::state {

class GpuLeaseStore final {
 public:
  // rank: the holder's stage (encode 1, sample 2, decode 3).
  GpuLeaseStore(const std::string& group, std::string token, int rank, int ttl_ms);
  // Takes the lease if it is free (or already ours; then its ttl starts again), unless a later
  // stage waits for it: false while it is another's (then this rank is marked waiting when it is
  // the latest stage that waits).
  Result<bool> acquire(queue::Redis& r) const;
  // Renews the ttl while the lease is ours: false when it is not (it expired while held).
  Result<bool> renew(queue::Redis& r) const;
  // Lets the lease go if it is ours; then_rank > 0: that stage of the group takes it next.
  Status release(queue::Redis& r, int then_rank) const;
  const std::string& key() const { return key_; }

 private:
  std::string key_, want_key_, token_;
  int rank_, ttl_ms_;
};

}  // namespace h3pipe::state
