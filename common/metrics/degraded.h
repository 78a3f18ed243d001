#pragma once
// Degraded states: a part that cannot do its job fully carries on in a weaker way (a dispatch
// board it cannot read claims as first-free; a decode backlog it cannot see counts as empty; a
// transfer handoff whose Redis write failed is retried) and says so: a warning when it enters the
// state, a note when it leaves it, and h3pipe_degraded_total{state} counts every occurrence.
// Thread-safe.  The counters are exported once a service registers its registry
// (register_degraded); before that they count only in memory.
#include <prometheus/registry.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

namespace h3pipe::metrics {

void register_degraded(const std::shared_ptr<prometheus::Registry>& registry);

class Degraded final {
 public:
  // state: the label ("dispatch_board_unreadable", "decode_backlog_unknown", ...); what: the
  // part, for the log ("pool s0").
  Degraded(std::string state, std::string what)
      : state_(std::move(state)), what_(std::move(what)) {}
  // One more occurrence; warns when it is the first since the last ok().
  void hit(const std::string& why);
  // Back to normal; logs once if it was degraded.
  void ok();
  long long count() const { return count_.load(); }
  bool degraded() const { return degraded_.load(); }

 private:
  std::string state_, what_;
  std::atomic<long long> count_{0};
  std::atomic<bool> degraded_{false};
};

}  // namespace h3pipe::metrics
