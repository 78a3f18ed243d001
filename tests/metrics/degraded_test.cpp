// Degraded states (label: unit): counted every time, exported as h3pipe_degraded_total{state},
// warned when entered and noted when left.
#include "common/metrics/degraded.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

using namespace h3pipe;

namespace {
double exported(prometheus::Registry& reg, const std::string& state) {
  for (const auto& f : reg.Collect())
    if (f.name == "h3pipe_degraded_total")
      for (const auto& m : f.metric)
        for (const auto& l : m.label)
          if (l.name == "state" && l.value == state) return m.counter.value;
  return -1;
}
}  // namespace

TEST(Degraded, EveryOccurrenceIsCountedAndExported) {
  auto reg = std::make_shared<prometheus::Registry>();
  metrics::register_degraded(reg);
  metrics::Degraded d("decode_backlog_unknown", "test");
  EXPECT_FALSE(d.degraded());
  d.hit("redis down");
  d.hit("redis down");
  EXPECT_TRUE(d.degraded());
  d.ok();
  EXPECT_FALSE(d.degraded());
  d.hit("again");
  EXPECT_EQ(d.count(), 3);
  EXPECT_EQ(exported(*reg, "decode_backlog_unknown"), 3);
  EXPECT_EQ(exported(*reg, "transfer_handoff_redis"), -1);
}
