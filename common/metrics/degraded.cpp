#include "common/metrics/degraded.h"

#include <prometheus/counter.h>

#include "common/logging/log.h"

namespace {

// This file's component logger (common/logging/log.h).
spdlog::logger& logger() {
  static const auto l = h3pipe::logging::get("degraded");
  return *l;
}

}  // namespace

namespace h3pipe::metrics {
namespace {

std::mutex mu;
prometheus::Family<prometheus::Counter>* family = nullptr;
std::shared_ptr<prometheus::Registry> keep;  // the family lives as long as its registry

void count_state(const std::string& state) {
  std::lock_guard l(mu);
  if (family) family->Add({{"state", state}}).Increment();
}

}  // namespace

void register_degraded(const std::shared_ptr<prometheus::Registry>& registry) {
  std::lock_guard l(mu);
  keep = registry;
  family = &prometheus::BuildCounter()
                .Name("h3pipe_degraded_total")
                .Help(
                    "Times a part carried on in a degraded way (state: dispatch_board_unreadable, "
                    "decode_backlog_unknown, transfer_handoff_redis, ...)")
                .Register(*registry);
}

void Degraded::hit(const std::string& why) {
  ++count_;
  count_state(state_);
  if (!degraded_.exchange(true)) logger().warn("{}: degraded ({}): {}", what_, state_, why);
}

void Degraded::ok() {
  if (degraded_.exchange(false)) logger().info("{}: no longer degraded ({})", what_, state_);
}

}  // namespace h3pipe::metrics
