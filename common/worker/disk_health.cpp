#include "common/worker/disk_health.h"

#include <cstring>

namespace h3pipe::worker {

std::string storage_state(const Error& e) {
  const bool enospc = e.message.find(std::strerror(ENOSPC)) != std::string::npos;
  // Redis's reply when it refuses writes after a failed AOF/RDB write ("MISCONF Errors writing to
  // the AOF file: No space left on device", "MISCONF Redis is configured to save RDB ...").
  const bool misconf = e.code == errc::redis::kError && e.message.rfind("MISCONF", 0) == 0;
  if (enospc) return "disk_full";
  if (misconf) return "redis_cannot_persist";
  return "";
}

bool DiskHealth::observe(const Error& e) {
  const std::string state = storage_state(e);
  if (state.empty()) return false;
  const bool redis = e.code == errc::redis::kError;
  const std::string reason =
      state == "disk_full"
          ? fmt::format("disk full ({}: {}){}", redis ? "Redis cannot write its data" : "ENOSPC",
                        e.message, redis ? "; Redis refuses every write until space is freed" : "")
          : fmt::format("Redis cannot persist ({}); it refuses every write until that is fixed",
                        e.message);
  (state == "disk_full" ? disk_full_ : cannot_persist_).hit(e.message);
  if (reason != reason_) {
    reason_ = reason;
    if (on_change_) on_change_(reason_);
  }
  return true;
}

void DiskHealth::ok() {
  disk_full_.ok();
  cannot_persist_.ok();
  if (!reason_.empty()) {
    reason_.clear();
    if (on_change_) on_change_("");
  }
}

}  // namespace h3pipe::worker
