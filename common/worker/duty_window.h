#pragma once
// A pool's duty cycle over a sliding window (issue #38 item 4; GET /v1/fleet): the fraction of the
// last `window_s` seconds it held a task (claimed, until it went idle), carried by its heartbeat.
// The pool board feeds it its busy/idle transitions; times are the caller's clock in seconds (any
// monotonic origin).  Not thread-safe: the board calls it under its own mutex.
#include <algorithm>
#include <deque>
#include <utility>

namespace h3pipe::worker {

class DutyWindow {
 public:
  static constexpr double kWindowS = 60;
  explicit DutyWindow(double start_s, double window_s = kWindowS)
      : start_s_(start_s), window_s_(window_s) {}

  // The pool is busy (true) or idle (false) from `now_s` on; a repeated state changes nothing.
  void set_busy(bool busy, double now_s) {
    if (busy && busy_since_ < 0) busy_since_ = now_s;
    if (!busy && busy_since_ >= 0) {
      spans_.emplace_back(busy_since_, now_s);
      busy_since_ = -1;
    }
    trim(now_s);
  }
  // Busy seconds / the window (or the time since start, when that is shorter), 0..1.
  double duty_cycle(double now_s) {
    trim(now_s);
    const double from = std::max(start_s_, now_s - window_s_);
    double busy = 0;
    for (const auto& [a, b] : spans_) busy += std::max(0.0, std::min(b, now_s) - std::max(a, from));
    if (busy_since_ >= 0) busy += std::max(0.0, now_s - std::max(busy_since_, from));
    const double span = now_s - from;
    return span > 0 ? std::clamp(busy / span, 0.0, 1.0) : 0.0;
  }
  // The seconds duty_cycle covers at `now_s`.
  double covered_s(double now_s) const {
    return std::max(0.0, now_s - std::max(start_s_, now_s - window_s_));
  }

 private:
  void trim(double now_s) {
    while (!spans_.empty() && spans_.front().second < now_s - window_s_) spans_.pop_front();
  }
  double start_s_, window_s_;
  double busy_since_ = -1;
  std::deque<std::pair<double, double>> spans_;  // busy [from, to), oldest first
};

}  // namespace h3pipe::worker
