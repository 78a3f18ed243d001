#include "common/worker/redis_events.h"

#include "common/logging/log.h"

namespace {

spdlog::logger& logger() {
  static const auto l = h3pipe::logging::get("events");
  return *l;
}

constexpr std::chrono::seconds kRetryAfter{5};

}  // namespace

namespace h3pipe::worker {

void RedisEventSink::emit(const std::string& run_id, const queue::events::Event& e) {
  const auto now = std::chrono::steady_clock::now();
  if (retry_at_ && now < *retry_at_) {
    ++dropped_;
    return;
  }
  if (!redis_) {
    auto r = connector_.connect();
    if (!r.ok()) {
      if (!retry_at_)
        logger().warn("run={} events: {}; live events dropped until it answers", run_id,
                      r.error().to_string());
      retry_at_ = now + kRetryAfter;
      ++dropped_;
      return;
    }
    redis_ = std::move(*r);
  }
  if (auto s = redis_->send(queue::events::run_xadd(run_id, e)); !s.ok()) {
    if (!retry_at_)
      logger().warn("run={} events: {}; live events dropped until it answers", run_id,
                    s.error().to_string());
    retry_at_ = now + kRetryAfter;
    redis_.reset();
    ++dropped_;
    return;
  }
  if (retry_at_) logger().info("events: writing again ({} dropped so far)", dropped_);
  retry_at_.reset();
}

}  // namespace h3pipe::worker
