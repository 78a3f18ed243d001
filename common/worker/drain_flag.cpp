#include "common/worker/drain_flag.h"

#include "common/queue/hashes.h"
#include "common/queue/keys.h"

namespace h3pipe::worker {

bool DrainFlag::drained() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_) return drained_;
  next_ = now + kRecheck;
  if (!conn_) {
    auto c = redis_.connect();
    if (!c.ok()) return drained_;
    conn_ = std::move(*c);
  }
  auto r = queue::hget(*conn_, keys::drained_pools(), pool_);
  if (!r.ok()) {
    conn_.reset();  // reconnect at the next check
    return drained_;
  }
  drained_ = r->has_value();
  return drained_;
}

}  // namespace h3pipe::worker
