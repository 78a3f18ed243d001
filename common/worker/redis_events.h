#pragma once
// The stage worker's EventSink over Redis (#37): stage.started, step and preview events XADDed
// to the run's capped stream (queue/events.h) on a connection of their own with Redis::send, so a
// sampler never waits for a reply.  A connection that fails drops the events of the next few
// seconds (a gap in the stream, logged once) rather than stalling the sampler on reconnects.
#include <chrono>
#include <memory>
#include <optional>

#include "common/queue/connector.h"
#include "common/queue/redis.h"
#include "common/worker/engine.h"

namespace h3pipe::worker {

class RedisEventSink final : public EventSink {
 public:
  explicit RedisEventSink(queue::Connector redis) : connector_(std::move(redis)) {}
  void emit(const std::string& run_id, const queue::events::Event& e) override;
  long long dropped() const { return dropped_; }

 private:
  queue::Connector connector_;
  std::unique_ptr<queue::Redis> redis_;
  std::optional<std::chrono::steady_clock::time_point> retry_at_;
  long long dropped_ = 0;
};

}  // namespace h3pipe::worker
