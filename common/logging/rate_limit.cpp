#include "common/logging/rate_limit.h"

namespace h3pipe::logging {

LogRateLimit::Admit LogRateLimit::admit(std::string_view key, Clock::time_point now) {
  auto it = windows_.find(std::string(key));
  if (it == windows_.end()) {
    if (windows_.size() >= max_keys_) {
      for (auto w = windows_.begin(); w != windows_.end();)
        w = now - w->second.start >= period_ && w->second.held == 0 ? windows_.erase(w)
                                                                    : std::next(w);
    }
    // Still full: the overflow bucket (the empty key) takes the rest.
    const std::string k = windows_.size() >= max_keys_ ? std::string() : std::string(key);
    it = windows_.try_emplace(k, Window{now, 0, 0}).first;
  }
  Window& w = it->second;
  if (now - w.start >= period_) {
    w.start = now;
    w.lines = 0;
  }
  if (w.lines >= burst_) {
    ++w.held;
    ++suppressed_;
    return {false, 0};
  }
  ++w.lines;
  ++logged_;
  const Admit a{true, w.held};
  w.held = 0;
  return a;
}

}  // namespace h3pipe::logging
