#pragma once
// Storage that cannot take writes, said instead of stalling silently (issue #22 item 10): a
// worker or ingest loop hands every step's error to observe().  A Redis that refuses writes
// because it cannot persist (MISCONF: its AOF or RDB write failed, a full disk under it) or a
// local write that failed with ENOSPC is a degraded state (metrics/degraded.h): one warning
// when it is entered, one note when a later step succeeds, h3pipe_degraded_total{state=
// "disk_full" | "redis_cannot_persist"} counting every occurrence, and on_change(reason) told
// of each change ("" when it is left) so the service's /readyz says it.  Any other error is
// not this state: observe() returns false and the caller reports it as before.
// Threading: one loop's; not shared between threads.
#include <functional>
#include <string>

#include "common/core/result.h"
#include "common/metrics/degraded.h"

namespace h3pipe::worker {

// The degraded state an error means: "disk_full", "redis_cannot_persist", or "" (neither).
std::string storage_state(const Error& e);

class DiskHealth final {
 public:
  using OnChange = std::function<void(const std::string& reason)>;
  explicit DiskHealth(std::string what) : what_(std::move(what)) {}
  void on_change(OnChange f) { on_change_ = std::move(f); }
  // True when e is a storage state (counted; logged once per entry).
  bool observe(const Error& e);
  // A step went through: leaves the state (logged once) if it was in one.
  void ok();
  const std::string& reason() const { return reason_; }

 private:
  std::string what_;
  metrics::Degraded disk_full_{"disk_full", what_};
  metrics::Degraded cannot_persist_{"redis_cannot_persist", what_};
  std::string reason_;  // "" when not degraded
  OnChange on_change_;
};

}  // namespace h3pipe::worker
